package tools

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/svc-dev/svc"
)

type fuzzArgs struct {
	Name  string            `json:"name"`
	Count int               `json:"count,omitempty"`
	Tags  []string          `json:"tags,omitempty"`
	Meta  map[string]string `json:"meta,omitempty"`
	Inner *struct {
		OK bool `json:"ok"`
	} `json:"inner,omitempty"`
}

// FuzzFuncCall feeds model-made arguments to a function tool: Call must
// never panic, must fail only with a ToolExecutionError, and must pass the
// function only arguments that meet the schema.
func FuzzFuncCall(f *testing.F) {
	for _, s := range []string{
		`{"name":"a"}`, `{"name":"a","count":2,"tags":["x"],"meta":{"k":"v"},"inner":{"ok":true}}`,
		`{}`, ``, `null`, `[]`, `{"name":1}`, `{"name":"a","extra":1}`, `{"name":"a"} x`, `{"inner":null,"name":""}`,
	} {
		f.Add(s)
	}
	tool := MustFunc("fuzz", "", svc.AccessRead, func(_ context.Context, in fuzzArgs) (fuzzArgs, error) {
		return in, nil
	})
	f.Fuzz(func(t *testing.T, args string) {
		out, err := tool.Call(context.Background(), json.RawMessage(args))
		if err != nil {
			if !errors.Is(err, svc.ErrToolExecution) {
				t.Fatalf("Call(%q) error %v is not a ToolExecutionError", args, err)
			}
			return
		}
		var back fuzzArgs
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("Call(%q) = %s, not a fuzzArgs: %v", args, out, err)
		}
	})
}

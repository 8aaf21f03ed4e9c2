package testmodel

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/svc-dev/svc"
)

// FuzzGenerate feeds model_settings (as a JSON object, the way a spec file
// arrives) and tool schemas to the echo model and CheckSettings: they must
// never panic, and a tool call the model makes must carry JSON arguments.
func FuzzGenerate(f *testing.F) {
	f.Add(`{"tokens":3,"fail_on":"x"}`, `{"a":1}`, `{"type":"object","required":["q"],"properties":{"q":{"type":"string"}}}`)
	f.Add(`{"call_tools":"all","output":{"k":[1]}}`, `"hi"`, `{"type":"integer","minimum":3}`)
	f.Add(`{"call_tools":["t"],"latency_ms":0}`, `null`, `{"$ref":"#"}`)
	f.Add(`{"fail_times":1.5}`, `[]`, ``)
	f.Add(`{"call_tools":["t"],"tool_arguments":{"t":{"n":1.5e3}}}`, `1`, `{"type":"object"}`)
	f.Fuzz(func(t *testing.T, settings, input, toolSchema string) {
		var m map[string]any
		dec := json.NewDecoder(strings.NewReader(settings))
		dec.UseNumber()
		if dec.Decode(&m) != nil {
			return
		}
		_ = CheckSettings(m, []string{"t"}, false) // must not panic
		if s, err := ParseSettings(m); err != nil || s.Latency > 0 {
			return // no sleeping in a fuzz loop
		}
		req := svc.ModelRequest{
			Messages: []svc.Message{{Role: svc.RoleUser, Content: json.RawMessage(input)}},
			Tools:    []svc.ToolSpec{{Name: "t", InputSchema: json.RawMessage(toolSchema)}},
			Settings: m,
		}
		model, _ := New("echo")
		resp, err := model.Generate(context.Background(), req)
		if err != nil {
			return
		}
		for _, c := range resp.ToolCalls {
			if !json.Valid(c.Arguments) {
				t.Fatalf("tool call arguments %q are not JSON", c.Arguments)
			}
		}
	})
}

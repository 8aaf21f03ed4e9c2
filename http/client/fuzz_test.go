package client

import (
	"encoding/json"
	"errors"
	"testing"

	svc "github.com/svc-dev/svc"
)

// FuzzErrorFromResponse checks that any error response becomes an
// *svc.Error that matches ErrRuntime, with a kind name only when the body
// is a JSON problem naming one, and never panics.
func FuzzErrorFromResponse(f *testing.F) {
	for _, s := range []struct {
		status int
		ct     string
		body   string
	}{
		{429, "application/problem+json", `{"type":"urn:svc:error:BudgetExceededError","status":429,"detail":"over","error":"BudgetExceededError","agent":"a","task_id":"t"}`},
		{500, "application/problem+json", `{"error":"FrobnicationError"}`},
		{502, "text/html", `<html>bad gateway</html>`},
		{404, "application/json", `{"error":"not found"}`},
		{400, "application/json; charset=utf-8", `{"detail":"x","error":"SpecValidationError"}`},
		{503, "application/problem+json", `[1,2]`},
		{500, "", ""},
	} {
		f.Add(s.status, s.ct, []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, status int, ct string, body []byte) {
		err := errorFromResponse(status, ct, body)
		var e *svc.Error
		if !errors.As(err, &e) || !errors.Is(err, svc.ErrRuntime) {
			t.Fatalf("errorFromResponse = %v (%T)", err, err)
		}
		if e.Kind != svc.KindRuntime && (!isJSON(ct) || !validKindName(string(e.Kind))) {
			t.Fatalf("kind %q from a non-problem body", e.Kind)
		}
		if e.Error() == "" {
			t.Fatal("empty error message")
		}
	})
}

// FuzzDecodeRunResult checks the decoding of a group run's answer: any body
// either yields exactly one envelope, the one its "group" key selects, or
// an error; never a panic.
func FuzzDecodeRunResult(f *testing.F) {
	for _, s := range []string{
		`{"agent_name":"echo","task_id":"t","success":true,"output":1,"error":null,"metadata":{"trace_id":"r"}}`,
		`{"group":true,"outputs":{"b":{"success":true,"output":1},"c":{"success":false}},"success":false,"metadata":{"group_name":"g"}}`,
		`{"group":false}`,
		`{"group":null}`,
		`{"outputs":{}}`,
		`null`,
		` null `,
		`{}`,
		`[1]`,
		`"x"`,
		`{"group":true,"outputs":[]}`,
		`{"group":true} {}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		res, err := decodeRunResult(data)
		if err != nil {
			if res.Agent != nil || res.Group != nil {
				t.Fatalf("error %v with a result %+v", err, res)
			}
			return
		}
		if (res.Agent == nil) == (res.Group == nil) {
			t.Fatalf("decoded %q to agent %v, group %v: want exactly one", data, res.Agent != nil, res.Group != nil)
		}
		var probe map[string]json.RawMessage
		if err := json.Unmarshal(data, &probe); err != nil {
			t.Fatalf("accepted %q, which is not a JSON object: %v", data, err)
		}
		if _, hasGroup := probe["group"]; hasGroup != (res.Group != nil) {
			t.Fatalf("body %q: \"group\" present %v, decoded as a group %v", data, hasGroup, res.Group != nil)
		}
	})
}

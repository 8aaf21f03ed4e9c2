package client

import (
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

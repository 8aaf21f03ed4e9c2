package server_test

import (
	"strings"
	"testing"

	"github.com/svc-dev/svc"
)

// max_concurrency as docs/api.md says: absent (or null) is the default; an
// explicit 0 is a 400 like every value outside 1..10000.
func TestGatherMaxConcurrencyPresence(t *testing.T) {
	srv, f := newRouter(t)
	for _, tc := range []struct {
		body string
		want int
	}{
		{`{"tasks":[{"input":1}]}`, svc.DefaultGatherConcurrency},
		{`{"tasks":[{"input":1}],"max_concurrency":null}`, svc.DefaultGatherConcurrency},
		{`{"tasks":[{"input":1}],"max_concurrency":1}`, 1},
		{`{"max_concurrency":7,"tasks":[{"input":1}]}`, 7},
	} {
		if r := do(t, srv, "POST", "/agents/echo/gather", tc.body); r.status != 200 {
			t.Fatalf("%s: %d %s", tc.body, r.status, r.body)
		}
		if _, n, _ := f.seenGather(); n != tc.want {
			t.Errorf("%s: max_concurrency passed as %d, want %d", tc.body, n, tc.want)
		}
	}
	p := problem(t, do(t, srv, "POST", "/agents/echo/gather", `{"tasks":[{"input":1}],"max_concurrency":0}`), 400)
	if p.Error != "SpecValidationError" || !strings.Contains(p.Detail, "max_concurrency 0") {
		t.Errorf("explicit 0: %s %q, want a SpecValidationError naming max_concurrency 0", p.Error, p.Detail)
	}
}

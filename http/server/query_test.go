package server_test

import (
	"strings"
	"testing"

	svc "github.com/svc-dev/svc"
)

// TestGatherQuery (issue 25 part 4): a streamed gather's max_concurrency
// is taken once or not at all. Given twice it was whichever the handler
// read (the first); in the query of a JSON body it was ignored.
func TestGatherQuery(t *testing.T) {
	srv, _ := streamRuntime(t)
	for _, tc := range []struct {
		target, contentType, body, want string
	}{
		{"/agents/echo/gather?max_concurrency=1&max_concurrency=500", svc.MediaNDJSON, "{\"input\":1}\n",
			`query parameter "max_concurrency" is given 2 times; give it once`},
		{"/agents/echo/gather?max_concurrency=1&max_concurrency=1", svc.MediaNDJSON, "{\"input\":1}\n",
			`query parameter "max_concurrency" is given 2 times; give it once`},
		{"/agents/echo/gather?max_concurency=5", svc.MediaNDJSON, "{\"input\":1}\n",
			`query parameter "max_concurency" is not known here (known: max_concurrency)`},
		{"/agents/echo/gather?max_concurrency=5", "application/json", `{"tasks":[{"input":1}]}`,
			`query parameter "max_concurrency" is for an application/x-ndjson body; an application/json body gives "max_concurrency" in the body`},
	} {
		p := problem(t, do(t, srv, "POST", tc.target, tc.body, "Content-Type", tc.contentType), 400)
		if p.Error != string(svc.KindSpecValidation) || p.Detail != tc.want {
			t.Errorf("%s (%s): %s %q, want SpecValidationError %q", tc.target, tc.contentType, p.Error, p.Detail, tc.want)
		}
	}
	// Once, it is taken.
	r := do(t, srv, "POST", "/agents/echo/gather?max_concurrency=2", "{\"input\":1}\n{\"input\":2}\n", "Content-Type", svc.MediaNDJSON)
	if _, sum := streamLines(t, r.body); r.status != 200 || sum.SuccessCount != 2 {
		t.Errorf("one max_concurrency: %d %s", r.status, r.body)
	}
	if r := do(t, srv, "POST", "/agents/echo/gather", `{"tasks":[{"input":1}],"max_concurrency":2}`); r.status != 200 || !strings.HasPrefix(string(r.body), "[") {
		t.Errorf("JSON gather: %d %s", r.status, r.body)
	}
}

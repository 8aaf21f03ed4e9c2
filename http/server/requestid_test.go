package server_test

import (
	"strings"
	"testing"

	svc "github.com/svc-dev/svc"
)

// TestEmptyRequestID (issue 25 part 4): "request_id": "" in a body, the
// task's or the envelope's, is a 400 like any other id outside the rule
// (1 to 128 printable ASCII characters, docs/api.md) on every route that
// takes one, and the backend never sees the request. It used to count as
// absent. null is still absent.
func TestEmptyRequestID(t *testing.T) {
	srv, f := newRouter(t)
	runs, _ := newRunRouter(t, "")
	const want = `request_id "": want 1 to 128 printable ASCII characters without spaces, like X-Request-Id`
	for _, tc := range []struct {
		name, path, body, field string
	}{
		{"bare task", "/agents/echo/run", `{"input":1,"request_id":""}`, "request_id"},
		{"envelope", "/agents/echo/run", `{"task":{"input":1},"request_id":""}`, "request_id"},
		{"envelope's task", "/agents/echo/run", `{"task":{"input":1,"request_id":""},"request_id":"b"}`, "task.request_id"},
		{"group bare task", "/groups/pair/run", `{"input":1,"request_id":""}`, "request_id"},
		{"group envelope", "/groups/pair/run", `{"task":{"input":1},"request_id":""}`, "request_id"},
		{"group envelope's task", "/groups/pair/run", `{"task":{"input":1,"request_id":""}}`, "task.request_id"},
		{"gather task", "/agents/echo/gather", `{"tasks":[{"input":1},{"input":2,"request_id":""}]}`, "tasks[1].request_id"},
		{"submit envelope", "/submit", `{"target":"echo","task":{"input":1},"request_id":""}`, "request_id"},
		{"submit task", "/submit", `{"target":"echo","task":{"input":1,"request_id":""}}`, "task.request_id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := srv
			if tc.path == "/submit" {
				s = runs
			}
			p := problem(t, do(t, s, "POST", tc.path, tc.body), 400)
			if wantField := strings.Replace(want, "request_id", tc.field, 1); p.Error != string(svc.KindSpecValidation) || p.Detail != wantField {
				t.Errorf("%s %s: %s %q, want SpecValidationError %q", tc.path, tc.body, p.Error, p.Detail, wantField)
			}
		})
	}
	if task, _ := f.seen(); task.Input != nil {
		t.Errorf("the backend ran %+v", task)
	}
	if tasks, _, _ := f.seenGather(); tasks != nil {
		t.Errorf("the backend gathered %+v", tasks)
	}

	// null is no request id: the header's, or a new one.
	r := do(t, srv, "POST", "/agents/echo/run", `{"task":{"input":1,"request_id":null},"request_id":null}`, "X-Request-Id", "from-header")
	if task, _ := f.seen(); r.status != 200 || task.RequestID != "from-header" {
		t.Errorf("null request ids: %d, trace id %q; want 200 and the header's id", r.status, task.RequestID)
	}
}

// TestEmptyRequestIDStreamedLine: in a streamed gather a bad line fails
// its task, not the batch (docs/api.md), and a line with an empty
// request_id is such a line, like one with any other invalid id.
func TestEmptyRequestIDStreamedLine(t *testing.T) {
	srv, _ := streamRuntime(t)
	body := `{"input":0}` + "\n" + `{"input":1,"request_id":""}` + "\n" + `{"input":2,"request_id":"a b"}` + "\n" + `{"input":3,"request_id":null}` + "\n"
	r := do(t, srv, "POST", "/agents/echo/gather", body, "Content-Type", svc.MediaNDJSON)
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	results, sum := streamLines(t, r.body)
	if sum.TaskCount != 4 || sum.SuccessCount != 2 {
		t.Fatalf("summary %+v, want 4 tasks, 2 succeeded", sum)
	}
	for i, want := range map[int]string{1: `task 1 (line 2): request_id ""`, 2: `task 2 (line 3): request_id "a b"`} {
		if res := results[i]; res.Success || res.Error == nil || !strings.HasPrefix(res.Error.Message, want) {
			t.Errorf("task %d: %+v, want a failure starting %q", i, res.Error, want)
		}
	}
	if !results[0].Success || !results[3].Success {
		t.Errorf("tasks 0 and 3 should have run: %+v %+v", results[0], results[3])
	}
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/http/client"
)

// A real svc serve, with its SQLite event store, lists every top-level
// request in GET /runs: a synchronous run, a gather, a group run, a
// submitted run (once, with its run id), the run whose model call spent
// the token budget (it kept its result) and the run the spent budget then
// refused; filtered by status and target, paged with a total, each row's
// trace keying its tree. since and until window the rollups.
func TestServeRunHistoryAndWindows(t *testing.T) {
	t.Parallel()
	// echo uses words in + words out tokens: 2 for "hi"; the long input
	// below crosses the budget.
	s := startServe(t, nil, "--specs", exampleSpecs, "--token-budget", "60")
	c, err := client.New(s.url)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	start := time.Now().UTC()

	if _, err := c.Run(ctx, "echo", svc.TaskSpec{Input: json.RawMessage(`"hi"`), RequestID: "h-run"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Gather(ctx, "echo", []svc.TaskSpec{{Input: json.RawMessage(`"a"`)}, {Input: json.RawMessage(`"b"`)}}, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RunGroup(ctx, "pipeline", svc.TaskSpec{Input: json.RawMessage(`"x"`), RequestID: "h-group"}); err != nil {
		t.Fatal(err)
	}
	runID, err := c.Submit(ctx, svc.SubmitRequest{Target: "echo", Task: svc.TaskSpec{Input: json.RawMessage(`"s"`), RequestID: "h-sub"}})
	if err != nil {
		t.Fatal(err)
	}
	for {
		st, err := c.RunStatus(ctx, runID)
		if err != nil {
			t.Fatal(err)
		}
		if st.State == svc.RunCompleted {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	long := `"` + strings.Repeat("word ", 40) + `"`
	if res, err := c.Run(ctx, "echo", svc.TaskSpec{Input: json.RawMessage(long), RequestID: "h-over"}); err != nil || !res.Success {
		t.Fatalf("the run that spends the budget: %+v, %v; want its result", res, err)
	}
	if _, err := c.Run(ctx, "echo", svc.TaskSpec{Input: json.RawMessage(`"late"`), RequestID: "h-refused"}); !errors.Is(err, svc.ErrBudgetExceeded) {
		t.Fatalf("the run after the budget: %v, want BudgetExceededError", err)
	}
	end := time.Now().UTC()

	// The store emitter batches: wait until all six are listed.
	var page svc.RunPage
	for {
		if page, err = c.RunHistory(ctx, client.HistoryFilter{}); err != nil {
			t.Fatal(err)
		}
		if page.Total != nil && *page.Total == 6 && page.Runs[0].Status == svc.RunStatusRejected || ctx.Err() != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	type row struct{ trace, typ, target, status, state string }
	var got []row
	for _, r := range page.Runs {
		trace := r.TraceID
		if r.Type == svc.RunTypeGather {
			trace = "(gather)" // its trace id is the batch's, made by the server
		}
		got = append(got, row{trace, r.Type, r.Target, r.Status, string(r.State)})
	}
	want := []row{
		{"h-refused", "run", "echo", "rejected", "failed"},
		{"h-over", "run", "echo", "completed", "completed"},
		{"h-sub", "submitted", "echo", "completed", "completed"},
		{"h-group", "group", "pipeline", "completed", "completed"},
		{"(gather)", "gather", "echo", "completed", "completed"},
		{"h-run", "run", "echo", "completed", "completed"},
	}
	if !jsonEqual(got, want) {
		t.Fatalf("GET /runs rows (newest first):\n got %+v\nwant %+v\npage %s", got, want, mustMarshal(page))
	}
	for _, r := range page.Runs {
		if (r.RunID != "") != (r.Type == svc.RunTypeSubmitted) || (r.Type == svc.RunTypeSubmitted && r.RunID != runID) {
			t.Errorf("row %+v: only the submitted run has a run id (%s)", r, runID)
		}
		if r.Type == svc.RunTypeSubmitted {
			continue // a submitted run's tree is there too, but its row comes from the run store
		}
		if tree, err := c.Tree(ctx, r.TraceID); err != nil || tree.Root == nil {
			t.Errorf("tree of row %s: %+v, %v", r.TraceID, tree, err)
		}
	}

	// Filters, and pages of two read back to back.
	for _, f := range []struct {
		filter client.HistoryFilter
		traces []string
	}{
		{client.HistoryFilter{Status: "rejected"}, []string{"h-refused"}},
		{client.HistoryFilter{Target: "pipeline"}, []string{"h-group"}},
		{client.HistoryFilter{Status: "completed", Target: "echo"}, []string{"h-over", "h-sub", "", "h-run"}},
		{client.HistoryFilter{Status: "running"}, nil},
	} {
		p, err := c.RunHistory(ctx, f.filter)
		if err != nil {
			t.Fatal(err)
		}
		var traces []string
		for _, r := range p.Runs {
			if r.Type == svc.RunTypeGather {
				r.TraceID = ""
			}
			traces = append(traces, r.TraceID)
		}
		if !jsonEqual(traces, f.traces) || *p.Total != int64(len(f.traces)) {
			t.Errorf("RunHistory(%+v) = %v (total %d), want %v", f.filter, traces, *p.Total, f.traces)
		}
	}
	var paged []string
	f := client.HistoryFilter{Limit: 2}
	for range 10 {
		p, err := c.RunHistory(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range p.Runs {
			paged = append(paged, r.TraceID)
		}
		if *p.Total != 6 {
			t.Errorf("page total = %d, want 6 on every page", *p.Total)
		}
		if p.NextCursor == "" {
			break
		}
		f.Cursor = p.NextCursor
	}
	var all []string
	for _, r := range page.Runs {
		all = append(all, r.TraceID)
	}
	if !jsonEqual(paged, all) {
		t.Errorf("pages of two = %v, want %v", paged, all)
	}
	// The route's first form: state= lists the submitted runs alone.
	legacy, err := c.ListRuns(ctx, svc.RunFilter{State: svc.RunCompleted})
	if err != nil || len(legacy.Runs) != 1 || legacy.Runs[0].RunID != runID {
		t.Errorf("GET /runs?state=completed = %+v, %v; want the submitted run", legacy, err)
	}

	// Windows: the whole test, nothing before it, and durations.
	whole, err := c.Usage(ctx, svc.GroupByAgent)
	if err != nil {
		t.Fatal(err)
	}
	in, err := c.UsageIn(ctx, svc.GroupByAgent, svc.Window{Since: start.Add(-time.Second), Until: end.Add(time.Second)})
	if err != nil || !jsonEqual(in, whole) || whole.Total.Invocations != 8 {
		t.Errorf("usage in the test's window = %+v, %v; want all of it, 8 invocations: %+v", in, err, whole)
	}
	before, err := c.UsageIn(ctx, svc.GroupByAgent, svc.Window{Until: start.Add(-time.Second)})
	if err != nil || before.Total.Invocations != 0 {
		t.Errorf("usage before the test = %+v, %v; want none", before, err)
	}
	for _, path := range []string{"/usage?since=1h", "/tools?group_by=tool&since=10m&until=0s1ms", "/runtime/stats?since=1h", "/events?since=2h&limit=5"} {
		getStatus(t, s.url+path, http.StatusOK)
	}
	st, err := c.RuntimeStatsIn(ctx, svc.Window{Since: start.Add(-time.Second)})
	if err != nil || st.Header.Traces != 6 || st.Header.AgentsCompleted != 8 {
		t.Errorf("stats since the start = %+v, %v; want 6 traces and 8 completions", st.Header, err)
	}
	for _, bad := range []struct{ path, param string }{
		{"/usage?since=yesterday", "since"},
		{"/runtime/stats?until=-1h", "until"},
		{"/tools?group_by=tool&since=2026-13-01T00:00:00Z", "since"},
		{"/events?since=1h&until=2h", "until is before since"},
		{"/runs?status=done", "status"},
		{"/runs?cursor=nope", "cursor"},
	} {
		body := getStatus(t, s.url+bad.path, http.StatusBadRequest)
		if !strings.Contains(body, bad.param) {
			t.Errorf("GET %s: %s, want a problem naming %s", bad.path, body, bad.param)
		}
	}
}

// getStatus fetches u and checks its status (and, for an error, that it
// is problem+json); it returns the body.
func getStatus(t *testing.T, u string, status int) string {
	t.Helper()
	resp, body := get(t, u, nil)
	if resp.StatusCode != status {
		t.Errorf("GET %s = %d, want %d: %s", u, resp.StatusCode, status, body)
	}
	if status >= 400 && !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") {
		t.Errorf("GET %s: Content-Type %q, want application/problem+json", u, resp.Header.Get("Content-Type"))
	}
	return string(body)
}

func jsonEqual(a, b any) bool { return mustMarshal(a) == mustMarshal(b) }

func mustMarshal(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

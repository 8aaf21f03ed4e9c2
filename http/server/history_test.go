package server_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/eventstore"
	"github.com/svc-dev/svc/eventstore/memevents"
	"github.com/svc-dev/svc/http/server"
)

// listedBackend lists submitted runs as a run store does: newest first,
// in pages of f.Limit by an index cursor.
type listedBackend struct {
	*fakeBackend
	runs []svc.RunSummary // newest first
}

func (l *listedBackend) ListRuns(_ context.Context, f svc.RunFilter) (svc.RunPage, error) {
	start := 0
	if f.Cursor != "" {
		fmt.Sscan(f.Cursor, &start)
	}
	var out []svc.RunSummary
	i := start
	for ; i < len(l.runs) && len(out) < f.Limit; i++ {
		if f.State == "" || l.runs[i].State == f.State {
			out = append(out, l.runs[i])
		}
	}
	p := svc.RunPage{Runs: out}
	if i < len(l.runs) {
		p.NextCursor = fmt.Sprint(i)
	}
	return p, nil
}

// TestRunHistoryMergesStores: GET /runs interleaves the event store's runs
// and the run store's submitted runs by time, lists a submitted run's
// trace once (with its run id), filters both by status, target and type,
// counts the total, and pages back to back with nothing twice or left out.
func TestRunHistoryMergesStores(t *testing.T) {
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	store := memevents.New(eventstore.Retention{})
	t.Cleanup(func() { _ = store.Close() })
	b := &listedBackend{fakeBackend: &fakeBackend{}}
	var evs []svc.RuntimeEvent
	var want []string // newest first, by key
	for i := 11; i >= 0; i-- {
		at := t0.Add(time.Duration(i) * time.Second)
		trace := fmt.Sprintf("t%02d", i)
		agent := []string{"echo", "other"}[i%2]
		evs = append(evs,
			svc.RuntimeEvent{EventType: svc.EventAgentSpawned, Timestamp: at, AgentName: agent, TraceID: trace, Payload: svc.Payload{}},
			svc.RuntimeEvent{EventType: svc.EventAgentCompleted, Timestamp: at.Add(time.Millisecond), AgentName: agent, TraceID: trace, Payload: svc.Payload{"tokens_used": 1}})
		if i%3 == 0 { // submitted: the run store has it too, created just before its first event
			b.runs = append(b.runs, svc.RunSummary{RunID: fmt.Sprintf("run-%02d", i), Target: agent, Kind: svc.TargetAgent,
				State: svc.RunCompleted, TraceID: trace, CreatedAt: at.Add(-time.Millisecond), UpdatedAt: at})
			want = append(want, fmt.Sprintf("run-%02d", i))
		} else {
			want = append(want, trace)
		}
	}
	b.runs = append(b.runs, svc.RunSummary{RunID: "run-pending", Target: "echo", Kind: svc.TargetAgent, State: svc.RunPending,
		TraceID: "never-started", CreatedAt: t0.Add(-time.Hour)})
	want = append(want, "run-pending")
	if err := store.Write(t.Context(), evs); err != nil {
		t.Fatal(err)
	}
	h, err := server.NewStandalone(b, server.StandaloneConfig{Events: store})
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, h)
	key := func(r svc.RunSummary) string {
		if r.RunID != "" {
			return r.RunID
		}
		return r.TraceID
	}
	read := func(path string) ([]string, svc.RunPage) {
		t.Helper()
		page := decode[svc.RunPage](t, do(t, srv, "GET", path, ""))
		var keys []string
		for _, r := range page.Runs {
			keys = append(keys, key(r))
		}
		return keys, page
	}

	got, page := read("/runs")
	if !slices.Equal(got, want) || page.Total == nil || *page.Total != 13 {
		t.Fatalf("GET /runs = %v (total %v), want %v (13)", got, page.Total, want)
	}
	for _, r := range page.Runs {
		if r.RunID == "" && (r.Type != svc.RunTypeRun || r.Status != svc.RunStatusCompleted || r.State != svc.RunCompleted) {
			t.Errorf("event store row %+v", r)
		}
		if r.RunID != "" && r.Type != svc.RunTypeSubmitted {
			t.Errorf("submitted row %+v", r)
		}
	}
	var paged []string
	for cursor := ""; ; {
		keys, p := read("/runs?limit=5&cursor=" + cursor)
		paged = append(paged, keys...)
		if p.NextCursor == "" || len(paged) > 20 {
			break
		}
		cursor = p.NextCursor
	}
	if !slices.Equal(paged, want) {
		t.Errorf("pages of 5 = %v, want %v", paged, want)
	}

	for path, want := range map[string][]string{
		"/runs?status=spawned":                    {"run-pending"},
		"/runs?type=submitted&target=other":       {"run-09", "run-03"},
		"/runs?type=run&target=echo&limit=2":      {"t10", "t08"},
		"/runs?status=completed&type=run&limit=1": {"t11"},
	} {
		if got, _ := read(path); !slices.Equal(got, want) {
			t.Errorf("GET %s = %v, want %v", path, got, want)
		}
	}
	if _, p := read("/runs?type=run&target=echo&limit=2"); *p.Total != 4 {
		t.Errorf("total of echo's unsubmitted runs = %d, want 4", *p.Total)
	}
	// The first form: the run store's page, its cursor, no total.
	if got, p := read("/runs?state=pending"); !slices.Equal(got, []string{"run-pending"}) || p.Total != nil || p.Runs[0].Status != svc.RunStatusSpawned {
		t.Errorf("GET /runs?state=pending = %v, %+v", got, p)
	}
	if got, _ := read("/runs?type=submitted&limit=2"); !slices.Equal(got, []string{"run-09", "run-06"}) {
		t.Errorf("GET /runs?type=submitted = %v", got)
	}
	for _, q := range []string{"status=done", "type=batch", "state=running&status=running", "cursor=abc", "limit=0"} {
		problem(t, do(t, srv, "GET", "/runs?"+q, ""), http.StatusBadRequest)
	}
}

package storetest

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/svc-dev/svc"
)

// Waiting runs (issue 31): a run that paused for a person is in state
// waiting, its run_waiting event keeps the request it waits for, it takes
// steps while it waits (the decision a resume records), a process's
// start neither fails nor claims it (it holds nothing a death took), and
// it goes back to running when answered, or ends when cancelled.

func waitingEvent(id string) svc.RunEvent {
	deadline := base.Add(time.Hour)
	return svc.RunEvent{Type: svc.RunRunWaiting, Agent: "writer", TaskID: "task-" + id, Timestamp: ts(5),
		Request: &svc.WaitRequest{ID: "req_" + id, Kind: svc.WaitApproval, Agent: "writer", TaskID: "task-" + id,
			SpanID: "span-1", Tool: "write_file", Arguments: json.RawMessage(`{"path":"a.txt","é":[1,2.5]}`),
			CreatedAt: ts(4), Deadline: &deadline, OnTimeout: svc.TimeoutDeny}}
}

func testWaiting(t *testing.T, s svc.RunStore) {
	ctx := t.Context()
	driveTask(t, s, "w", svc.RunRunning, ts(0))
	ev := waitingEvent("w")
	mustOK(t, "SetState running → waiting", s.SetState(ctx, "w", svc.RunWaiting, "", &ev))
	if got := get(t, s, "w"); got.State != svc.RunWaiting {
		t.Fatalf("state %q, want waiting", got.State)
	}
	evs := eventsOf(t, s, "w", 0)
	if len(evs) != 1 || evs[0].Type != svc.RunRunWaiting || evs[0].Request == nil {
		t.Fatalf("events %+v, want one run_waiting with its request", evs)
	}
	want := *ev.Request
	got := *evs[0].Request
	if got.Deadline == nil || !got.Deadline.Equal(*want.Deadline) || !got.CreatedAt.Equal(want.CreatedAt) {
		t.Errorf("request times: got %v, %v; want %v, %v", got.Deadline, got.CreatedAt, want.Deadline, want.CreatedAt)
	}
	got.Deadline, want.Deadline, got.CreatedAt, want.CreatedAt = nil, nil, time.Time{}, time.Time{}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("request read back\n got %+v\nwant %+v", got, want)
	}
	// A waiting run is not the process's to fail or claim at its start.
	driveTask(t, s, "r", svc.RunRunning, ts(1))
	if rs, ok := s.(svc.ResumableStore); ok {
		claimed, _ := recoverRuns(t, rs)
		for _, c := range claimed {
			if c.RunID == "w" {
				t.Errorf("Recover claimed the waiting run")
			}
		}
	} else {
		_, err := s.Interrupt(ctx)
		mustOK(t, "Interrupt", err)
	}
	if got := get(t, s, "w"); got.State != svc.RunWaiting || got.Resumed != 0 {
		t.Fatalf("after a process start: state %q resumed %d, want waiting, 0", got.State, got.Resumed)
	}
	if _, err := s.Interrupt(ctx); err != nil {
		t.Fatal(err)
	}
	if got := get(t, s, "w"); got.State != svc.RunWaiting {
		t.Fatalf("after Interrupt: state %q, want waiting", got.State)
	}
	// Answered: back to running, then on to its end.
	mustOK(t, "SetState waiting → running", s.SetState(ctx, "w", svc.RunRunning, "", nil))
	mustOK(t, "Finish", s.Finish(ctx, "w", svc.RunCompleted, "", json.RawMessage(`{"ok":true}`), nil))
	// Cancelled while waiting: it ends at once.
	driveTask(t, s, "c", svc.RunRunning, ts(2))
	ev = waitingEvent("c")
	mustOK(t, "SetState running → waiting", s.SetState(ctx, "c", svc.RunWaiting, "", &ev))
	mustOK(t, "cancel a waiting run", s.SetState(ctx, "c", svc.RunCancelled, "cancelled",
		&svc.RunEvent{Type: svc.RunRunCancelled, Timestamp: ts(6)}))
	if got := get(t, s, "c"); got.State != svc.RunCancelled {
		t.Errorf("cancelled waiting run: state %q", got.State)
	}
	mustKind(t, "complete a waiting run", func() error {
		driveTask(t, s, "x", svc.RunRunning, ts(3))
		ev := waitingEvent("x")
		mustOK(t, "SetState running → waiting", s.SetState(ctx, "x", svc.RunWaiting, "", &ev))
		return s.Finish(ctx, "x", svc.RunCompleted, "", nil, nil)
	}(), svc.ErrRunState)
}

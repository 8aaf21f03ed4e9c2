package submitted_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/internal/faultstore"
	"github.com/svc-dev/svc/stores/memstore"
	"github.com/svc-dev/svc/supervisor/submitted"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newRecorder(t *testing.T) (*submitted.Recorder, *faultstore.Store) {
	t.Helper()
	fs := faultstore.New(memstore.New())
	t.Cleanup(func() { _ = fs.Close() })
	r := submitted.New(fs, 0, zap.NewNop())
	t.Cleanup(r.Stop)
	return r, fs
}

func create(t *testing.T, r *submitted.Recorder, id string) {
	t.Helper()
	if err := r.Create(context.Background(), svc.RunRecord{RunID: id, Target: "a", Kind: svc.TargetAgent, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
}

// The writer stores a run's events in order and its last progress, all of
// it by Close, and a write that keeps failing stops the run's work.
func TestWriter(t *testing.T) {
	r, fs := newRecorder(t)
	ctx := context.Background()
	create(t, r, "r1")
	if err := r.SetState("r1", svc.RunRunning, "", nil); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	w := r.NewWriter("r1", cancel)
	for i := range 50 {
		w.Event(svc.RunEvent{Type: svc.RunAgentCompleted, Agent: string(rune('a' + i%26)), Timestamp: time.Now()})
		w.Progress(svc.RunProgress{Total: 50, Completed: i + 1})
	}
	w.Close()
	evs, err := fs.Events(ctx, "r1", 0)
	if err != nil || len(evs) != 50 {
		t.Fatalf("stored %d events (%v), want 50", len(evs), err)
	}
	for i, ev := range evs {
		if want := string(rune('a' + i%26)); ev.Agent != want {
			t.Fatalf("event %d is %q, want %q: out of order", i, ev.Agent, want)
		}
	}
	if rec, _ := fs.Get(ctx, "r1"); rec.Progress == nil || rec.Progress.Completed != 50 {
		t.Fatalf("stored progress %+v, want the last update", rec.Progress)
	}
	if cctx.Err() != nil {
		t.Fatal("a writer with no failure cancelled its run")
	}

	// Every try of an append fails: the run is stopped with ErrStoreWrite.
	create(t, r, "r2")
	if err := r.SetState("r2", svc.RunRunning, "", nil); err != nil {
		t.Fatal(err)
	}
	fs.Fail(faultstore.Append, -1, nil)
	before := fs.Calls(faultstore.Append)
	cctx2, cancel2 := context.WithCancelCause(ctx)
	defer cancel2(nil)
	w2 := r.NewWriter("r2", cancel2)
	w2.Event(svc.RunEvent{Type: svc.RunAgentCompleted, Timestamp: time.Now()})
	w2.Close()
	if !errors.Is(context.Cause(cctx2), submitted.ErrStoreWrite) {
		t.Fatalf("run cause %v, want ErrStoreWrite", context.Cause(cctx2))
	}
	if n := fs.Calls(faultstore.Append) - before; n != 3 {
		t.Fatalf("append tried %d times, want 3", n)
	}
}

// A run whose write could not be made ends failed with store_error, its
// failed result and run_failed last, even from pending.
func TestFailRun(t *testing.T) {
	r, fs := newRecorder(t)
	ctx := context.Background()
	create(t, r, "p")
	r.FailRun("p", "a", svc.TaskSpec{ID: "t1", RequestID: "tr"})
	rec, err := fs.Get(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != svc.RunFailed || rec.Reason != submitted.ReasonStoreError {
		t.Fatalf("run is %s (%q), want failed (store_error)", rec.State, rec.Reason)
	}
	var res svc.AgentResult
	if err := json.Unmarshal(rec.Result, &res); err != nil || res.Success || res.Error == nil || res.Error.Reason != submitted.ReasonStoreError || res.TaskID != "t1" {
		t.Fatalf("result %s (%v): want a failed result with reason store_error", rec.Result, err)
	}
	evs, _ := fs.Events(ctx, "p", 0)
	if len(evs) == 0 || evs[len(evs)-1].Type != svc.RunRunFailed {
		t.Fatalf("events %+v: want run_failed last", evs)
	}

	// A run cancelled meanwhile stays cancelled.
	create(t, r, "c")
	if err := fs.SetState(ctx, "c", svc.RunCancelled, "cancelled", nil); err != nil {
		t.Fatal(err)
	}
	r.FailRun("c", "a", svc.TaskSpec{})
	if rec, _ := fs.Get(ctx, "c"); rec.State != svc.RunCancelled {
		t.Fatalf("a cancelled run became %s", rec.State)
	}
}

// A refusal is not retried; a transient failure is, until Stop.
func TestRetries(t *testing.T) {
	r, fs := newRecorder(t)
	create(t, r, "x")
	if err := r.SetState("x", svc.RunCompleted, "", nil); !errors.Is(err, svc.ErrRunState) {
		t.Fatalf("pending → completed: %v, want a RunStateError", err)
	}
	if n := fs.Calls(faultstore.SetState); n != 1 {
		t.Fatalf("a refused move tried %d times, want 1", n)
	}
	fs.Fail(faultstore.SetState, 2, nil)
	if err := r.SetState("x", svc.RunRunning, "", nil); err != nil {
		t.Fatalf("two transient failures, then success: %v", err)
	}
	fs.Fail(faultstore.SetProgress, -1, nil)
	r.Stop()
	if err := r.SetProgress("x", svc.RunProgress{}); !errors.Is(err, faultstore.ErrFault) {
		t.Fatalf("after Stop: %v, want the fault", err)
	}
	if n := fs.Calls(faultstore.SetProgress); n != 1 {
		t.Fatalf("after Stop a failing write was tried %d times, want 1 (no waiting)", n)
	}
}

// plainStore hides the store's own Idempotency-Keys: the recorder keeps
// them in memory.
type plainStore struct{ svc.RunStore }

func TestIdempotencyKeys(t *testing.T) {
	for name, store := range map[string]svc.RunStore{"store": memstore.New(), "memory": plainStore{memstore.New()}} {
		t.Run(name, func(t *testing.T) {
			defer store.Close()
			r := submitted.New(store, 0, zap.NewNop())
			defer r.Stop()
			ctx := context.Background()
			req := svc.SubmitRequest{Target: "a", Task: svc.TaskSpec{Input: json.RawMessage(`1`), RequestID: "one"}}
			id, created, err := r.CreateKeyed(ctx, "k", submitted.Fingerprint(req), svc.RunRecord{RunID: "r1", Target: "a", Kind: svc.TargetAgent})
			if err != nil || !created || id != "r1" {
				t.Fatalf("first: %q %v %v", id, created, err)
			}
			// A retry with a new request id is the same request.
			req.Task.RequestID = "two"
			id, created, err = r.CreateKeyed(ctx, "k", submitted.Fingerprint(req), svc.RunRecord{RunID: "r2", Target: "a", Kind: svc.TargetAgent})
			if err != nil || created || id != "r1" {
				t.Fatalf("retry: %q %v %v, want r1 not created", id, created, err)
			}
			req.Task.Input = json.RawMessage(`2`)
			_, _, err = r.CreateKeyed(ctx, "k", submitted.Fingerprint(req), svc.RunRecord{RunID: "r3", Target: "a", Kind: svc.TargetAgent})
			if !errors.Is(err, svc.ErrRunState) || !strings.Contains(err.Error(), "different request") {
				t.Fatalf("another request under the key: %v", err)
			}
			if _, err := store.Get(ctx, "r3"); err == nil {
				t.Fatal("a conflicting request stored a run")
			}
		})
	}
}

package supervisor_test

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/internal/faultstore"
	"github.com/svc-dev/svc/stores/sqlitestore"
	"github.com/svc-dev/svc/supervisor"
)

// A submitted run the runtime's shutdown cuts short ends failed, and its
// progress says so: the invocation it was waiting for counts failed, not
// running.
//
// (A store that resumes runs keeps such a run running for the next
// process instead: resume_test.go. This is the store that does not.)
func TestSubmitShutdownSettlesProgress(t *testing.T) {
	st, err := sqlitestore.Open(filepath.Join(t.TempDir(), "runs.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rt := storeRuntime(t, interruptingStore{st}, echo("slow", map[string]any{"latency_ms": 60000}))
	id := submitRunning(t, rt, "slow")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_ = rt.Shutdown(ctx) // reports the run it had to cancel

	rec, err := st.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != svc.RunFailed {
		t.Fatalf("run after shutdown: %s, want failed", rec.State)
	}
	if p := rec.Progress; p == nil || p.Running != 0 || p.Failed != 1 || p.Total != 1 {
		t.Errorf("progress of the failed run = %+v, want total 1, failed 1, running 0", p)
	}
}

// A run another runtime marked failed ("interrupted") stays as that left it
// when its own runtime finishes it later: no late progress, result, event
// or state lands on it. (One server per data directory keeps this from
// happening to a live run; the store is what guarantees it.)
func TestInterruptedRunNotResurrected(t *testing.T) {
	path := filepath.Join(t.TempDir(), "runs.db")
	st1, err := sqlitestore.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer st1.Close()
	// Slow enough that the second runtime has started before it ends, even
	// on a loaded machine (300 ms was not: make check saw the run complete
	// first).
	rt1 := storeRuntime(t, st1, echo("slow", map[string]any{"latency_ms": 3000}))
	id := submitRunning(t, rt1, "slow")

	// A second runtime on the same file: its start interrupts the run.
	st2, err := sqlitestore.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	rt2 := storeRuntime(t, interruptingStore{st2}) // one that interrupts rather than resumes
	ctx := context.Background()
	interrupted, err := st2.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if interrupted.State != svc.RunFailed || interrupted.Reason != "interrupted" {
		t.Fatalf("run after the second runtime's start: %s (%s), want failed (interrupted)", interrupted.State, interrupted.Reason)
	}
	events, err := st2.Events(ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	_ = rt2.Shutdown(ctx)

	// The first runtime's run finishes now; Shutdown waits for it to be
	// recorded (or refused).
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := rt1.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	got, err := st1.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != interrupted.State || got.Reason != interrupted.Reason || !bytes.Equal(got.Result, interrupted.Result) ||
		!reflect.DeepEqual(got.Progress, interrupted.Progress) {
		t.Errorf("interrupted run after its runtime finished it:\n got %+v\nwant %+v", got, interrupted)
	}
	after, err := st1.Events(ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(events) {
		t.Errorf("events of the interrupted run: %d, then %d after its runtime finished it: %+v", len(events), len(after), after)
	}
}

// interruptingStore hides what a store has beyond svc.RunStore: a runtime on it
// interrupts the runs a previous process left rather than resume them.
type interruptingStore struct{ svc.RunStore }

func storeRuntime(t *testing.T, st svc.RunStore, agents ...svc.Agent) *supervisor.Runtime {
	t.Helper()
	rt, err := supervisor.New(supervisor.Config{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rt.Shutdown(ctx)
	})
	if err := rt.Register(agents...); err != nil {
		t.Fatal(err)
	}
	return rt
}

// submitRunning submits a run and waits until its invocation is running.
func submitRunning(t *testing.T, rt *supervisor.Runtime, target string) string {
	t.Helper()
	id, err := rt.Submit(context.Background(), svc.SubmitRequest{Target: target, Task: svc.TaskSpec{Input: json.RawMessage(`1`)}})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		s, err := rt.RunStatus(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if s.State == svc.RunRunning && s.Progress != nil && s.Progress.Running == 1 {
			return id
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run did not start: %+v", s)
		}
	}
}

// A run whose events cannot be stored is stopped and fails (store_error);
// its progress is still the final one, the stopped invocation counted
// failed, not left running.
func TestStoreErrorSettlesProgress(t *testing.T) {
	rt, fs, _ := faultRuntime(t, supervisor.Config{}, echo("slow", map[string]any{"latency_ms": 30000}))
	fs.Fail(faultstore.Append, -1, nil)
	id := submitEcho(t, rt, "slow")
	rec, _ := waitEnd(t, rt, fs, id)
	if rec.State != svc.RunFailed || rec.Reason != "store_error" {
		t.Fatalf("run %s %s (%s), want failed (store_error)", id, rec.State, rec.Reason)
	}
	if p := rec.Progress; p == nil || p.Running != 0 || p.Failed != 1 {
		t.Errorf("progress of the failed run = %+v, want failed 1, running 0", p)
	}
}

package supervisor_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/internal/faultstore"
	"github.com/svc-dev/svc/stores/memstore"
	"github.com/svc-dev/svc/stores/sqlitestore"
	"github.com/svc-dev/svc/supervisor"
)

// faultRuntime is a runtime over a faultstore on memstore, logging to an
// observer.
func faultRuntime(t *testing.T, cfg supervisor.Config, agents ...svc.Agent) (*supervisor.Runtime, *faultstore.Store, *observer.ObservedLogs) {
	t.Helper()
	fs := faultstore.New(memstore.New())
	t.Cleanup(func() { _ = fs.Close() })
	core, logs := observer.New(zapcore.WarnLevel)
	cfg.Store, cfg.Logger = fs, zap.New(core)
	rt, err := supervisor.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := rt.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	if err := rt.Register(agents...); err != nil {
		t.Fatal(err)
	}
	return rt, fs, logs
}

func submitEcho(t *testing.T, rt *supervisor.Runtime, target string) string {
	t.Helper()
	id, err := rt.Submit(context.Background(), svc.SubmitRequest{Target: target, Task: svc.TaskSpec{Input: json.RawMessage(`{"a":1}`)}})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// waitEnd follows a run's stream to its end and returns the record.
func waitEnd(t *testing.T, rt *supervisor.Runtime, st svc.RunStore, id string) (svc.RunRecord, []svc.RunEvent) {
	t.Helper()
	ch, err := rt.RunEvents(context.Background(), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	evs := collect(t, ch)
	rec, err := st.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if !rec.State.Terminal() {
		t.Fatalf("stream of %s ended with the run %s", id, rec.State)
	}
	return rec, evs
}

// logged reports whether an entry at level names run id in its run_id field.
func logged(logs *observer.ObservedLogs, level zapcore.Level, id string) bool {
	for _, e := range logs.All() {
		if e.Level == level && e.ContextMap()["run_id"] == id {
			return true
		}
	}
	return false
}

// Transient failures of every write are retried and the run completes with
// all its events.
func TestSubmitRetriesTransientStoreErrors(t *testing.T) {
	rt, fs, logs := faultRuntime(t, supervisor.Config{}, echo("echo", nil))
	for _, m := range []faultstore.Method{faultstore.SetState, faultstore.Finish, faultstore.SetProgress, faultstore.Append} {
		fs.Fail(m, 2, nil)
	}
	id := submitEcho(t, rt, "echo")
	rec, evs := waitEnd(t, rt, fs, id)
	if rec.State != svc.RunCompleted {
		t.Fatalf("run %s %s (%s), want completed", id, rec.State, rec.Reason)
	}
	if len(evs) != 2 || evs[0].Type != svc.RunAgentStarted || evs[1].Type != svc.RunAgentCompleted {
		t.Fatalf("events %+v, want agent_started, agent_completed", evs)
	}
	if fs.Failed(faultstore.Finish) != 2 || fs.Failed(faultstore.Append) != 2 {
		t.Errorf("faults used: Finish %d, Append %d; want 2 each", fs.Failed(faultstore.Finish), fs.Failed(faultstore.Append))
	}
	if res, err := rt.RunResult(context.Background(), id); err != nil || !strings.Contains(string(res), `"success":true`) {
		t.Errorf("result %s, %v; want the successful result", res, err)
	}
	if !logged(logs, zapcore.WarnLevel, id) {
		t.Errorf("no warning with run_id %s: %v", id, logs.All())
	}
	if logged(logs, zapcore.ErrorLevel, id) {
		t.Errorf("an error was logged for a run that completed: %v", logs.All())
	}
}

// A result that cannot be stored (with the terminal state: one Finish)
// fails the run: its stream ends, the error is logged with the run id, and
// no result that says success is left behind.
func TestSubmitFailsRunWhenResultCannotBeStored(t *testing.T) {
	rt, fs, logs := faultRuntime(t, supervisor.Config{}, echo("echo", nil))
	fs.Fail(faultstore.Finish, 3, nil) // the three tries of the run's own end
	id := submitEcho(t, rt, "echo")
	rec, evs := waitEnd(t, rt, fs, id)
	if rec.State != svc.RunFailed || rec.Reason != "store_error" {
		t.Fatalf("run %s %s (%s), want failed (store_error)", id, rec.State, rec.Reason)
	}
	var res svc.AgentResult
	if err := json.Unmarshal(rec.Result, &res); err != nil || res.Success || res.Error == nil || res.Error.Reason != "store_error" {
		t.Errorf("result %s (%v), want a failed AgentResult with reason store_error", rec.Result, err)
	}
	if len(evs) == 0 || evs[len(evs)-1].Type != svc.RunRunFailed || evs[len(evs)-1].Error != "store_error" {
		t.Errorf("events %+v, want run_failed (store_error) last", evs)
	}
	if fs.Calls(faultstore.Finish) != 4 {
		t.Errorf("Finish tried %d times, want 4 (3 for the run's end, 1 for store_error)", fs.Calls(faultstore.Finish))
	}
	if !logged(logs, zapcore.ErrorLevel, id) {
		t.Errorf("no error logged with run_id %s: %v", id, logs.All())
	}
}

// The terminal state that cannot be stored becomes failed (store_error).
func TestSubmitFailsRunWhenStateCannotBeStored(t *testing.T) {
	rt, fs, logs := faultRuntime(t, supervisor.Config{}, echo("echo", nil))
	fs.FailState(svc.RunCompleted, -1, nil)
	id := submitEcho(t, rt, "echo")
	rec, _ := waitEnd(t, rt, fs, id)
	if rec.State != svc.RunFailed || rec.Reason != "store_error" {
		t.Fatalf("run %s %s (%s), want failed (store_error)", id, rec.State, rec.Reason)
	}
	if !logged(logs, zapcore.ErrorLevel, id) {
		t.Errorf("no error logged with run_id %s", id)
	}
}

// A run that cannot even start fails (through running: the state machine
// has no pending → failed).
func TestSubmitFailsRunThatCannotStart(t *testing.T) {
	rt, fs, _ := faultRuntime(t, supervisor.Config{}, echo("echo", nil))
	fs.Fail(faultstore.SetState, 3, nil) // the three tries of pending → running
	id := submitEcho(t, rt, "echo")
	rec, evs := waitEnd(t, rt, fs, id)
	if rec.State != svc.RunFailed || rec.Reason != "store_error" || len(evs) != 1 || evs[0].Type != svc.RunRunFailed {
		t.Fatalf("run %s %s (%s) with events %+v, want failed (store_error) with run_failed only", id, rec.State, rec.Reason, evs)
	}
	if res, err := rt.RunResult(context.Background(), id); err != nil || !strings.Contains(string(res), `"success":false`) {
		t.Errorf("result %s, %v; want the failed result", res, err)
	}
}

// Events that cannot be stored stop the work and fail the run: a history
// with a hole does not pass for complete.
func TestSubmitFailsRunWhenEventsCannotBeStored(t *testing.T) {
	rt, fs, logs := faultRuntime(t, supervisor.Config{}, echo("slow", map[string]any{"latency_ms": 30000}))
	fs.Fail(faultstore.Append, -1, nil)
	start := time.Now()
	id := submitEcho(t, rt, "slow")
	rec, _ := waitEnd(t, rt, fs, id)
	if rec.State != svc.RunFailed || rec.Reason != "store_error" {
		t.Fatalf("run %s %s (%s), want failed (store_error)", id, rec.State, rec.Reason)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the work went on for %v after its events were lost", d)
	}
	if !logged(logs, zapcore.ErrorLevel, id) {
		t.Errorf("no error logged with run_id %s", id)
	}
}

// When no write gets through, the run stays running in the store and the
// log says the next start fails it; that start does.
func TestSubmitStoreDownLeavesRunToInterrupt(t *testing.T) {
	inner := memstore.New()
	defer inner.Close()
	fs := faultstore.New(inner)
	core, logs := observer.New(zapcore.WarnLevel)
	rt, err := supervisor.New(supervisor.Config{Store: fs, Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Register(echo("echo", nil)); err != nil {
		t.Fatal(err)
	}
	fs.FailState(svc.RunCompleted, -1, nil)
	fs.FailState(svc.RunFailed, -1, nil)
	id := submitEcho(t, rt, "echo")
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(fmt.Sprint(logs.All()), "next start") {
		if time.Now().After(deadline) {
			t.Fatalf("no log of the run left unfinished: %v", logs.All())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !logged(logs, zapcore.ErrorLevel, id) {
		t.Errorf("no error logged with run_id %s", id)
	}
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	if rec, _ := inner.Get(context.Background(), id); rec.State != svc.RunRunning {
		t.Fatalf("run %s %s, want running (no write got through)", id, rec.State)
	}
	rt2, err := supervisor.New(supervisor.Config{Store: inner})
	if err != nil {
		t.Fatal(err)
	}
	defer rt2.Close()
	if rec, _ := inner.Get(context.Background(), id); rec.State != svc.RunFailed || rec.Reason != "interrupted" {
		t.Fatalf("after the next start: %s (%s), want failed (interrupted)", rec.State, rec.Reason)
	}
	// The interrupted run reads the same everywhere: status with the
	// reason, a failed result, a stream that ends with run_failed.
	if st, err := rt2.RunStatus(context.Background(), id); err != nil || st.Reason != svc.ReasonInterrupted {
		t.Errorf("status %+v, %v; want the reason interrupted", st, err)
	}
	res, err := rt2.RunResult(context.Background(), id)
	var ar svc.AgentResult
	if err != nil || json.Unmarshal(res, &ar) != nil || ar.Success || ar.Error == nil || ar.Error.Reason != svc.ReasonInterrupted || ar.AgentName != "echo" {
		t.Errorf("result %s, %v; want a failed AgentResult of echo with reason interrupted", res, err)
	}
	_, evs := waitEnd(t, rt2, inner, id)
	if len(evs) == 0 || evs[len(evs)-1].Type != svc.RunRunFailed {
		t.Errorf("events %+v, want run_failed last", evs)
	}
}

// A Create that fails is the caller's error, after its retries; nothing runs.
func TestSubmitCreateFailure(t *testing.T) {
	rt, fs, _ := faultRuntime(t, supervisor.Config{}, echo("echo", nil))
	fs.Fail(faultstore.Create, -1, nil)
	fs.Fail(faultstore.CreateIdempotent, -1, nil)
	for _, key := range []string{"", "k"} {
		_, err := rt.Submit(context.Background(), svc.SubmitRequest{Target: "echo", IdempotencyKey: key, Task: svc.TaskSpec{Input: json.RawMessage(`1`)}})
		if !errors.Is(err, faultstore.ErrFault) {
			t.Errorf("key %q: Submit = %v, want the store's error", key, err)
		}
	}
	if n := fs.Calls(faultstore.Create); n != 3 {
		t.Errorf("Create tried %d times, want 3", n)
	}
	if n := fs.Calls(faultstore.SetState); n != 0 {
		t.Errorf("SetState called %d times: something ran", n)
	}
	page, err := fs.Inner().(svc.RunLister).ListRuns(context.Background(), svc.RunFilter{})
	if err != nil || len(page.Runs) != 0 {
		t.Errorf("runs stored: %+v, %v", page.Runs, err)
	}
	// A refusal (not a failure) is not retried.
	fs.Heal()
	fs.Fail(faultstore.Create, 1, svc.Errorf(svc.KindSpecValidation, "bad"))
	if _, err := rt.Submit(context.Background(), svc.SubmitRequest{Target: "echo", Task: svc.TaskSpec{Input: json.RawMessage(`1`)}}); !errors.Is(err, svc.ErrSpecValidation) {
		t.Errorf("Submit = %v, want the refusal", err)
	}
	if n := fs.Calls(faultstore.Create); n != 4 {
		t.Errorf("Create tried %d times in all, want 4 (a refusal once)", n)
	}
}

// A transient Create failure is retried and the run goes on.
func TestSubmitCreateRetried(t *testing.T) {
	rt, fs, _ := faultRuntime(t, supervisor.Config{}, echo("echo", nil))
	fs.Fail(faultstore.Create, 2, nil)
	fs.Fail(faultstore.CreateIdempotent, 2, nil)
	id := submitEcho(t, rt, "echo")
	if rec, _ := waitEnd(t, rt, fs, id); rec.State != svc.RunCompleted {
		t.Fatalf("run %s, want completed", rec.State)
	}
	id2, err := rt.Submit(context.Background(), svc.SubmitRequest{Target: "echo", IdempotencyKey: "k", Task: svc.TaskSpec{Input: json.RawMessage(`1`)}})
	if err != nil {
		t.Fatal(err)
	}
	if rec, _ := waitEnd(t, rt, fs, id2); rec.State != svc.RunCompleted {
		t.Fatalf("keyed run %s, want completed", rec.State)
	}
}

func keyed(key string, input string) svc.SubmitRequest {
	return svc.SubmitRequest{Target: "echo", IdempotencyKey: key, Task: svc.TaskSpec{Input: json.RawMessage(input)}}
}

// Racing submits with one key make one run; another body under the key is
// a RunStateError naming the run.
func TestSubmitIdempotencyConcurrent(t *testing.T) {
	for name, store := range map[string]func() svc.RunStore{
		"memstore": func() svc.RunStore { return memstore.New() },
		// A store without keys of its own: the runtime keeps them.
		"plain": func() svc.RunStore { return plainStore{memstore.New()} },
	} {
		t.Run(name, func(t *testing.T) {
			st := store()
			defer st.Close()
			rt, err := supervisor.New(supervisor.Config{Store: st})
			if err != nil {
				t.Fatal(err)
			}
			defer rt.Close()
			if err := rt.Register(echo("echo", nil)); err != nil {
				t.Fatal(err)
			}
			var (
				wg  sync.WaitGroup
				mu  sync.Mutex
				ids = map[string]bool{}
			)
			for range 16 {
				wg.Go(func() {
					id, err := rt.Submit(context.Background(), keyed("k", `1`))
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					ids[id] = true
					mu.Unlock()
				})
			}
			wg.Wait()
			if len(ids) != 1 {
				t.Fatalf("16 submits with one key made runs %v", ids)
			}
			var first string
			for id := range ids {
				first = id
			}
			_, err = rt.Submit(context.Background(), keyed("k", `2`))
			if !errors.Is(err, svc.ErrRunState) || !strings.Contains(err.Error(), first) {
				t.Fatalf("another body under the key: %v, want a RunStateError naming %s", err, first)
			}
			page, err := st.(svc.RunLister).ListRuns(context.Background(), svc.RunFilter{})
			if err != nil || len(page.Runs) != 1 {
				t.Fatalf("runs stored: %+v, %v", page.Runs, err)
			}
		})
	}
}

type plainStore struct{ *memstore.Store }

// Only the svc.RunStore and svc.RunLister methods: no CreateIdempotent.
var _ interface {
	svc.RunStore
	svc.RunLister
} = plainStore{}

func (p plainStore) CreateIdempotent() {} // hides memstore's, so this is no IdempotentStore

func TestPlainStoreKeepsNoKeys(t *testing.T) {
	if _, ok := any(plainStore{}).(svc.IdempotentStore); ok {
		t.Fatal("plainStore is an IdempotentStore: the fallback goes untested")
	}
}

// Keys live in the store: a new runtime on the same file finds them, and
// after IdempotencyTTL a key makes a new run.
func TestSubmitIdempotencyKeysSurviveRestart(t *testing.T) {
	path := t.TempDir() + "/runs.db"
	open := func(ttl time.Duration) (*supervisor.Runtime, func()) {
		st, err := sqlitestore.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		rt, err := supervisor.New(supervisor.Config{Store: st, IdempotencyTTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		if err := rt.Register(echo("echo", nil)); err != nil {
			t.Fatal(err)
		}
		return rt, func() { _ = rt.Close(); _ = st.Close() }
	}
	rt, done := open(time.Hour)
	id1, err := rt.Submit(context.Background(), keyed("k", `1`))
	if err != nil {
		t.Fatal(err)
	}
	short, err := rt.Submit(context.Background(), keyed("short", `1`))
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, rt, id1, svc.RunCompleted)
	done()

	rt, done = open(200 * time.Millisecond)
	defer done()
	id2, err := rt.Submit(context.Background(), keyed("k", `1`))
	if err != nil || id2 != id1 {
		t.Fatalf("after restart: %s, %v; want %s", id2, err, id1)
	}
	if _, err := rt.Submit(context.Background(), keyed("k", `2`)); !errors.Is(err, svc.ErrRunState) {
		t.Fatalf("another body after restart: %v", err)
	}
	// "short" was kept for an hour by the first runtime; a key taken now
	// expires after this runtime's 200ms.
	id3, err := rt.Submit(context.Background(), keyed("new", `1`))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond)
	if id, _ := rt.Submit(context.Background(), keyed("new", `1`)); id == id3 || id == "" {
		t.Fatalf("key after its TTL gave %q, want a new run", id)
	}
	if id, _ := rt.Submit(context.Background(), keyed("short", `1`)); id != short {
		t.Fatalf("key kept for an hour gave %q, want %s", id, short)
	}
}

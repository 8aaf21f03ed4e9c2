// Package storetest is the contract suite every svc.RunStore passes.
//
// A store's tests call Run with a function that opens a fresh, empty store;
// persistent stores also call RunReopen, which opens a store twice on the
// same directory and checks that everything was kept. Each subtest opens its
// own store and closes it when it ends (Close is idempotent, so open may
// register its own Cleanup too).
//
// Beyond the svc.RunStore doc comments, the suite holds stores to these
// rules, so that callers see the same behaviour whatever the store:
//
//   - Create keeps RunID, Target, Kind and CreatedAt (now when zero), starts
//     the run pending with no progress, result or reason, and sets UpdatedAt
//     to CreatedAt. The suite never passes a State to Create.
//   - SetState, Finish, SetProgress and SetResult set UpdatedAt to the time
//     of the change; a refused call changes nothing.
//   - Finish is one change: after it Get shows the state, reason and result
//     together and its final event is the last; a nil result keeps the
//     stored one; a refused Finish (a non-terminal next state, a move the
//     state machine refuses, a run already terminal) changes nothing.
//   - Interrupt leaves each run it fails as svc.RunStore says: failed,
//     reason interrupted, svc.InterruptedResult, svc.InterruptedProgress
//     and a run_failed event last; a reopened store keeps all of it.
//   - Append and SetState's final event: the store assigns Seq (the caller's
//     is ignored) and RunID, and keeps Type, Agent, TaskID, Error and
//     Timestamp, setting Timestamp to now when it is zero.
//   - Times are kept to the microsecond at least. The suite passes times
//     already truncated to microseconds and compares them with time.Equal, so
//     a store may return them in any location.
//   - Results are kept byte-exact, and a store does not share memory with
//     its callers: changing a slice after SetResult, or one Get returned,
//     changes nothing stored. The same holds for Progress.
//   - Events on a run that has none is empty, not an error.
//   - Stream's channel also closes when the run becomes terminal by
//     Interrupt (after its run_failed frame), and when the store is closed.
//   - After Close, every method returns an error.
//   - Concurrent writes each get their own answer (ConcurrentLanding): a
//     store that commits several callers' writes together still refuses
//     exactly the ones the state machine refuses, and only those.
//
// Every store is also a svc.IdempotentStore (idempotent.go states its
// rules), a svc.ResumableStore (resume.go) and a svc.RunLister; list.go states the rules of its
// listings (order, pages, cursors, errors) that the List subtests check.
package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc"
)

// Wait bounds every wait of the suite for a stream event or a channel close;
// a store that needs longer is broken, not slow.
const Wait = 10 * time.Second

// ConcurrentRuns and EventsPerRun size the concurrency test, which also
// pages through all the runs up to ConcurrentListings times meanwhile.
const (
	ConcurrentRuns     = 100
	EventsPerRun       = 50
	ConcurrentListings = 10
)

// states lists the five run states in lifecycle order.
var states = []svc.RunState{svc.RunPending, svc.RunRunning, svc.RunCompleted, svc.RunFailed, svc.RunCancelled, svc.RunWaiting}

// base is a fixed time in the past with a sub-millisecond part, so a store
// keeping only milliseconds fails the time checks.
var base = time.Date(2025, 3, 14, 15, 9, 26, 535897000, time.UTC)

// ts returns the i-th test timestamp, truncated to microseconds.
func ts(i int) time.Time {
	return base.Add(time.Duration(i)*time.Millisecond + 123*time.Microsecond)
}

// Run runs the contract suite; open returns a fresh, empty store.
func Run(t *testing.T, open func(t *testing.T) svc.RunStore) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, s svc.RunStore)
	}{
		{"Create", testCreate},
		{"DuplicateCreate", testDuplicateCreate},
		{"UnknownRun", testUnknownRun},
		{"Transitions", testTransitions},
		{"InvalidStates", testInvalidStates},
		{"TerminalIsFinal", testTerminalIsFinal},
		{"Progress", testProgress},
		{"Result", testResult},
		{"Append", testAppend},
		{"SeqPerRun", testSeqPerRun},
		{"FinalEvent", testFinalEvent},
		{"Finish", testFinish},
		{"FinishRefused", testFinishRefused},
		{"StreamLive", testStreamLive},
		{"StreamResume", testStreamResume},
		{"StreamTerminal", testStreamTerminal},
		{"StreamContextCancel", testStreamContextCancel},
		{"StreamEndsOnInterrupt", testStreamEndsOnInterrupt},
		{"StreamEndsOnClose", testStreamEndsOnClose},
		{"Interrupt", testInterrupt},
		{"Concurrent", testConcurrent},
		{"ConcurrentLanding", testConcurrentLanding},
		{"Close", testClose},
		{"ListEmpty", testListEmpty},
		{"ListOrder", testListOrder},
		{"ListPaging", testListPaging},
		{"ListDefaultLimit", testListDefaultLimit},
		{"ListNewRunsBetweenPages", testListNewRunsBetweenPages},
		{"ListStateFilter", testListStateFilter},
		{"Tenant", testTenant},
		{"ListErrors", testListErrors},
		{"ListClosed", testListClosed},
		{"IdempotentSameKey", testIdempotentSameKey},
		{"IdempotentConflict", testIdempotentConflict},
		{"IdempotentExpiry", testIdempotentExpiry},
		{"IdempotentConcurrent", testIdempotentConcurrent},
		{"IdempotentClosed", testIdempotentClosed},
		{"StepsAppend", testStepsAppend},
		{"StepsInterleaved", testStepsInterleaved},
		{"StepsBound", testStepsBound},
		{"StepsRefused", testStepsRefused},
		{"StepsConcurrent", testStepsConcurrent},
		{"RunBatchAppend", testRunBatchAppend},
		{"RunBatchRefused", testRunBatchRefused},
		{"RunBatchFull", testRunBatchFull},
		{"RunBatchConcurrent", testRunBatchConcurrent},
		{"Task", testTask},
		{"Recover", testRecover},
		{"RecoverConcurrent", testRecoverConcurrent},
		{"Waiting", testWaiting},
		{"Batches", testBatches},
		{"BatchStates", testBatchStates},
		{"BatchList", testBatchList},
		{"BatchClaim", testBatchClaim},
		{"BatchProvider", testBatchProvider},
		{"BatchConcurrent", testBatchConcurrent},
		{"Webhooks", testWebhooks},
		{"WebhookClaim", testWebhookClaim},
		{"WebhookClaimConcurrent", testWebhookClaimConcurrent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t)
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
			tc.fn(t, s)
		})
	}
}

// RunReopen checks that a persistent store keeps everything across a close
// and a reopen: open returns a store kept in dir (a fresh t.TempDir() the
// first time), and is called again on the same dir once the previous store
// is closed.
func RunReopen(t *testing.T, open func(t *testing.T, dir string) svc.RunStore) {
	t.Helper()
	ctx := t.Context()
	dir := t.TempDir()
	reopen := func() svc.RunStore {
		s := open(t, dir)
		// Closed here too, should a check stop the test early.
		t.Cleanup(func() { _ = s.Close() })
		return s
	}

	s := reopen()
	// One run in each state, with progress, results, reasons and events.
	create(t, s, "p")
	mustOK(t, "SetProgress", s.SetProgress(ctx, "p", svc.RunProgress{Total: 2}))

	drive(t, s, "r", svc.RunRunning)
	mustOK(t, "SetProgress", s.SetProgress(ctx, "r", svc.RunProgress{Total: 3, Completed: 1, Failed: 1, Running: 1}))
	appendN(t, s, "r", 3)

	drive(t, s, "c", svc.RunRunning)
	appendN(t, s, "c", 2)
	mustOK(t, "SetResult", s.SetResult(ctx, "c", json.RawMessage(`{"output": "é\u00e9" , "n":[1, 2]}`)))
	checkReopenSteps := reopenSteps(t, s)
	mustOK(t, "SetState", s.SetState(ctx, "c", svc.RunCompleted, "", &svc.RunEvent{Type: svc.RunGroupCompleted, Timestamp: ts(50)}))

	drive(t, s, "f", svc.RunRunning)
	mustAppend(t, s, "f", svc.RunEvent{Type: svc.RunAgentFailed, Agent: "a", TaskID: "t1", Error: "boom", Timestamp: ts(7)}, 1)
	mustOK(t, "SetState", s.SetState(ctx, "f", svc.RunFailed, "boom", nil))

	drive(t, s, "x", svc.RunRunning)
	mustOK(t, "SetState", s.SetState(ctx, "x", svc.RunCancelled, "user", &svc.RunEvent{Type: svc.RunRunCancelled, Timestamp: ts(9)}))

	// A key made before the close holds after it.
	if id, created := createIdem(t, idem(t, s), "key", "fp", "k", time.Hour); id != "k" || !created {
		t.Fatalf("CreateIdempotent = %q, %v; want k, true", id, created)
	}
	mustOK(t, "SetState", s.SetState(ctx, "k", svc.RunCancelled, "", nil))

	checkReopenWebhooks := reopenWebhooks(t, s)
	ids := []string{"p", "r", "c", "f", "x"}
	records := map[string]svc.RunRecord{}
	events := map[string][]svc.RunEvent{}
	for _, id := range ids {
		records[id] = get(t, s, id)
		events[id] = eventsOf(t, s, id, 0)
	}
	// All six were created at ts(0): listed by id, descending.
	listed := []string{"x", "r", "p", "k", "f", "c"}
	checkListing(t, "before reopen", s, svc.RunFilter{Limit: 2}, listed)
	mustOK(t, "Close", s.Close())

	s = reopen()
	for _, id := range ids {
		checkRecord(t, "after reopen, "+id, get(t, s, id), records[id])
		checkEvents(t, "after reopen, "+id, eventsOf(t, s, id, 0), events[id])
	}
	checkListing(t, "after reopen", s, svc.RunFilter{Limit: 2}, listed)
	checkListing(t, "running after reopen", s, svc.RunFilter{State: svc.RunRunning, Limit: 1}, []string{"r"})
	checkReopenSteps(t, s)
	checkReopenWebhooks(t, s)
	// The reopened store goes on where the first left off.
	mustAppend(t, s, "r", svc.RunEvent{Type: svc.RunAgentStarted, Agent: "b", Timestamp: ts(60)}, 4)
	mustKind(t, "Create duplicate after reopen", s.Create(ctx, svc.RunRecord{RunID: "c", Target: "t", Kind: "agent"}), svc.ErrRunState)
	mustKind(t, "Append to a terminal run after reopen", appendErr(s, "c"), svc.ErrRunState)
	if id, created := createIdem(t, idem(t, s), "key", "fp", "k2", time.Hour); id != "k" || created {
		t.Errorf("CreateIdempotent after reopen = %q, %v; want k, false (the key survives)", id, created)
	}
	_, _, err := idem(t, s).CreateIdempotent(ctx, "key", "other", svc.RunRecord{RunID: "k3", Target: "echo", Kind: "agent"}, time.Hour)
	mustKind(t, "CreateIdempotent with another fingerprint after reopen", err, svc.ErrRunState)
	create(t, s, "n")
	records["n"] = get(t, s, "n")
	n, err := s.Interrupt(ctx)
	mustOK(t, "Interrupt", err)
	if n != 3 {
		t.Errorf("Interrupt after reopen = %d, want 3 (p, r, n)", n)
	}
	interrupted := map[string]svc.RunRecord{}
	for _, id := range []string{"p", "r", "n"} {
		interrupted[id] = get(t, s, id)
		events[id] = eventsOf(t, s, id, 0)
	}
	mustOK(t, "Close", s.Close())

	s = reopen()
	defer func() { mustOK(t, "Close", s.Close()) }()
	for _, id := range []string{"p", "r", "n"} {
		rec := get(t, s, id)
		checkInterrupted(t, id+" after interrupt and reopen", rec, records[id])
		checkRecord(t, id+" after interrupt and reopen", rec, interrupted[id])
		checkEvents(t, id+" events after interrupt and reopen", eventsOf(t, s, id, 0), events[id])
		if evs := events[id]; len(evs) == 0 || evs[len(evs)-1].Type != svc.RunRunFailed {
			t.Errorf("%s: events after interrupt %+v, want run_failed last", id, evs)
		}
	}
	for _, id := range []string{"c", "f", "x"} {
		checkRecord(t, "terminal run after two reopens, "+id, get(t, s, id), records[id])
		checkEvents(t, "terminal run after two reopens, "+id, eventsOf(t, s, id, 0), events[id])
	}
	if got := eventsOf(t, s, "r", 0); len(got) != 5 {
		t.Errorf("r has %d events after two reopens, want 5 (4 and run_failed)", len(got))
	}
	checkListing(t, "failed after two reopens", s, svc.RunFilter{State: svc.RunFailed, Limit: 3}, []string{"r", "p", "n", "f"})
	checkListing(t, "pending after two reopens", s, svc.RunFilter{State: svc.RunPending}, nil)
	resumeReopen(t, open)
	batchReopen(t, open)
	runBatchReopen(t, open)
}

func testCreate(t *testing.T, s svc.RunStore) {
	ctx := t.Context()
	created := ts(0)
	mustOK(t, "Create", s.Create(ctx, svc.RunRecord{RunID: "r1", Target: "echo", Kind: "agent", TraceID: "0193-trace", CreatedAt: created}))
	checkRecord(t, "Get after Create", get(t, s, "r1"), svc.RunRecord{
		RunID: "r1", Target: "echo", Kind: "agent", TraceID: "0193-trace", State: svc.RunPending, CreatedAt: created, UpdatedAt: created,
	})
	// The trace id is the status's from the first one on (the dashboard
	// finds a run's tree by it), and the listing's.
	rec := get(t, s, "r1")
	if st := rec.Status(); st.TraceID != "0193-trace" {
		t.Errorf("Status() = %+v, want trace_id 0193-trace", st)
	}

	// A zero CreatedAt is the time of the call.
	before := time.Now().Truncate(time.Microsecond)
	mustOK(t, "Create", s.Create(ctx, svc.RunRecord{RunID: "r2", Target: "pipeline", Kind: "group"}))
	after := time.Now()
	got := get(t, s, "r2")
	if got.CreatedAt.Before(before) || got.CreatedAt.After(after) {
		t.Errorf("CreatedAt = %v, want the time of Create, in [%v, %v]", got.CreatedAt, before, after)
	}
	if !got.UpdatedAt.Equal(got.CreatedAt) {
		t.Errorf("UpdatedAt = %v, want CreatedAt %v", got.UpdatedAt, got.CreatedAt)
	}
	if got.State != svc.RunPending || got.Target != "pipeline" || got.Kind != "group" {
		t.Errorf("Get = %+v, want a pending group run of pipeline", got)
	}
}

func testDuplicateCreate(t *testing.T, s svc.RunStore) {
	ctx := t.Context()
	mustOK(t, "Create", s.Create(ctx, svc.RunRecord{RunID: "r1", Target: "a", Kind: "agent", CreatedAt: ts(0)}))
	want := get(t, s, "r1")
	mustKind(t, "duplicate Create", s.Create(ctx, svc.RunRecord{RunID: "r1", Target: "b", Kind: "group", CreatedAt: ts(1)}), svc.ErrRunState)
	checkRecord(t, "after a refused duplicate", get(t, s, "r1"), want)
	// The same for a run that has moved on.
	mustOK(t, "SetState", s.SetState(ctx, "r1", svc.RunRunning, "", nil))
	mustKind(t, "duplicate Create of a running run", s.Create(ctx, svc.RunRecord{RunID: "r1", Target: "b", Kind: "agent"}), svc.ErrRunState)
	if got := get(t, s, "r1"); got.State != svc.RunRunning || got.Target != "a" {
		t.Errorf("after a refused duplicate: %+v, want the running run of a", got)
	}
}

func testUnknownRun(t *testing.T, s svc.RunStore) {
	ctx := t.Context()
	// A known run, so that a store answering "unknown" only when empty fails.
	drive(t, s, "known", svc.RunRunning)
	const id = "missing"
	calls := []struct {
		name string
		call func() error
	}{
		{"Get", func() error { _, err := s.Get(ctx, id); return err }},
		{"SetState", func() error { return s.SetState(ctx, id, svc.RunRunning, "", nil) }},
		{"SetStateFinal", func() error {
			return s.SetState(ctx, id, svc.RunCancelled, "", &svc.RunEvent{Type: svc.RunRunCancelled})
		}},
		{"SetProgress", func() error { return s.SetProgress(ctx, id, svc.RunProgress{Total: 1}) }},
		{"SetResult", func() error { return s.SetResult(ctx, id, json.RawMessage(`{}`)) }},
		{"Finish", func() error {
			return s.Finish(ctx, id, svc.RunCompleted, "", json.RawMessage(`{}`), &svc.RunEvent{Type: svc.RunGroupCompleted})
		}},
		{"Append", func() error { _, err := s.Append(ctx, id, svc.RunEvent{Type: svc.RunAgentStarted}); return err }},
		{"Events", func() error { _, err := s.Events(ctx, id, 0); return err }},
		{"Stream", func() error {
			ch, err := s.Stream(ctx, id, 0)
			if ch != nil {
				return errors.New("stream: a channel returned with an error")
			}
			return err
		}},
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			err := c.call()
			mustKind(t, c.name+" of an unknown run", err, svc.ErrRegistry)
			if errors.Is(err, svc.ErrRunState) {
				t.Errorf("%s of an unknown run: %v is also a RunStateError", c.name, err)
			}
			// Callers show this text to users (a 404 of GET /runs/ID/status):
			// the same words from every store, and no store's name in them.
			if want := fmt.Sprintf("unknown run %q", id); err != nil && err.Error() != want {
				t.Errorf("%s of an unknown run: %q, want %q", c.name, err, want)
			}
		})
	}
	if _, err := s.Get(ctx, id); err == nil {
		t.Errorf("calls on an unknown run created it")
	}
}

func testTransitions(t *testing.T, s svc.RunStore) {
	ctx := t.Context()
	for _, from := range states {
		for _, to := range states {
			t.Run(fmt.Sprintf("%s_to_%s", from, to), func(t *testing.T) {
				id := fmt.Sprintf("%s-%s", from, to)
				drive(t, s, id, from)
				before := get(t, s, id)
				err := s.SetState(ctx, id, to, "why", nil)
				if !from.CanMove(to) {
					mustKind(t, fmt.Sprintf("SetState %s → %s", from, to), err, svc.ErrRunState)
					checkRecord(t, "after a refused transition", get(t, s, id), before)
					return
				}
				mustOK(t, fmt.Sprintf("SetState %s → %s", from, to), err)
				got := get(t, s, id)
				if got.State != to || got.Reason != "why" {
					t.Errorf("after %s → %s: state %q reason %q, want %q, %q", from, to, got.State, got.Reason, to, "why")
				}
				if !got.UpdatedAt.After(before.CreatedAt) {
					t.Errorf("UpdatedAt %v not after CreatedAt %v", got.UpdatedAt, before.CreatedAt)
				}
			})
		}
	}
}

func testInvalidStates(t *testing.T, s svc.RunStore) {
	ctx := t.Context()
	for _, from := range []svc.RunState{svc.RunPending, svc.RunRunning} {
		for _, to := range []svc.RunState{"", "bogus", "RUNNING"} {
			id := fmt.Sprintf("%s-%q", from, to)
			drive(t, s, id, from)
			before := get(t, s, id)
			mustKind(t, fmt.Sprintf("SetState %s → %q", from, to), s.SetState(ctx, id, to, "", nil), svc.ErrRunState)
			checkRecord(t, "after a refused transition", get(t, s, id), before)
		}
	}
}

func testTerminalIsFinal(t *testing.T, s svc.RunStore) {
	ctx := t.Context()
	for _, final := range []svc.RunState{svc.RunCompleted, svc.RunFailed, svc.RunCancelled} {
		t.Run(string(final), func(t *testing.T) {
			id := "run-" + string(final)
			drive(t, s, id, svc.RunRunning)
			mustOK(t, "SetProgress", s.SetProgress(ctx, id, svc.RunProgress{Total: 2, Completed: 1, Running: 1}))
			mustOK(t, "SetResult", s.SetResult(ctx, id, json.RawMessage(`{"output":"first"}`)))
			appendN(t, s, id, 2)
			mustOK(t, "SetState", s.SetState(ctx, id, final, "done", nil))
			rec, evs := get(t, s, id), eventsOf(t, s, id, 0)

			calls := []struct {
				name string
				err  error
			}{
				{"SetResult", s.SetResult(ctx, id, json.RawMessage(`{"output":"late"}`))},
				{"SetProgress", s.SetProgress(ctx, id, svc.RunProgress{Total: 9})},
				{"Append", appendErr(s, id)},
				{"SetState with a final event", s.SetState(ctx, id, svc.RunCancelled, "late", &svc.RunEvent{Type: svc.RunRunCancelled})},
				{"Finish", s.Finish(ctx, id, svc.RunFailed, "late", json.RawMessage(`{"output":"late"}`), &svc.RunEvent{Type: svc.RunRunFailed})},
			}
			for _, to := range states {
				calls = append(calls, struct {
					name string
					err  error
				}{"SetState " + string(to), s.SetState(ctx, id, to, "late", nil)})
			}
			for _, c := range calls {
				mustKind(t, c.name+" after "+string(final), c.err, svc.ErrRunState)
			}
			checkRecord(t, "terminal record", get(t, s, id), rec)
			checkEvents(t, "terminal events", eventsOf(t, s, id, 0), evs)
		})
	}
}

func testProgress(t *testing.T, s svc.RunStore) {
	ctx := t.Context()
	create(t, s, "r1")
	if p := get(t, s, "r1").Progress; p != nil {
		t.Fatalf("Progress before the first SetProgress = %+v, want nil", *p)
	}
	// A zero progress is still a progress: not null any more.
	mustOK(t, "SetProgress", s.SetProgress(ctx, "r1", svc.RunProgress{}))
	if p := get(t, s, "r1").Progress; p == nil || *p != (svc.RunProgress{}) {
		t.Fatalf("Progress after SetProgress(zero) = %v, want a zero progress", p)
	}
	mustOK(t, "SetState", s.SetState(ctx, "r1", svc.RunRunning, "", nil))
	for _, want := range []svc.RunProgress{
		{Total: 3, Completed: 1, Failed: 1, Running: 1},
		{Total: 5, Completed: 4, Failed: 0, Running: 1},
	} {
		before := get(t, s, "r1")
		mustOK(t, "SetProgress", s.SetProgress(ctx, "r1", want))
		got := get(t, s, "r1")
		if got.Progress == nil || *got.Progress != want {
			t.Fatalf("Progress = %v, want %+v", got.Progress, want)
		}
		if got.UpdatedAt.Before(before.UpdatedAt) {
			t.Errorf("UpdatedAt went back from %v to %v", before.UpdatedAt, got.UpdatedAt)
		}
		if st := got.Status(); st.RunID != "r1" || st.State != svc.RunRunning || st.Progress == nil || *st.Progress != want {
			t.Errorf("Status = %+v", st)
		}
		// The caller's copy is its own.
		got.Progress.Total = 1000
		if p := get(t, s, "r1").Progress; p == nil || *p != want {
			t.Errorf("changing the Progress Get returned changed the store: %v", p)
		}
	}
	// Progress is kept through the end of the run.
	mustOK(t, "SetState", s.SetState(ctx, "r1", svc.RunCompleted, "", nil))
	if p := get(t, s, "r1").Progress; p == nil || p.Total != 5 || p.Completed != 4 {
		t.Errorf("Progress after completion = %v, want the last one", p)
	}
}

func testResult(t *testing.T, s svc.RunStore) {
	ctx := t.Context()
	create(t, s, "r1")
	if r := get(t, s, "r1").Result; len(r) != 0 {
		t.Fatalf("Result before SetResult = %q, want none", r)
	}
	// Odd spacing, key order and escapes: the store keeps bytes, not JSON.
	first := json.RawMessage("{\"z\": 1,\n  \"a\" : [ 2, \"\u00e9\\u00e9\" ],\t\"s\":\"<&>\" }")
	in := bytes.Clone(first)
	mustOK(t, "SetResult", s.SetResult(ctx, "r1", in))
	in[1] = 'X' // the store must have kept its own copy
	got := get(t, s, "r1").Result
	if !bytes.Equal(got, first) {
		t.Fatalf("Result = %q, want %q byte for byte", got, first)
	}
	got[1] = 'Y'
	if got := get(t, s, "r1").Result; !bytes.Equal(got, first) {
		t.Fatalf("changing the Result Get returned changed the store: %q", got)
	}

	// A second SetResult replaces the first, and the result outlives the end.
	second := json.RawMessage(`{"output":"second","usage":{"tokens":12}}`)
	mustOK(t, "SetState", s.SetState(ctx, "r1", svc.RunRunning, "", nil))
	mustOK(t, "SetResult", s.SetResult(ctx, "r1", second))
	mustOK(t, "SetState", s.SetState(ctx, "r1", svc.RunCompleted, "", nil))
	if got := get(t, s, "r1").Result; !bytes.Equal(got, second) {
		t.Fatalf("Result after completion = %q, want %q", got, second)
	}

	// A large result round trips too.
	big := json.RawMessage(fmt.Sprintf(`{"output":%q}`, bytes.Repeat([]byte("x"), 1<<20)))
	drive(t, s, "r2", svc.RunRunning)
	mustOK(t, "SetResult", s.SetResult(ctx, "r2", big))
	if got := get(t, s, "r2").Result; !bytes.Equal(got, big) {
		t.Fatalf("a 1 MiB Result came back with %d bytes", len(got))
	}
}

func testAppend(t *testing.T, s svc.RunStore) {
	drive(t, s, "r1", svc.RunRunning)
	if evs := eventsOf(t, s, "r1", 0); len(evs) != 0 {
		t.Fatalf("Events of a run without events = %v, want none", evs)
	}
	in := []svc.RunEvent{
		{Seq: 99, RunID: "wrong", Type: svc.RunAgentStarted, Agent: "planner", TaskID: "t1", Timestamp: ts(1)},
		{Type: svc.RunAgentFailed, Agent: "planner", TaskID: "t1", Error: "model: boom", Timestamp: ts(2)},
		{Type: svc.RunAgentStarted, Agent: "writer", TaskID: "t2", Timestamp: ts(3).In(time.FixedZone("X", 3600))},
		{Type: svc.RunAgentCompleted, Agent: "writer", TaskID: "t2", Timestamp: ts(4)},
	}
	var want []svc.RunEvent
	for i, ev := range in {
		mustAppend(t, s, "r1", ev, int64(i+1))
		ev.Seq, ev.RunID = int64(i+1), "r1"
		want = append(want, ev)
	}
	checkEvents(t, "Events(0)", eventsOf(t, s, "r1", 0), want)
	for after := int64(0); after <= 5; after++ {
		checkEvents(t, fmt.Sprintf("Events(%d)", after), eventsOf(t, s, "r1", after), want[min(after, 4):])
	}
	checkEvents(t, "Events(1000)", eventsOf(t, s, "r1", 1000), nil)

	// A zero timestamp is the time of the append.
	before := time.Now().Truncate(time.Microsecond)
	mustAppend(t, s, "r1", svc.RunEvent{Type: svc.RunAgentStarted, Agent: "x"}, 5)
	after := time.Now()
	evs := eventsOf(t, s, "r1", 4)
	if len(evs) != 1 || evs[0].Timestamp.Before(before) || evs[0].Timestamp.After(after) {
		t.Errorf("event appended with a zero timestamp: %+v, want its timestamp in [%v, %v]", evs, before, after)
	}

	// Appending to a pending run is allowed (the run is not terminal).
	create(t, s, "r2")
	mustAppend(t, s, "r2", svc.RunEvent{Type: svc.RunAgentStarted, Timestamp: ts(1)}, 1)
}

func testSeqPerRun(t *testing.T, s svc.RunStore) {
	drive(t, s, "a", svc.RunRunning)
	drive(t, s, "b", svc.RunRunning)
	for i := 1; i <= 3; i++ {
		mustAppend(t, s, "a", svc.RunEvent{Type: svc.RunAgentStarted, Agent: fmt.Sprint("a", i), Timestamp: ts(i)}, int64(i))
		mustAppend(t, s, "b", svc.RunEvent{Type: svc.RunAgentStarted, Agent: fmt.Sprint("b", i), Timestamp: ts(i)}, int64(i))
	}
	for _, id := range []string{"a", "b"} {
		evs := eventsOf(t, s, id, 0)
		if len(evs) != 3 {
			t.Fatalf("%s has %d events, want 3", id, len(evs))
		}
		for i, ev := range evs {
			if ev.Seq != int64(i+1) || ev.RunID != id || ev.Agent != fmt.Sprint(id, i+1) {
				t.Errorf("%s event %d = %+v", id, i, ev)
			}
		}
	}
}

func testFinalEvent(t *testing.T, s svc.RunStore) {
	ctx := t.Context()
	tests := []struct {
		name   string
		from   svc.RunState
		to     svc.RunState
		events int
		final  svc.RunEventType
	}{
		{"cancel running", svc.RunRunning, svc.RunCancelled, 2, svc.RunRunCancelled},
		{"cancel pending", svc.RunPending, svc.RunCancelled, 0, svc.RunRunCancelled},
		{"group completed", svc.RunRunning, svc.RunCompleted, 3, svc.RunGroupCompleted},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id := tc.name
			drive(t, s, id, tc.from)
			appendN(t, s, id, tc.events)
			final := svc.RunEvent{Seq: 42, Type: tc.final, Timestamp: ts(100)}
			mustOK(t, "SetState with a final event", s.SetState(ctx, id, tc.to, "user", &final))
			evs := eventsOf(t, s, id, 0)
			if len(evs) != tc.events+1 {
				t.Fatalf("%d events after SetState with a final event, want %d", len(evs), tc.events+1)
			}
			want := svc.RunEvent{Seq: int64(tc.events + 1), Type: tc.final, RunID: id, Timestamp: ts(100)}
			checkEvents(t, "final event", evs[tc.events:], []svc.RunEvent{want})
			if rec := get(t, s, id); rec.State != tc.to || rec.Reason != "user" {
				t.Errorf("record after SetState: state %q reason %q", rec.State, rec.Reason)
			}
			mustKind(t, "Append after the final event", appendErr(s, id), svc.ErrRunState)
		})
	}

	// A refused transition appends nothing.
	drive(t, s, "refused", svc.RunRunning)
	appendN(t, s, "refused", 1)
	mustKind(t, "SetState running → pending with a final event",
		s.SetState(ctx, "refused", svc.RunPending, "", &svc.RunEvent{Type: svc.RunRunCancelled}), svc.ErrRunState)
	if evs := eventsOf(t, s, "refused", 0); len(evs) != 1 {
		t.Errorf("a refused SetState appended its final event: %+v", evs)
	}

	// A zero timestamp on the final event is the time of the call.
	drive(t, s, "now", svc.RunRunning)
	before := time.Now().Truncate(time.Microsecond)
	mustOK(t, "SetState", s.SetState(ctx, "now", svc.RunCancelled, "", &svc.RunEvent{Type: svc.RunRunCancelled}))
	after := time.Now()
	if evs := eventsOf(t, s, "now", 0); len(evs) != 1 || evs[0].Timestamp.Before(before) || evs[0].Timestamp.After(after) {
		t.Errorf("final event with a zero timestamp: %+v, want its timestamp in [%v, %v]", evs, before, after)
	}
}

func testStreamLive(t *testing.T, s svc.RunStore) {
	ctx := t.Context()
	drive(t, s, "r1", svc.RunRunning)
	want := appendN(t, s, "r1", 2)
	ch, err := s.Stream(ctx, "r1", 0)
	mustOK(t, "Stream", err)
	checkEvents(t, "replayed history", receiveN(t, ch, 2), want)

	// Another goroutine appends, one event at a time: each must reach the
	// stream before the next is written, so the stream follows live rather
	// than replaying at the end.
	step := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		defer close(done)
		for i := 3; i <= 5; i++ {
			<-step
			if _, err := s.Append(ctx, "r1", svc.RunEvent{Type: svc.RunAgentStarted, Agent: fmt.Sprint("live", i), Timestamp: ts(i)}); err != nil {
				done <- err
				return
			}
		}
		<-step
		done <- s.SetState(ctx, "r1", svc.RunCompleted, "", &svc.RunEvent{Type: svc.RunGroupCompleted, Timestamp: ts(6)})
	}()
	for i := 3; i <= 5; i++ {
		step <- struct{}{}
		ev := receiveN(t, ch, 1)[0]
		if ev.Seq != int64(i) || ev.Agent != fmt.Sprint("live", i) || ev.RunID != "r1" {
			t.Fatalf("live event %d = %+v", i, ev)
		}
	}
	step <- struct{}{}
	ev := receiveN(t, ch, 1)[0]
	if ev.Seq != 6 || ev.Type != svc.RunGroupCompleted {
		t.Fatalf("last event = %+v, want group_completed with seq 6", ev)
	}
	expectClosed(t, ch)
	if err := <-done; err != nil {
		t.Fatalf("writer: %v", err)
	}

	// A run ended without a final event closes the stream too.
	drive(t, s, "r2", svc.RunRunning)
	ch, err = s.Stream(ctx, "r2", 0)
	mustOK(t, "Stream", err)
	mustAppend(t, s, "r2", svc.RunEvent{Type: svc.RunAgentStarted, Timestamp: ts(1)}, 1)
	receiveN(t, ch, 1)
	mustOK(t, "SetState", s.SetState(ctx, "r2", svc.RunFailed, "boom", nil))
	expectClosed(t, ch)

	// A stream opened on a pending run follows it through running.
	create(t, s, "r3")
	ch, err = s.Stream(ctx, "r3", 0)
	mustOK(t, "Stream", err)
	mustOK(t, "SetState", s.SetState(ctx, "r3", svc.RunRunning, "", nil))
	mustAppend(t, s, "r3", svc.RunEvent{Type: svc.RunAgentStarted, Timestamp: ts(1)}, 1)
	receiveN(t, ch, 1)
	mustOK(t, "SetState", s.SetState(ctx, "r3", svc.RunCancelled, "", &svc.RunEvent{Type: svc.RunRunCancelled, Timestamp: ts(2)}))
	if ev := receiveN(t, ch, 1)[0]; ev.Type != svc.RunRunCancelled || ev.Seq != 2 {
		t.Fatalf("last event = %+v, want run_cancelled with seq 2", ev)
	}
	expectClosed(t, ch)
}

func testStreamResume(t *testing.T, s svc.RunStore) {
	ctx := t.Context()
	drive(t, s, "r1", svc.RunRunning)
	all := appendN(t, s, "r1", 4)
	ch, err := s.Stream(ctx, "r1", 2)
	mustOK(t, "Stream", err)
	checkEvents(t, "resumed after 2", receiveN(t, ch, 2), all[2:])
	mustAppend(t, s, "r1", svc.RunEvent{Type: svc.RunAgentCompleted, Agent: "z", Timestamp: ts(9)}, 5)
	if ev := receiveN(t, ch, 1)[0]; ev.Seq != 5 || ev.Agent != "z" {
		t.Fatalf("live event after resume = %+v", ev)
	}
	mustOK(t, "SetState", s.SetState(ctx, "r1", svc.RunCompleted, "", nil))
	expectClosed(t, ch)

	// Resuming after the last event of an ended run sends nothing and closes.
	ch, err = s.Stream(ctx, "r1", 5)
	mustOK(t, "Stream", err)
	expectClosed(t, ch)
	// Resuming past the end is the same.
	ch, err = s.Stream(ctx, "r1", 100)
	mustOK(t, "Stream", err)
	expectClosed(t, ch)
}

func testStreamTerminal(t *testing.T, s svc.RunStore) {
	ctx := t.Context()
	drive(t, s, "r1", svc.RunRunning)
	want := appendN(t, s, "r1", 3)
	mustOK(t, "SetState", s.SetState(ctx, "r1", svc.RunCancelled, "", &svc.RunEvent{Type: svc.RunRunCancelled, Timestamp: ts(10)}))
	want = append(want, svc.RunEvent{Seq: 4, Type: svc.RunRunCancelled, RunID: "r1", Timestamp: ts(10)})
	for after := int64(0); after <= 4; after++ {
		ch, err := s.Stream(ctx, "r1", after)
		mustOK(t, "Stream", err)
		checkEvents(t, fmt.Sprintf("replay of an ended run after %d", after), receiveN(t, ch, int(4-after)), want[after:])
		expectClosed(t, ch)
	}
	// An ended run without events.
	drive(t, s, "r2", svc.RunCancelled)
	ch, err := s.Stream(ctx, "r2", 0)
	mustOK(t, "Stream", err)
	expectClosed(t, ch)
}

func testStreamContextCancel(t *testing.T, s svc.RunStore) {
	drive(t, s, "r1", svc.RunRunning)
	// An idle stream ends when its context does.
	ctx, cancel := context.WithCancel(t.Context())
	ch, err := s.Stream(ctx, "r1", 0)
	mustOK(t, "Stream", err)
	awaitIdle(t, s, ch, "r1")
	cancel()
	expectClosed(t, ch)

	// So does one whose reader stopped reading with events pending: the
	// store must not block on the send. A store that sends while the reader
	// drains picks the send or the cancellation at random, so it may send
	// a few more events but not half of the backlog (odds 2^-50).
	appendN(t, s, "r1", 100)
	ctx, cancel = context.WithCancel(t.Context())
	ch, err = s.Stream(ctx, "r1", 0)
	mustOK(t, "Stream", err)
	receiveN(t, ch, 2)
	cancel()
	drainClosed(t, ch, 50)

	// A stream on a context already cancelled ends at once.
	ch, err = s.Stream(ctx, "r1", 0)
	if err == nil {
		drainClosed(t, ch, 50)
	}
}

func testStreamEndsOnInterrupt(t *testing.T, s svc.RunStore) {
	ctx := t.Context()
	drive(t, s, "r1", svc.RunRunning)
	ch, err := s.Stream(ctx, "r1", 0)
	mustOK(t, "Stream", err)
	awaitIdle(t, s, ch, "r1")
	if _, err := s.Interrupt(ctx); err != nil {
		t.Fatalf("Interrupt: %v", err)
	}
	// The stream ends with Interrupt's terminal frame.
	if ev := receiveN(t, ch, 1)[0]; ev.Type != svc.RunRunFailed || ev.Error != svc.ReasonInterrupted {
		t.Errorf("last frame %+v, want run_failed (interrupted)", ev)
	}
	expectClosed(t, ch)
}

func testStreamEndsOnClose(t *testing.T, s svc.RunStore) {
	drive(t, s, "r1", svc.RunRunning)
	ch, err := s.Stream(t.Context(), "r1", 0)
	mustOK(t, "Stream", err)
	awaitIdle(t, s, ch, "r1")
	mustOK(t, "Close", s.Close())
	expectClosed(t, ch)
}

func testInterrupt(t *testing.T, s svc.RunStore) {
	ctx := t.Context()
	for _, st := range states {
		drive(t, s, string(st), st)
	}
	mustOK(t, "SetProgress", s.SetProgress(ctx, string(svc.RunRunning), svc.RunProgress{Total: 4, Running: 2}))
	appendN(t, s, string(svc.RunRunning), 2)
	before := map[string]svc.RunRecord{}
	events := map[string][]svc.RunEvent{}
	for _, st := range states {
		before[string(st)] = get(t, s, string(st))
		events[string(st)] = eventsOf(t, s, string(st), 0)
	}
	n, err := s.Interrupt(ctx)
	mustOK(t, "Interrupt", err)
	if n != 2 {
		t.Errorf("Interrupt = %d, want 2 (the pending and the running run)", n)
	}
	for _, st := range states {
		id := string(st)
		got := get(t, s, id)
		if st.Terminal() || st == svc.RunWaiting {
			// A waiting run holds nothing a process's death took.
			checkRecord(t, string(st)+" run after Interrupt", got, before[id])
		} else {
			checkInterrupted(t, id+" run after Interrupt", got, before[id])
			mustKind(t, "Append to an interrupted run", appendErr(s, id), svc.ErrRunState)
			evs := eventsOf(t, s, id, 0)
			if len(evs) != len(events[id])+1 {
				t.Fatalf("%s events after Interrupt: %+v, want %d then run_failed", id, evs, len(events[id]))
			}
			checkEvents(t, id+" events after Interrupt", evs[:len(events[id])], events[id])
			last := evs[len(evs)-1]
			if last.Type != svc.RunRunFailed || last.Seq != int64(len(evs)) || last.RunID != id || last.Agent != "" ||
				last.TaskID != "" || last.Error != svc.ReasonInterrupted {
				t.Errorf("%s: last event after Interrupt = %+v, want run_failed (seq %d, error interrupted)", id, last, len(evs))
			}
			continue
		}
		checkEvents(t, id+" events after Interrupt", eventsOf(t, s, id, 0), events[id])
	}
	n, err = s.Interrupt(ctx)
	mustOK(t, "Interrupt", err)
	if n != 0 {
		t.Errorf("second Interrupt = %d, want 0", n)
	}
}

// checkInterrupted checks the record Interrupt made of a run that was
// before: failed, reason interrupted, the failed AgentResult of
// svc.InterruptedResult, and its progress with what ran counted failed.
func checkInterrupted(t *testing.T, what string, got, before svc.RunRecord) {
	t.Helper()
	if got.State != svc.RunFailed || got.Reason != svc.ReasonInterrupted {
		t.Errorf("%s: state %q reason %q, want failed, interrupted", what, got.State, got.Reason)
	}
	var res svc.AgentResult
	if err := json.Unmarshal(got.Result, &res); err != nil {
		t.Errorf("%s: result %q: %v", what, got.Result, err)
	} else if res.Success || res.AgentName != before.Target || res.Error == nil ||
		res.Error.Type != string(svc.KindRuntime) || res.Error.Reason != svc.ReasonInterrupted {
		t.Errorf("%s: result %s, want a failed AgentResult of %q (AgentRuntimeError, reason interrupted)", what, got.Result, before.Target)
	}
	want := svc.InterruptedProgress(before.Progress)
	if (got.Progress == nil) != (want == nil) || got.Progress != nil && *got.Progress != *want {
		t.Errorf("%s: progress %v, want %v (was %v)", what, got.Progress, want, before.Progress)
	}
	if got.UpdatedAt.Before(before.UpdatedAt) {
		t.Errorf("%s: UpdatedAt %v went back from %v", what, got.UpdatedAt, before.UpdatedAt)
	}
}

// testFinish: Finish writes state, reason, result and its final event as
// one change, which Get, Events and Stream all see together.
func testFinish(t *testing.T, s svc.RunStore) {
	ctx := t.Context()
	drive(t, s, "g", svc.RunRunning)
	mustOK(t, "SetProgress", s.SetProgress(ctx, "g", svc.RunProgress{Total: 2, Completed: 2}))
	evs := appendN(t, s, "g", 2)
	ch, err := s.Stream(ctx, "g", 0)
	mustOK(t, "Stream", err)
	receiveN(t, ch, 2)
	before := get(t, s, "g")
	result := json.RawMessage(`{"group": true, "outputs": {"a": {"success": true}},  "success":true}`)
	mustOK(t, "Finish", s.Finish(ctx, "g", svc.RunCompleted, "", result, &svc.RunEvent{Type: svc.RunGroupCompleted, Timestamp: ts(40)}))
	want := before
	want.State, want.Result = svc.RunCompleted, result
	got := get(t, s, "g")
	want.UpdatedAt = got.UpdatedAt
	checkRecord(t, "after Finish", got, want)
	if got.UpdatedAt.Before(before.UpdatedAt) {
		t.Errorf("UpdatedAt %v went back from %v", got.UpdatedAt, before.UpdatedAt)
	}
	evs = append(evs, svc.RunEvent{Seq: 3, Type: svc.RunGroupCompleted, RunID: "g", Timestamp: ts(40)})
	checkEvents(t, "events after Finish", eventsOf(t, s, "g", 0), evs)
	checkEvents(t, "stream after Finish", receiveN(t, ch, 1), evs[2:])
	expectClosed(t, ch)

	// A failed run with its failed result and no final event; the result
	// replaces one set before.
	drive(t, s, "f", svc.RunRunning)
	mustOK(t, "SetResult", s.SetResult(ctx, "f", json.RawMessage(`{"success":true}`)))
	failed := json.RawMessage(`{"success":false,"error":{"type":"ModelError","message":"boom"}}`)
	mustOK(t, "Finish", s.Finish(ctx, "f", svc.RunFailed, "model", failed, nil))
	rec := get(t, s, "f")
	if rec.State != svc.RunFailed || rec.Reason != "model" || !bytes.Equal(rec.Result, failed) {
		t.Errorf("after Finish failed: state %q reason %q result %s, want failed, model, %s", rec.State, rec.Reason, rec.Result, failed)
	}
	if n := len(eventsOf(t, s, "f", 0)); n != 0 {
		t.Errorf("Finish without a final event added %d events", n)
	}

	// A nil result keeps the one stored; a pending run may finish cancelled.
	drive(t, s, "k", svc.RunRunning)
	mustOK(t, "SetResult", s.SetResult(ctx, "k", json.RawMessage(`{"kept":1}`)))
	mustOK(t, "Finish", s.Finish(ctx, "k", svc.RunCompleted, "", nil, nil))
	if rec := get(t, s, "k"); rec.State != svc.RunCompleted || string(rec.Result) != `{"kept":1}` {
		t.Errorf("after Finish with a nil result: state %q result %s, want completed, {\"kept\":1}", rec.State, rec.Result)
	}
	create(t, s, "p")
	mustOK(t, "Finish pending → cancelled", s.Finish(ctx, "p", svc.RunCancelled, "cancelled", nil, &svc.RunEvent{Type: svc.RunRunCancelled}))
	if rec := get(t, s, "p"); rec.State != svc.RunCancelled || rec.Reason != "cancelled" || rec.Result != nil {
		t.Errorf("after Finish pending → cancelled: state %q reason %q result %s", rec.State, rec.Reason, rec.Result)
	}
	if evs := eventsOf(t, s, "p", 0); len(evs) != 1 || evs[0].Type != svc.RunRunCancelled {
		t.Errorf("events after Finish pending → cancelled: %+v, want run_cancelled", evs)
	}

	// A stored result is not shared with the caller.
	drive(t, s, "c", svc.RunRunning)
	buf := []byte(`{"x":1}`)
	mustOK(t, "Finish", s.Finish(ctx, "c", svc.RunCompleted, "", buf, nil))
	buf[2] = 'y'
	if rec := get(t, s, "c"); string(rec.Result) != `{"x":1}` {
		t.Errorf("result %s changed with the caller's slice", rec.Result)
	}
}

// testFinishRefused: a Finish the state machine refuses is a RunStateError
// and changes nothing: not the state, the reason, the result, the progress
// nor the events.
func testFinishRefused(t *testing.T, s svc.RunStore) {
	ctx := t.Context()
	late := json.RawMessage(`{"success":true,"output":"late"}`)
	cases := []struct {
		name string
		from svc.RunState
		next svc.RunState
	}{
		{"pending to completed", svc.RunPending, svc.RunCompleted},
		{"pending to failed", svc.RunPending, svc.RunFailed},
		{"to running", svc.RunPending, svc.RunRunning},
		{"running to running", svc.RunRunning, svc.RunRunning},
		{"running to pending", svc.RunRunning, svc.RunPending},
		{"completed", svc.RunCompleted, svc.RunFailed},
		{"failed", svc.RunFailed, svc.RunCompleted},
		{"cancelled", svc.RunCancelled, svc.RunCompleted},
		{"failed twice", svc.RunFailed, svc.RunFailed},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			id := fmt.Sprint("r", i)
			create(t, s, id)
			if c.from != svc.RunPending {
				mustOK(t, "SetState running", s.SetState(ctx, id, svc.RunRunning, "", nil))
				mustOK(t, "SetProgress", s.SetProgress(ctx, id, svc.RunProgress{Total: 2, Running: 1}))
				mustOK(t, "SetResult", s.SetResult(ctx, id, json.RawMessage(`{"first":true}`)))
				appendN(t, s, id, 1)
				if c.from.Terminal() {
					mustOK(t, "Finish", s.Finish(ctx, id, c.from, "first", nil, &svc.RunEvent{Type: svc.RunRunFailed}))
				}
			}
			rec, evs := get(t, s, id), eventsOf(t, s, id, 0)
			err := s.Finish(ctx, id, c.next, "late", late, &svc.RunEvent{Type: svc.RunRunFailed, Error: "late"})
			mustKind(t, "Finish "+c.name, err, svc.ErrRunState)
			checkRecord(t, "record after a refused Finish", get(t, s, id), rec)
			checkEvents(t, "events after a refused Finish", eventsOf(t, s, id, 0), evs)
		})
	}
}

func testConcurrent(t *testing.T, s svc.RunStore) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for i := range ConcurrentRuns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("c%03d", i)
			if err := s.Create(ctx, svc.RunRecord{RunID: id, Target: "echo", Kind: "agent"}); err != nil {
				t.Errorf("Create %s: %v", id, err)
				return
			}
			ch, err := s.Stream(ctx, id, 0)
			if err != nil {
				t.Errorf("Stream %s: %v", id, err)
				return
			}
			// The reader checks that the live stream sees every event, in
			// order, and ends on the final one.
			wg.Add(1)
			go func() {
				defer wg.Done()
				var n int64
				for ev := range ch {
					n++
					if ev.Seq != n || ev.RunID != id {
						t.Errorf("stream %s: event %d = %+v", id, n, ev)
					}
				}
				if n != EventsPerRun+1 {
					t.Errorf("stream %s ended after %d events, want %d", id, n, EventsPerRun+1)
				}
			}()
			if err := s.SetState(ctx, id, svc.RunRunning, "", nil); err != nil {
				t.Errorf("SetState %s running: %v", id, err)
				return
			}
			for j := 1; j <= EventsPerRun; j++ {
				seq, err := s.Append(ctx, id, svc.RunEvent{Type: svc.RunAgentStarted, Agent: fmt.Sprintf("a%02d", j), Timestamp: ts(j)})
				if err != nil || seq != int64(j) {
					t.Errorf("Append %s #%d = %d, %v", id, j, seq, err)
					return
				}
				if j%10 == 0 {
					if err := s.SetProgress(ctx, id, svc.RunProgress{Total: EventsPerRun, Completed: j}); err != nil {
						t.Errorf("SetProgress %s: %v", id, err)
					}
				}
			}
			if err := s.SetState(ctx, id, svc.RunCompleted, "", &svc.RunEvent{Type: svc.RunGroupCompleted}); err != nil {
				t.Errorf("SetState %s completed: %v", id, err)
			}
		}()
	}
	// Listings run alongside the writers: each lists a run at most once,
	// and only runs of this test. A few are enough, and they leave the
	// writers the machine.
	listers := make(chan struct{})
	var listWG sync.WaitGroup
	listWG.Go(func() {
		l := lister(t, s)
		for range ConcurrentListings {
			select {
			case <-listers:
				return
			default:
			}
			seen := map[string]bool{}
			f := svc.RunFilter{Limit: 7}
			for {
				page, err := l.ListRuns(ctx, f)
				if err != nil {
					t.Errorf("ListRuns during writes: %v", err)
					return
				}
				for _, r := range page.Runs {
					if seen[r.RunID] || r.Target != "echo" {
						t.Errorf("listing during writes: %+v listed twice or not of this test", r)
						return
					}
					seen[r.RunID] = true
				}
				if f.Cursor = page.NextCursor; f.Cursor == "" {
					break
				}
			}
		}
	})
	wg.Wait()
	close(listers)
	listWG.Wait()
	if t.Failed() {
		return
	}
	// Created at once, at times the store picked: listed by those.
	var created []listed
	for i := range ConcurrentRuns {
		id := fmt.Sprintf("c%03d", i)
		created = append(created, listed{id, get(t, s, id).CreatedAt})
	}
	checkListing(t, "after the concurrent runs", s, svc.RunFilter{State: svc.RunCompleted, Limit: 30}, newestFirst(created))
	for i := range ConcurrentRuns {
		id := fmt.Sprintf("c%03d", i)
		rec := get(t, s, id)
		if rec.State != svc.RunCompleted || rec.Progress == nil || rec.Progress.Completed != EventsPerRun {
			t.Errorf("%s: state %q progress %v", id, rec.State, rec.Progress)
		}
		evs := eventsOf(t, s, id, 0)
		if len(evs) != EventsPerRun+1 {
			t.Errorf("%s has %d events, want %d", id, len(evs), EventsPerRun+1)
			continue
		}
		for j, ev := range evs[:EventsPerRun] {
			if ev.Seq != int64(j+1) || ev.Agent != fmt.Sprintf("a%02d", j+1) {
				t.Errorf("%s event %d = %+v", id, j, ev)
				break
			}
		}
		if last := evs[EventsPerRun]; last.Type != svc.RunGroupCompleted || last.Seq != EventsPerRun+1 {
			t.Errorf("%s last event = %+v", id, last)
		}
	}
}

func testClose(t *testing.T, s svc.RunStore) {
	ctx := t.Context()
	drive(t, s, "r1", svc.RunRunning)
	mustOK(t, "first Close", s.Close())
	mustOK(t, "second Close", s.Close())
	if _, err := s.Get(ctx, "r1"); err == nil {
		t.Errorf("Get after Close succeeded")
	}
	if err := s.Create(ctx, svc.RunRecord{RunID: "r2", Target: "a", Kind: "agent"}); err == nil {
		t.Errorf("Create after Close succeeded")
	}
	if _, err := s.Append(ctx, "r1", svc.RunEvent{Type: svc.RunAgentStarted}); err == nil {
		t.Errorf("Append after Close succeeded")
	}
	if err := s.Finish(ctx, "r1", svc.RunCompleted, "", json.RawMessage(`{}`), nil); err == nil {
		t.Errorf("Finish after Close succeeded")
	}
	if ch, err := s.Stream(ctx, "r1", 0); err == nil {
		// A store may hand out a channel that is already closed.
		expectClosed(t, ch)
	}
}

// create makes a pending agent run created at ts(0).
// traceOf is the trace id create gives run id.
func traceOf(id string) string { return "trace-" + id }

func create(t *testing.T, s svc.RunStore, id string) {
	t.Helper()
	createAt(t, s, id, ts(0))
}

// createAt makes a pending agent run created at at.
func createAt(t *testing.T, s svc.RunStore, id string, at time.Time) {
	t.Helper()
	mustOK(t, "Create "+id, s.Create(t.Context(), svc.RunRecord{RunID: id, Target: "echo", Kind: "agent", TraceID: traceOf(id), CreatedAt: at}))
}

// drive creates run id and moves it to state by the legal path.
func drive(t *testing.T, s svc.RunStore, id string, state svc.RunState) {
	t.Helper()
	driveAt(t, s, id, state, ts(0))
}

// driveAt is drive with the run created at at.
func driveAt(t *testing.T, s svc.RunStore, id string, state svc.RunState, at time.Time) {
	t.Helper()
	createAt(t, s, id, at)
	moveTo(t, s, id, state)
}

// moveTo moves pending run id to state by the legal path.
func moveTo(t *testing.T, s svc.RunStore, id string, state svc.RunState) {
	t.Helper()
	var path []svc.RunState
	switch state {
	case svc.RunPending:
	case svc.RunCancelled:
		path = []svc.RunState{svc.RunCancelled}
	default:
		path = []svc.RunState{svc.RunRunning}
		if state != svc.RunRunning {
			path = append(path, state)
		}
	}
	for _, st := range path {
		mustOK(t, fmt.Sprintf("SetState %s → %s", id, st), s.SetState(t.Context(), id, st, "", nil))
	}
}

// appendN appends n agent events to run id and returns them as stored.
func appendN(t *testing.T, s svc.RunStore, id string, n int) []svc.RunEvent {
	t.Helper()
	evs := eventsOf(t, s, id, 0)
	next := int64(len(evs)) + 1
	var out []svc.RunEvent
	for i := range n {
		ev := svc.RunEvent{Type: svc.RunAgentStarted, Agent: fmt.Sprint("agent", i), TaskID: fmt.Sprint("task", i), Timestamp: ts(i)}
		mustAppend(t, s, id, ev, next)
		ev.Seq, ev.RunID = next, id
		out = append(out, ev)
		next++
	}
	return out
}

func mustAppend(t *testing.T, s svc.RunStore, id string, ev svc.RunEvent, wantSeq int64) {
	t.Helper()
	seq, err := s.Append(t.Context(), id, ev)
	mustOK(t, "Append to "+id, err)
	if seq != wantSeq {
		t.Fatalf("Append to %s = seq %d, want %d", id, seq, wantSeq)
	}
}

func appendErr(s svc.RunStore, id string) error {
	_, err := s.Append(context.Background(), id, svc.RunEvent{Type: svc.RunAgentStarted, Agent: "late", Timestamp: ts(1000)})
	return err
}

func get(t *testing.T, s svc.RunStore, id string) svc.RunRecord {
	t.Helper()
	rec, err := s.Get(t.Context(), id)
	mustOK(t, "Get "+id, err)
	return rec
}

func eventsOf(t *testing.T, s svc.RunStore, id string, after int64) []svc.RunEvent {
	t.Helper()
	evs, err := s.Events(t.Context(), id, after)
	mustOK(t, fmt.Sprintf("Events(%s, %d)", id, after), err)
	return evs
}

func mustOK(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func mustKind(t *testing.T, what string, err, kind error) {
	t.Helper()
	if !errors.Is(err, kind) {
		t.Errorf("%s: err = %v (kind %q), want a %s", what, err, svc.KindOf(err), kind)
	}
}

// awaitIdle appends an event to run id, reads it from ch, and gives the
// stream a moment to go back to waiting, so that what the caller does next
// must wake a waiting stream rather than be seen by one still replaying. A
// correct store passes without the pause; it only makes a missing wake-up
// show every time instead of sometimes.
func awaitIdle(t *testing.T, s svc.RunStore, ch <-chan svc.RunEvent, id string) {
	t.Helper()
	seq, err := s.Append(t.Context(), id, svc.RunEvent{Type: svc.RunAgentStarted, Agent: "idle", Timestamp: ts(0)})
	mustOK(t, "Append", err)
	if ev := receiveN(t, ch, 1)[0]; ev.Seq != seq {
		t.Fatalf("stream sent %+v, want seq %d", ev, seq)
	}
	time.Sleep(20 * time.Millisecond)
}

// receiveN reads n events from ch, failing if it closes or stalls first.
func receiveN(t *testing.T, ch <-chan svc.RunEvent, n int) []svc.RunEvent {
	t.Helper()
	timer := time.NewTimer(Wait)
	defer timer.Stop()
	out := make([]svc.RunEvent, 0, n)
	for len(out) < n {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("stream closed after %d of %d events: %+v", len(out), n, out)
			}
			out = append(out, ev)
		case <-timer.C:
			t.Fatalf("stream stalled after %d of %d events", len(out), n)
		}
	}
	return out
}

// expectClosed fails unless ch closes, with no further event, within Wait.
func expectClosed(t *testing.T, ch <-chan svc.RunEvent) {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if ok {
			t.Fatalf("stream sent %+v, want it closed", ev)
		}
	case <-time.After(Wait):
		t.Fatalf("stream still open after %v", Wait)
	}
}

// drainClosed reads at most max events from ch and fails unless it closes.
func drainClosed(t *testing.T, ch <-chan svc.RunEvent, max int) {
	t.Helper()
	timer := time.NewTimer(Wait)
	defer timer.Stop()
	for n := 0; ; n++ {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
			if n >= max {
				t.Fatalf("stream sent more than %d events after its context ended", max)
			}
		case <-timer.C:
			t.Fatalf("stream still open %v after its context ended", Wait)
		}
	}
}

func checkRecord(t *testing.T, what string, got, want svc.RunRecord) {
	t.Helper()
	var diffs []string
	diff := func(field string, g, w any) { diffs = append(diffs, fmt.Sprintf("%s = %v, want %v", field, g, w)) }
	if got.RunID != want.RunID {
		diff("RunID", got.RunID, want.RunID)
	}
	if got.Target != want.Target {
		diff("Target", got.Target, want.Target)
	}
	if got.Kind != want.Kind {
		diff("Kind", got.Kind, want.Kind)
	}
	if got.State != want.State {
		diff("State", got.State, want.State)
	}
	if got.Reason != want.Reason {
		diff("Reason", got.Reason, want.Reason)
	}
	if got.TraceID != want.TraceID {
		diff("TraceID", got.TraceID, want.TraceID)
	}
	if (got.Progress == nil) != (want.Progress == nil) || got.Progress != nil && *got.Progress != *want.Progress {
		diff("Progress", got.Progress, want.Progress)
	}
	if !bytes.Equal(got.Result, want.Result) {
		diff("Result", string(got.Result), string(want.Result))
	}
	if !bytes.Equal(got.Task, want.Task) || (got.Task == nil) != (want.Task == nil) {
		diff("Task", string(got.Task), string(want.Task))
	}
	if got.Resumed != want.Resumed {
		diff("Resumed", got.Resumed, want.Resumed)
	}
	if got.Steps != want.Steps {
		diff("Steps", got.Steps, want.Steps)
	}
	if (got.CurrentStep == nil) != (want.CurrentStep == nil) || got.CurrentStep != nil &&
		(got.CurrentStep.Seq != want.CurrentStep.Seq || got.CurrentStep.Kind != want.CurrentStep.Kind ||
			got.CurrentStep.Key != want.CurrentStep.Key || !got.CurrentStep.At.Equal(want.CurrentStep.At)) {
		diff("CurrentStep", got.CurrentStep, want.CurrentStep)
	}
	if !got.CreatedAt.Equal(want.CreatedAt) {
		diff("CreatedAt", got.CreatedAt, want.CreatedAt)
	}
	if !got.UpdatedAt.Equal(want.UpdatedAt) {
		diff("UpdatedAt", got.UpdatedAt, want.UpdatedAt)
	}
	for _, d := range diffs {
		t.Errorf("%s: %s", what, d)
	}
}

func checkEvents(t *testing.T, what string, got, want []svc.RunEvent) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d events %+v, want %d %+v", what, len(got), got, len(want), want)
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.Seq != w.Seq || g.Type != w.Type || g.RunID != w.RunID || g.Agent != w.Agent ||
			g.TaskID != w.TaskID || g.Error != w.Error || !g.Timestamp.Equal(w.Timestamp) {
			t.Errorf("%s: event %d = %+v, want %+v", what, i, g, w)
		}
	}
}

package storetest

// Rules of resumable runs (svc.ResumableStore) beyond its doc comments,
// which the Task and Recover subtests (and RunReopen, for the persistent
// stores) check:
//
//   - Create and CreateIdempotent keep Task byte-exact and share no memory
//     with the caller; a run created without one has a nil Task. A Task
//     that is not one JSON value is a SpecValidationError that creates
//     nothing (nor reserves a key).
//   - Get fills Steps with the length of the run's step log, and Status
//     copies Resumed and Steps.
//   - Recover changes nothing of a claimed run but Resumed (one more) and
//     UpdatedAt (the time of the claim): its state, progress, result,
//     reason, task, events and steps stay, and it goes on taking writes.
//     The records it returns are what Get returns after it, oldest first.
//   - Each call claims every unfinished run with a Task again (a call is a
//     process's start), and each claim is its own atomic increment: calls
//     racing on one store lose none.
//   - A persistent store keeps Task and Resumed across reopen.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc"
)

// resumable returns s as a svc.ResumableStore, failing the test if it is
// not one.
func resumable(t *testing.T, s svc.RunStore) svc.ResumableStore {
	t.Helper()
	r, ok := s.(svc.ResumableStore)
	if !ok {
		t.Fatalf("%T is not a svc.ResumableStore", s)
	}
	return r
}

// taskOf is the test Task of run id: spaces, escapes and non-ASCII, so a
// store that re-encodes it instead of keeping its bytes fails.
func taskOf(id string) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{ "task_id": %q, "input": "é\u00e9 \"q\"",  "context": {"n": [1, 2.50]} }`, "task-"+id))
}

// createTask makes a pending agent run with taskOf(id), created at at.
func createTask(t *testing.T, s svc.RunStore, id string, at time.Time) {
	t.Helper()
	mustOK(t, "Create "+id, s.Create(t.Context(), svc.RunRecord{RunID: id, Target: "echo", Kind: "agent", TraceID: traceOf(id),
		Task: taskOf(id), CreatedAt: at}))
}

// driveTask is drive for a run with a Task.
func driveTask(t *testing.T, s svc.RunStore, id string, state svc.RunState, at time.Time) {
	t.Helper()
	createTask(t, s, id, at)
	moveTo(t, s, id, state)
}

func recoverRuns(t *testing.T, s svc.RunStore) ([]svc.RunRecord, int) {
	t.Helper()
	claimed, n, err := resumable(t, s).Recover(t.Context())
	mustOK(t, "Recover", err)
	return claimed, n
}

// idsOf lists the run ids of recs, in their order.
func idsOf(recs []svc.RunRecord) []string {
	ids := make([]string, len(recs))
	for i, r := range recs {
		ids[i] = r.RunID
	}
	return ids
}

// checkClaimed checks a record Recover (or ClaimExpired) returned for a
// run that was before: the same run, Resumed resumed, and what Get
// returns now.
func checkClaimed(t *testing.T, s svc.RunStore, what string, got, before svc.RunRecord, resumed int) {
	t.Helper()
	if got.Resumed != resumed {
		t.Errorf("%s: Resumed = %d, want %d", what, got.Resumed, resumed)
	}
	if got.UpdatedAt.Before(before.UpdatedAt) {
		t.Errorf("%s: UpdatedAt %v went back from %v", what, got.UpdatedAt, before.UpdatedAt)
	}
	want := before
	want.Resumed, want.UpdatedAt = resumed, got.UpdatedAt
	// A claimed record need not carry the current step (what resumes
	// the run reads the whole log); Get does, unchanged by the claim.
	want.CurrentStep = got.CurrentStep
	checkRecord(t, what, got, want)
	got.CurrentStep = before.CurrentStep
	checkRecord(t, what+" (Get after the claim)", get(t, s, got.RunID), got)
}

func testTask(t *testing.T, s svc.RunStore) {
	ctx := t.Context()
	task := taskOf("a")
	mustOK(t, "Create", s.Create(ctx, svc.RunRecord{RunID: "a", Target: "echo", Kind: "agent", TraceID: traceOf("a"), Task: task, CreatedAt: ts(0)}))
	task[3] = 'X' // the caller's slice is its own
	got := get(t, s, "a")
	checkRecord(t, "Get after Create with a Task", got, svc.RunRecord{RunID: "a", Target: "echo", Kind: "agent", TraceID: traceOf("a"),
		Task: taskOf("a"), State: svc.RunPending, CreatedAt: ts(0), UpdatedAt: ts(0)})
	if !got.Resumable() {
		t.Errorf("a run created with a Task is not Resumable")
	}
	got.Task[3] = 'Y'
	got.Task = taskOf("a")
	checkRecord(t, "Get after a caller changed what Get returned", get(t, s, "a"), got)

	create(t, s, "none")
	if got := get(t, s, "none"); got.Task != nil || got.Resumable() {
		t.Errorf("run created without a Task: Task %q, Resumable %v; want nil, false", got.Task, got.Resumable())
	}

	// CreateIdempotent keeps it too.
	_, made, err := idem(t, s).CreateIdempotent(ctx, "key", "fp", svc.RunRecord{RunID: "k", Target: "echo", Kind: "agent", Task: taskOf("k"),
		CreatedAt: ts(1)}, time.Hour)
	mustOK(t, "CreateIdempotent with a Task", err)
	if !made || !bytes.Equal(get(t, s, "k").Task, taskOf("k")) {
		t.Errorf("CreateIdempotent with a Task: made %v, Task %q; want true, %q", made, get(t, s, "k").Task, taskOf("k"))
	}

	// A Task that is not JSON creates nothing, nor reserves the key.
	bad := json.RawMessage(`{"input": `)
	mustKind(t, "Create with a bad Task", s.Create(ctx, svc.RunRecord{RunID: "bad", Target: "echo", Kind: "agent", Task: bad}), svc.ErrSpecValidation)
	_, _, err = idem(t, s).CreateIdempotent(ctx, "badkey", "fp", svc.RunRecord{RunID: "bad2", Target: "echo", Kind: "agent", Task: bad}, time.Hour)
	mustKind(t, "CreateIdempotent with a bad Task", err, svc.ErrSpecValidation)
	_, _, err = idem(t, s).CreateIdempotent(ctx, "key", "fp", svc.RunRecord{RunID: "bad3", Target: "echo", Kind: "agent", Task: bad}, time.Hour)
	mustKind(t, "CreateIdempotent with a bad Task under a live key", err, svc.ErrSpecValidation)
	for _, id := range []string{"bad", "bad2", "bad3"} {
		_, err := s.Get(ctx, id)
		mustKind(t, "Get of a run refused for its Task", err, svc.ErrRegistry)
	}
	if id, made := createIdem(t, idem(t, s), "badkey", "other", "good", time.Hour); id != "good" || !made {
		t.Errorf("a key a refused create used: CreateIdempotent = %q, %v; want good, true (nothing reserved)", id, made)
	}

	// Get counts the steps; Status shows them and Resumed.
	moveTo(t, s, "a", svc.RunRunning)
	appendSteps(t, stepLog(t, s), "a", 3, step(svc.StepModelCall, "a", 0, `{"x":1}`), step(svc.StepToolCall, "a", 0, `1`),
		step(svc.StepModelCall, "a", 1, `2`))
	rec := get(t, s, "a")
	if rec.Steps != 3 || rec.Resumed != 0 {
		t.Errorf("Get after 3 steps: Steps %d, Resumed %d; want 3, 0", rec.Steps, rec.Resumed)
	}
	// The current step is the last one, as Steps reads it back.
	all, err := stepLog(t, s).Steps(ctx, "a", 0)
	if err != nil || len(all) != 3 {
		t.Fatalf("Steps = %d steps, %v; want 3", len(all), err)
	}
	wantCur := svc.StepRef{Seq: 3, Kind: svc.StepModelCall, Key: all[2].Key, At: all[2].Timestamp}
	if cur := rec.CurrentStep; cur == nil || cur.Seq != wantCur.Seq || cur.Kind != wantCur.Kind || cur.Key != wantCur.Key || !cur.At.Equal(wantCur.At) {
		t.Errorf("Get after 3 steps: CurrentStep %+v, want %+v", cur, wantCur)
	}
	rec.Resumed = 2
	if st := rec.Status(); st.Steps != 3 || st.Resumed != 2 || st.CurrentStep != rec.CurrentStep {
		t.Errorf("Status() = %+v, want steps 3, resumed 2, the current step", st)
	}
	none := get(t, s, "none")
	b, _ := json.Marshal(none.Status())
	if bytes.Contains(b, []byte("resumed")) || bytes.Contains(b, []byte("steps")) || none.CurrentStep != nil {
		t.Errorf("status of a run never resumed, without steps: %s; want neither resumed nor steps nor current_step", b)
	}
}

func testRecover(t *testing.T, s svc.RunStore) {
	ctx := t.Context()
	l := stepLog(t, s)
	// Unfinished runs with a Task, created in an order their ids do not
	// have, so the result's order must come from CreatedAt.
	createTask(t, s, "z-pending", ts(1))
	driveTask(t, s, "a-running", svc.RunRunning, ts(2))
	mustOK(t, "SetProgress", s.SetProgress(ctx, "a-running", svc.RunProgress{Total: 3, Completed: 1, Running: 1}))
	mustOK(t, "SetResult", s.SetResult(ctx, "a-running", json.RawMessage(`{"partial": true}`)))
	appendN(t, s, "a-running", 2)
	steps := []svc.RunStep{step(svc.StepModelCall, "a", 0, `{"content":"x"}`), step(svc.StepToolCall, "a", 0, `{"ok":1}`)}
	appendSteps(t, l, "a-running", 2, steps...)
	// Unfinished runs without one: failed as Interrupt fails them.
	create(t, s, "no-task-pending")
	drive(t, s, "no-task-running", svc.RunRunning)
	mustOK(t, "SetProgress", s.SetProgress(ctx, "no-task-running", svc.RunProgress{Total: 2, Running: 2}))
	// Terminal runs, with a Task: untouched.
	for _, st := range []svc.RunState{svc.RunCompleted, svc.RunFailed, svc.RunCancelled} {
		driveTask(t, s, string(st), st, ts(3))
	}
	ids := []string{"z-pending", "a-running", "no-task-pending", "no-task-running", "completed", "failed", "cancelled"}
	before := map[string]svc.RunRecord{}
	events := map[string][]svc.RunEvent{}
	for _, id := range ids {
		before[id], events[id] = get(t, s, id), eventsOf(t, s, id, 0)
	}
	if got := before["a-running"].Steps; got != 2 {
		t.Fatalf("Get of a run with 2 steps: Steps = %d", got)
	}

	claimed, n := recoverRuns(t, s)
	if want := []string{"z-pending", "a-running"}; !slices.Equal(idsOf(claimed), want) || n != 2 {
		t.Fatalf("Recover = %v, %d; want %v (oldest first), 2 (the runs without a Task)", idsOf(claimed), n, want)
	}
	for _, rec := range claimed {
		checkClaimed(t, s, "claimed "+rec.RunID, rec, before[rec.RunID], 1)
		checkEvents(t, "events of claimed "+rec.RunID, eventsOf(t, s, rec.RunID, 0), events[rec.RunID])
	}
	checkSteps(t, "steps of a claimed run", stepsOf(t, l, "a-running", 0), steps, 1)
	for _, id := range []string{"no-task-pending", "no-task-running"} {
		checkInterrupted(t, id+" after Recover", get(t, s, id), before[id])
		evs := eventsOf(t, s, id, 0)
		if len(evs) != len(events[id])+1 || evs[len(evs)-1].Type != svc.RunRunFailed || evs[len(evs)-1].Error != svc.ReasonInterrupted {
			t.Errorf("%s: events after Recover %+v, want %d then run_failed (interrupted)", id, evs, len(events[id]))
		}
	}
	for _, id := range []string{"completed", "failed", "cancelled"} {
		checkRecord(t, "terminal run after Recover", get(t, s, id), before[id])
		checkEvents(t, "terminal run's events after Recover", eventsOf(t, s, id, 0), events[id])
	}
	// What Recover returned is the caller's.
	claimed[0].Task[3] = 'X'
	if got := get(t, s, "z-pending"); !bytes.Equal(got.Task, taskOf("z-pending")) {
		t.Errorf("changing what Recover returned changed the stored Task: %q", got.Task)
	}

	// The next start claims them again.
	again, n := recoverRuns(t, s)
	if !slices.Equal(idsOf(again), []string{"z-pending", "a-running"}) || n != 0 {
		t.Fatalf("second Recover = %v, %d; want [z-pending a-running], 0", idsOf(again), n)
	}
	for i, rec := range again {
		claimed[i].Task = taskOf(rec.RunID)
		claimed[i].CurrentStep = before[rec.RunID].CurrentStep
		checkClaimed(t, s, "claimed twice "+rec.RunID, rec, claimed[i], 2)
	}

	// A claimed run goes on where it stopped.
	mustOK(t, "SetState of a claimed pending run", s.SetState(ctx, "z-pending", svc.RunRunning, "", nil))
	appendSteps(t, l, "a-running", 3, step(svc.StepModelCall, "a", 1, `{"content":"y"}`))
	mustAppend(t, s, "a-running", svc.RunEvent{Type: svc.RunAgentCompleted, Agent: "a", Timestamp: ts(9)}, 3)
	mustOK(t, "Finish a claimed run", s.Finish(ctx, "a-running", svc.RunCompleted, "", json.RawMessage(`{"done":1}`), nil))
	if got := get(t, s, "a-running"); got.State != svc.RunCompleted || got.Resumed != 2 || got.Steps != 3 ||
		!bytes.Equal(got.Task, taskOf("a-running")) {
		t.Errorf("claimed run after it finished: %+v; want completed, resumed 2, 3 steps, its Task", got)
	}
	claimed, n = recoverRuns(t, s)
	if !slices.Equal(idsOf(claimed), []string{"z-pending"}) || n != 0 || claimed[0].Resumed != 3 || claimed[0].State != svc.RunRunning {
		t.Errorf("third Recover = %+v, %d; want z-pending alone, running, resumed 3", claimed, n)
	}

	mustOK(t, "Close", s.Close())
	if _, _, err := resumable(t, s).Recover(ctx); err == nil {
		t.Error("Recover after Close succeeded")
	}
}

// testRecoverConcurrent: Recover calls racing on one store each claim
// every run, each with its own increment of Resumed: none is lost.
func testRecoverConcurrent(t *testing.T, s svc.RunStore) {
	const runs, calls = 12, 4
	for i := range runs {
		driveTask(t, s, fmt.Sprintf("run-%02d", i), []svc.RunState{svc.RunPending, svc.RunRunning}[i%2], ts(i))
	}
	r := resumable(t, s)
	var wg sync.WaitGroup
	got := make([][]svc.RunRecord, calls)
	errs := make([]error, calls)
	start := make(chan struct{})
	for c := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			got[c], _, errs[c] = r.Recover(context.Background())
		}()
	}
	close(start)
	wg.Wait()
	seen := map[string][]int{}
	for c := range calls {
		mustOK(t, "Recover", errs[c])
		if len(got[c]) != runs {
			t.Errorf("Recover %d claimed %d runs, want %d", c, len(got[c]), runs)
		}
		for _, rec := range got[c] {
			seen[rec.RunID] = append(seen[rec.RunID], rec.Resumed)
		}
	}
	for i := range runs {
		id := fmt.Sprintf("run-%02d", i)
		slices.Sort(seen[id])
		if !slices.Equal(seen[id], []int{1, 2, 3, 4}) {
			t.Errorf("%s: the racing Recovers saw Resumed %v, want [1 2 3 4] (each claim its own)", id, seen[id])
		}
		if rec := get(t, s, id); rec.Resumed != calls || !bytes.Equal(rec.Task, taskOf(id)) {
			t.Errorf("%s after %d Recovers: Resumed %d, Task %q", id, calls, rec.Resumed, rec.Task)
		}
	}
}

// resumeReopen is RunReopen's part for resumable runs: Task and Resumed
// survive a reopen, and the reopened store claims the runs again.
func resumeReopen(t *testing.T, open func(t *testing.T, dir string) svc.RunStore) {
	t.Helper()
	dir := t.TempDir()
	reopen := func() svc.RunStore {
		s := open(t, dir)
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	s := reopen()
	createTask(t, s, "t-pending", ts(1))
	driveTask(t, s, "t-running", svc.RunRunning, ts(2))
	appendSteps(t, stepLog(t, s), "t-running", 1, step(svc.StepModelCall, "a", 0, `{"content":"x"}`))
	drive(t, s, "no-task", svc.RunRunning)
	driveTask(t, s, "done", svc.RunCompleted, ts(3))
	claimed, n := recoverRuns(t, s)
	if !slices.Equal(idsOf(claimed), []string{"t-pending", "t-running"}) || n != 1 {
		t.Fatalf("Recover = %v, %d; want [t-pending t-running], 1", idsOf(claimed), n)
	}
	records := map[string]svc.RunRecord{}
	for _, id := range []string{"t-pending", "t-running", "no-task", "done"} {
		records[id] = get(t, s, id)
	}
	mustOK(t, "Close", s.Close())

	s = reopen()
	for id, rec := range records {
		checkRecord(t, id+" after reopen", get(t, s, id), rec)
	}
	claimed, n = recoverRuns(t, s)
	if !slices.Equal(idsOf(claimed), []string{"t-pending", "t-running"}) || n != 0 {
		t.Fatalf("Recover after reopen = %v, %d; want [t-pending t-running], 0", idsOf(claimed), n)
	}
	for _, rec := range claimed {
		checkClaimed(t, s, rec.RunID+" claimed after reopen", rec, records[rec.RunID], 2)
		rec.CurrentStep = records[rec.RunID].CurrentStep // Get's, as checkClaimed checked
		records[rec.RunID] = rec
	}
	mustOK(t, "Close", s.Close())

	s = reopen()
	defer func() { mustOK(t, "Close", s.Close()) }()
	for id, rec := range records {
		checkRecord(t, id+" after a second reopen", get(t, s, id), rec)
	}
}

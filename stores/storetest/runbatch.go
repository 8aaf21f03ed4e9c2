package storetest

// Rules of AppendBatch (svc.RunBatchWriter) beyond its doc comments, which
// the RunBatch subtests check:
//
//   - A batch's events are numbered after the run's events as Append
//     numbers them, its steps after the run's steps as AppendSteps numbers
//     them; Append, AppendSteps and AppendBatch interleave on one run.
//   - A refused batch (bad steps, a terminal or unknown run) writes none of
//     its progress, events or steps.
//   - Past the step log's bound, the events and progress are written and
//     the steps only while they fit; Full says so.
//   - A persistent store keeps what a batch wrote across reopen.

import (
	"fmt"
	"sync"
	"testing"

	"github.com/svc-dev/svc"
)

// batchWriter returns s as a svc.RunBatchWriter, failing the test if it is
// not one.
func batchWriter(t *testing.T, s svc.RunStore) svc.RunBatchWriter {
	t.Helper()
	b, ok := s.(svc.RunBatchWriter)
	if !ok {
		t.Fatalf("%T is not a svc.RunBatchWriter", s)
	}
	return b
}

// batchEvents are n test events of agent a from ts(first) on.
func batchEvents(a string, first, n int) []svc.RunEvent {
	evs := make([]svc.RunEvent, n)
	for i := range evs {
		evs[i] = svc.RunEvent{Type: svc.RunAgentStarted, Agent: a, TaskID: fmt.Sprintf("t%d", first+i), Timestamp: ts(first + i)}
	}
	return evs
}

// numbered is evs as the store of run id keeps them from Seq first on.
func numbered(id string, first int64, evs ...svc.RunEvent) []svc.RunEvent {
	out := make([]svc.RunEvent, len(evs))
	for i, ev := range evs {
		ev.Seq, ev.RunID = first+int64(i), id
		out[i] = ev
	}
	return out
}

func appendBatch(t *testing.T, w svc.RunBatchWriter, id string, b svc.RunBatch, want svc.RunBatchResult) {
	t.Helper()
	got, err := w.AppendBatch(t.Context(), id, b)
	mustOK(t, "AppendBatch "+id, err)
	if got.LastEvent != want.LastEvent || got.LastStep != want.LastStep || got.Steps != want.Steps || got.Full != nil {
		t.Fatalf("AppendBatch %s = %+v, want %+v", id, got, want)
	}
}

func checkProgress(t *testing.T, what string, got *svc.RunProgress, want svc.RunProgress) {
	t.Helper()
	if got == nil || *got != want {
		t.Errorf("%s: progress %+v, want %+v", what, got, want)
	}
}

func testRunBatchAppend(t *testing.T, s svc.RunStore) {
	w := batchWriter(t, s)
	drive(t, s, "r", svc.RunRunning)
	mustAppend(t, s, "r", svc.RunEvent{Type: svc.RunRunResumed, Timestamp: ts(1)}, 1)
	first := step(svc.StepModelCall, "a", 0, `{"content":"x"}`)
	appendSteps(t, w, "r", 1, first)

	evs := batchEvents("a", 10, 3)
	steps := []svc.RunStep{
		step(svc.StepToolCall, "a", 0, `{"result": "é\u00e9" , "n":[1, 2]}`),
		step(svc.StepModelCall, "a", 1, `"plain"`),
	}
	prog := svc.RunProgress{Total: 3, Completed: 1, Running: 2}
	appendBatch(t, w, "r", svc.RunBatch{Progress: &prog, Events: evs, Steps: steps},
		svc.RunBatchResult{LastEvent: 4, LastStep: 3, Steps: 2})
	// Events and steps only, no progress; then the single appends again.
	more := batchEvents("b", 20, 9) // more than the largest chunk of a multi-row insert
	moreSteps := make([]svc.RunStep, 10)
	for i := range moreSteps {
		moreSteps[i] = step(svc.StepToolCall, "b", i, fmt.Sprintf(`{"i":%d}`, i))
	}
	appendBatch(t, w, "r", svc.RunBatch{Events: more, Steps: moreSteps}, svc.RunBatchResult{LastEvent: 13, LastStep: 13, Steps: 10})
	appendBatch(t, w, "r", svc.RunBatch{Events: batchEvents("c", 40, 1)}, svc.RunBatchResult{LastEvent: 14})
	mustAppend(t, s, "r", svc.RunEvent{Type: svc.RunAgentCompleted, Agent: "a", Timestamp: ts(50)}, 15)
	last := step(svc.StepGroupNode, "n", 0, `{"agent_name":"n"}`)
	appendSteps(t, w, "r", 14, last)

	want := numbered("r", 1, svc.RunEvent{Type: svc.RunRunResumed, Timestamp: ts(1)})
	want = append(want, numbered("r", 2, evs...)...)
	want = append(want, numbered("r", 5, more...)...)
	want = append(want, numbered("r", 14, batchEvents("c", 40, 1)...)...)
	want = append(want, numbered("r", 15, svc.RunEvent{Type: svc.RunAgentCompleted, Agent: "a", Timestamp: ts(50)})...)
	checkEvents(t, "events after batches", eventsOf(t, s, "r", 0), want)
	wantSteps := append(append(append([]svc.RunStep{first}, steps...), moreSteps...), last)
	checkSteps(t, "steps after batches", stepsOf(t, w, "r", 0), wantSteps, 1)
	checkProgress(t, "after the batch with progress", get(t, s, "r").Progress, prog)

	// A batch of progress alone; an empty batch changes nothing.
	prog2 := svc.RunProgress{Total: 3, Completed: 3}
	appendBatch(t, w, "r", svc.RunBatch{Progress: &prog2}, svc.RunBatchResult{})
	appendBatch(t, w, "r", svc.RunBatch{}, svc.RunBatchResult{})
	checkProgress(t, "after a batch of progress", get(t, s, "r").Progress, prog2)
	if n := len(eventsOf(t, s, "r", 0)); n != 15 {
		t.Errorf("%d events after batches without events, want 15", n)
	}
	// No shared memory: changing what was given changes nothing stored.
	steps[0].Data[2] = 'X'
	prog.Total = 99
	fresh := step(svc.StepToolCall, "a", 0, `{"result": "é\u00e9" , "n":[1, 2]}`)
	checkSteps(t, "after the caller changed its slices", stepsOf(t, w, "r", 0)[1:2], []svc.RunStep{fresh}, 2)
	checkProgress(t, "after the caller changed its progress", get(t, s, "r").Progress, prog2)
}

func testRunBatchRefused(t *testing.T, s svc.RunStore) {
	w := batchWriter(t, s)
	ctx := t.Context()
	ok := step(svc.StepToolCall, "a", 0, `{}`)
	prog := svc.RunProgress{Total: 9}
	full := svc.RunBatch{Progress: &prog, Events: batchEvents("a", 1, 2), Steps: []svc.RunStep{ok}}
	_, err := w.AppendBatch(ctx, "nope", full)
	mustKind(t, "AppendBatch to an unknown run", err, svc.ErrRegistry)

	drive(t, s, "r", svc.RunRunning)
	before := get(t, s, "r")
	for name, steps := range map[string][]svc.RunStep{
		"unknown kind": {ok, {Kind: "nap", Key: "a#1", Data: []byte(`1`)}},
		"empty key":    {ok, {Kind: svc.StepModelCall, Data: []byte(`1`)}},
		"bad data":     {ok, {Kind: svc.StepModelCall, Key: "a#1", Data: []byte(`{"x":`)}},
	} {
		b := full
		b.Steps = steps
		_, err := w.AppendBatch(ctx, "r", b)
		mustKind(t, "AppendBatch with "+name, err, svc.ErrSpecValidation)
	}
	if evs := eventsOf(t, s, "r", 0); len(evs) != 0 {
		t.Errorf("refused batches wrote events %+v", evs)
	}
	if got := stepsOf(t, w, "r", 0); len(got) != 0 {
		t.Errorf("refused batches wrote steps %+v", got)
	}
	if got := get(t, s, "r").Progress; got != before.Progress && (got == nil || before.Progress == nil || *got != *before.Progress) {
		t.Errorf("refused batches wrote progress %+v", got)
	}

	appendBatch(t, w, "r", full, svc.RunBatchResult{LastEvent: 2, LastStep: 1, Steps: 1})
	mustOK(t, "Finish", s.Finish(ctx, "r", svc.RunCompleted, "", []byte(`{"ok":true}`), nil))
	done := get(t, s, "r")
	prog2 := svc.RunProgress{Total: 1}
	for name, b := range map[string]svc.RunBatch{
		"events":   {Events: batchEvents("b", 5, 1)},
		"steps":    {Steps: []svc.RunStep{step(svc.StepToolCall, "a", 1, `{}`)}},
		"progress": {Progress: &prog2},
		"nothing":  {},
	} {
		_, err := w.AppendBatch(ctx, "r", b)
		mustKind(t, "AppendBatch of "+name+" to a terminal run", err, svc.ErrRunState)
	}
	checkEvents(t, "events of the terminal run", eventsOf(t, s, "r", 0), numbered("r", 1, full.Events...))
	checkSteps(t, "steps of the terminal run", stepsOf(t, w, "r", 0), []svc.RunStep{ok}, 1)
	checkRecord(t, "the terminal run", get(t, s, "r"), done)

	mustOK(t, "Close", s.Close())
	if _, err := w.AppendBatch(ctx, "r", full); err == nil {
		t.Error("AppendBatch after Close succeeded")
	}
}

// testRunBatchFull fills the step log: the events of a batch are kept, and
// its steps while they fit.
func testRunBatchFull(t *testing.T, s svc.RunStore) {
	w := batchWriter(t, s)
	limit := w.MaxStepBytes()
	drive(t, s, "r", svc.RunRunning)
	half := svc.RunStep{Kind: svc.StepModelCall, Key: "k#0", Data: bigData(limit/2 - 3)}
	appendSteps(t, w, "r", 1, half)
	small := step(svc.StepToolCall, "s", 0, `1`)
	big := half
	big.Key = "k#1"
	after := step(svc.StepToolCall, "s", 1, `2`)
	evs := batchEvents("a", 1, 3)
	got, err := w.AppendBatch(t.Context(), "r", svc.RunBatch{Events: evs, Steps: []svc.RunStep{small, big, after}})
	mustOK(t, "AppendBatch past the bound", err)
	if got.LastEvent != 3 || got.Steps != 1 || got.LastStep != 2 {
		t.Errorf("AppendBatch past the bound = %+v, want events to 3, 1 step (Seq 2)", got)
	}
	mustKind(t, "AppendBatch past the bound: Full", got.Full, svc.ErrPayloadTooLarge)
	checkEvents(t, "events of a batch past the bound", eventsOf(t, s, "r", 0), numbered("r", 1, evs...))
	checkSteps(t, "steps of a batch past the bound", stepsOf(t, w, "r", 0), []svc.RunStep{half, small}, 1)
	// The run goes on: events still land, and steps that fit.
	appendBatch(t, w, "r", svc.RunBatch{Events: batchEvents("b", 9, 1), Steps: []svc.RunStep{after}},
		svc.RunBatchResult{LastEvent: 4, LastStep: 3, Steps: 1})
}

// testRunBatchConcurrent writes batches to many runs at once, as the writers
// of many runs do; under -race it also checks the store's locking.
func testRunBatchConcurrent(t *testing.T, s svc.RunStore) {
	w := batchWriter(t, s)
	const runs, per = 16, 10
	for r := range runs {
		drive(t, s, fmt.Sprintf("run-%02d", r), svc.RunRunning)
	}
	var wg sync.WaitGroup
	errs := make(chan error, runs)
	for r := range runs {
		wg.Go(func() {
			id := fmt.Sprintf("run-%02d", r)
			for i := range per {
				res, err := w.AppendBatch(t.Context(), id, svc.RunBatch{Events: batchEvents(id, 2*i, 2),
					Steps: []svc.RunStep{step(svc.StepModelCall, id, i, fmt.Sprintf(`{"i":%d}`, i))}})
				if err == nil && (res.LastEvent != int64(2*i+2) || res.LastStep != int64(i+1)) {
					err = fmt.Errorf("%s: batch %d = %+v", id, i, res)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for r := range runs {
		id := fmt.Sprintf("run-%02d", r)
		var want []svc.RunStep
		for i := range per {
			want = append(want, step(svc.StepModelCall, id, i, fmt.Sprintf(`{"i":%d}`, i)))
		}
		checkSteps(t, id, stepsOf(t, w, id, 0), want, 1)
		checkEvents(t, id+" events", eventsOf(t, s, id, 0), numbered(id, 1, batchEvents(id, 0, 2*per)...))
	}
}

// runBatchReopen is RunReopen's part for AppendBatch: what a batch wrote is
// kept, and the numbering goes on after the reopen.
func runBatchReopen(t *testing.T, open func(t *testing.T, dir string) svc.RunStore) {
	t.Helper()
	dir := t.TempDir()
	s := open(t, dir)
	t.Cleanup(func() { _ = s.Close() })
	drive(t, s, "r", svc.RunRunning)
	prog := svc.RunProgress{Total: 2, Running: 1}
	evs := batchEvents("a", 1, 3)
	steps := []svc.RunStep{step(svc.StepModelCall, "a", 0, `{"content":"x"}`), step(svc.StepToolCall, "a", 0, `{"ok":true}`)}
	appendBatch(t, batchWriter(t, s), "r", svc.RunBatch{Progress: &prog, Events: evs, Steps: steps},
		svc.RunBatchResult{LastEvent: 3, LastStep: 2, Steps: 2})
	mustOK(t, "Close", s.Close())

	s = open(t, dir)
	t.Cleanup(func() { _ = s.Close() })
	w := batchWriter(t, s)
	checkEvents(t, "batch events after reopen", eventsOf(t, s, "r", 0), numbered("r", 1, evs...))
	checkSteps(t, "batch steps after reopen", stepsOf(t, w, "r", 0), steps, 1)
	checkProgress(t, "batch progress after reopen", get(t, s, "r").Progress, prog)
	more := step(svc.StepModelCall, "a", 1, `{"more":1}`)
	appendBatch(t, w, "r", svc.RunBatch{Events: batchEvents("b", 9, 1), Steps: []svc.RunStep{more}},
		svc.RunBatchResult{LastEvent: 4, LastStep: 3, Steps: 1})
	mustOK(t, "Close", s.Close())
}

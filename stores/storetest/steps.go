package storetest

// Rules of the step log (svc.StepLog) beyond its doc comments, which the
// Steps subtests check:
//
//   - AppendSteps assigns Seq from 1 per run, in the order given, and keeps
//     Kind, Key, Data (byte-exact) and Timestamp (now when zero); the
//     caller's Seq is ignored. A store shares no memory with its callers.
//   - A refused batch (bad input, past the bound, a terminal or unknown
//     run) writes none of its steps.
//   - Steps stay readable once the run is terminal; a persistent store
//     keeps them, and the bytes counted against the bound, across reopen.

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc"
)

// stepLog returns s as a svc.StepLog, failing the test if it is not one.
func stepLog(t *testing.T, s svc.RunStore) svc.StepLog {
	t.Helper()
	l, ok := s.(svc.StepLog)
	if !ok {
		t.Fatalf("%T is not a svc.StepLog", s)
	}
	return l
}

// step returns the i-th test step of kind k with data of the given JSON.
func step(k svc.StepKind, path string, i int, data string) svc.RunStep {
	return svc.RunStep{Kind: k, Key: svc.StepKey(path, i), Data: []byte(data), Timestamp: ts(100 + i)}
}

// bigData is a JSON string whose encoding is n bytes long (n >= 2).
func bigData(n int64) []byte { return []byte(`"` + strings.Repeat("a", int(n-2)) + `"`) }

func appendSteps(t *testing.T, l svc.StepLog, id string, wantLast int64, steps ...svc.RunStep) {
	t.Helper()
	last, err := l.AppendSteps(t.Context(), id, steps...)
	mustOK(t, "AppendSteps "+id, err)
	if last != wantLast {
		t.Fatalf("AppendSteps %s returned %d, want %d", id, last, wantLast)
	}
}

func stepsOf(t *testing.T, l svc.StepLog, id string, after int64) []svc.RunStep {
	t.Helper()
	got, err := l.Steps(t.Context(), id, after)
	mustOK(t, "Steps "+id, err)
	return got
}

// checkSteps compares steps, with want's Seq numbered from first.
func checkSteps(t *testing.T, what string, got, want []svc.RunStep, first int64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d steps, want %d: %+v", what, len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		if g.Seq != first+int64(i) || g.Kind != w.Kind || g.Key != w.Key || !bytes.Equal(g.Data, w.Data) ||
			(!w.Timestamp.IsZero() && !g.Timestamp.Equal(w.Timestamp)) {
			t.Errorf("%s: step %d = {%d %s %s %s %v}, want {%d %s %s %s %v}", what, i,
				g.Seq, g.Kind, g.Key, g.Data, g.Timestamp, first+int64(i), w.Kind, w.Key, w.Data, w.Timestamp)
		}
	}
}

func testStepsAppend(t *testing.T, s svc.RunStore) {
	l := stepLog(t, s)
	drive(t, s, "r", svc.RunRunning)
	if got := stepsOf(t, l, "r", 0); len(got) != 0 {
		t.Fatalf("Steps of a run with none = %+v, want empty", got)
	}
	one := step(svc.StepModelCall, "a", 0, `{"content":"hi","usage":{"input_tokens":3},"cost_usd":0.25}`)
	one.Seq = 42 // ignored
	appendSteps(t, l, "r", 1, one)
	batch := []svc.RunStep{
		step(svc.StepToolCall, "a", 0, `{"result": "é\u00e9" , "n":[1, 2]}`),
		step(svc.StepModelCall, "a", 1, `"plain"`),
		{Kind: svc.StepGroupNode, Key: "node-b", Data: []byte(`{"agent_name":"b","success":true}`)},
	}
	before := time.Now().Add(-time.Second)
	appendSteps(t, l, "r", 4, batch...)
	want := append([]svc.RunStep{one}, batch...)
	got := stepsOf(t, l, "r", 0)
	checkSteps(t, "all steps", got, want, 1)
	if ts := got[3].Timestamp; ts.Before(before) || ts.After(time.Now().Add(time.Second)) {
		t.Errorf("zero Timestamp stored as %v, want about now", ts)
	}
	checkSteps(t, "steps after 2", stepsOf(t, l, "r", 2), want[2:], 3)
	if got := stepsOf(t, l, "r", 4); len(got) != 0 {
		t.Errorf("Steps after the last = %+v, want empty", got)
	}
	// No shared memory: changing what was given or read changes nothing.
	batch[0].Data[2] = 'X'
	got[1].Data[2] = 'Y'
	batch[0].Data[2], got[1].Data[2] = 'r', 'r'
	checkSteps(t, "after callers changed their slices", stepsOf(t, l, "r", 0), want, 1)
	// The run's events are untouched by its steps.
	if evs := eventsOf(t, s, "r", 0); len(evs) != 0 {
		t.Errorf("steps made events: %+v", evs)
	}
}

func testStepsInterleaved(t *testing.T, s svc.RunStore) {
	l := stepLog(t, s)
	ids := []string{"a", "b", "c"}
	for _, id := range ids {
		drive(t, s, id, svc.RunRunning)
	}
	want := map[string][]svc.RunStep{}
	for i := range 4 {
		for _, id := range ids {
			st := step(svc.StepToolCall, id, i, fmt.Sprintf(`{"run":%q,"i":%d}`, id, i))
			appendSteps(t, l, id, int64(i+1), st)
			want[id] = append(want[id], st)
		}
	}
	for _, id := range ids {
		checkSteps(t, "run "+id, stepsOf(t, l, id, 0), want[id], 1)
	}
}

func testStepsBound(t *testing.T, s svc.RunStore) {
	l := stepLog(t, s)
	limit := l.MaxStepBytes()
	if limit <= 0 {
		t.Fatalf("MaxStepBytes = %d", limit)
	}
	drive(t, s, "r", svc.RunRunning)
	// Three steps of a quarter of the bound fit; a fourth does not.
	quarter := svc.RunStep{Kind: svc.StepModelCall, Key: "k#0", Data: bigData(limit/4 - 3)}
	for i := range 3 {
		quarter.Key = svc.StepKey("k", i)
		appendSteps(t, l, "r", int64(i+1), quarter)
	}
	used := 3 * quarter.Size()
	left := limit - used
	small := svc.RunStep{Kind: svc.StepToolCall, Key: "s#0", Data: []byte(`1`)}
	over := svc.RunStep{Kind: svc.StepModelCall, Key: "o#0", Data: bigData(left - 3 - small.Size() + 1)}
	// The batch passes the bound by one byte: all of it is refused.
	_, err := l.AppendSteps(t.Context(), "r", small, over)
	mustKind(t, "AppendSteps past the bound", err, svc.ErrPayloadTooLarge)
	if got := stepsOf(t, l, "r", 0); len(got) != 3 {
		t.Fatalf("after a refused batch: %d steps, want 3 (nothing half-written)", len(got))
	}
	// One byte less fills the log exactly, and then nothing more fits.
	over.Data = bigData(int64(len(over.Data)) - 1)
	appendSteps(t, l, "r", 5, small, over)
	_, err = l.AppendSteps(t.Context(), "r", small)
	mustKind(t, "AppendSteps to a full log", err, svc.ErrPayloadTooLarge)
	// The bound is per run.
	drive(t, s, "other", svc.RunRunning)
	appendSteps(t, l, "other", 1, quarter)
	if got := stepsOf(t, l, "r", 0); len(got) != 5 || !bytes.Equal(got[4].Data, over.Data) {
		t.Errorf("full log read back with %d steps", len(got))
	}
}

func testStepsRefused(t *testing.T, s svc.RunStore) {
	l := stepLog(t, s)
	ctx := t.Context()
	ok := step(svc.StepToolCall, "a", 0, `{}`)
	_, err := l.AppendSteps(ctx, "nope", ok)
	mustKind(t, "AppendSteps to an unknown run", err, svc.ErrRegistry)
	_, err = l.Steps(ctx, "nope", 0)
	mustKind(t, "Steps of an unknown run", err, svc.ErrRegistry)

	drive(t, s, "r", svc.RunRunning)
	for name, batch := range map[string][]svc.RunStep{
		"no steps":     nil,
		"unknown kind": {ok, {Kind: "nap", Key: "a#1", Data: []byte(`1`)}},
		"empty key":    {ok, {Kind: svc.StepModelCall, Data: []byte(`1`)}},
		"bad data":     {ok, {Kind: svc.StepModelCall, Key: "a#1", Data: []byte(`{"x":`)}},
	} {
		_, err := l.AppendSteps(ctx, "r", batch...)
		mustKind(t, "AppendSteps with "+name, err, svc.ErrSpecValidation)
	}
	if got := stepsOf(t, l, "r", 0); len(got) != 0 {
		t.Fatalf("refused batches wrote %+v", got)
	}

	appendSteps(t, l, "r", 1, ok)
	mustOK(t, "Finish", s.Finish(ctx, "r", svc.RunCompleted, "", []byte(`{"ok":true}`), nil))
	_, err = l.AppendSteps(ctx, "r", step(svc.StepToolCall, "a", 1, `{}`))
	mustKind(t, "AppendSteps to a terminal run", err, svc.ErrRunState)
	checkSteps(t, "steps of a terminal run", stepsOf(t, l, "r", 0), []svc.RunStep{ok}, 1)

	mustOK(t, "Close", s.Close())
	if _, err := l.AppendSteps(ctx, "r", ok); err == nil {
		t.Error("AppendSteps after Close succeeded")
	}
	if _, err := l.Steps(ctx, "r", 0); err == nil {
		t.Error("Steps after Close succeeded")
	}
}

// testStepsConcurrent appends to many runs at once, one step per call, as
// the agents of many runs would; under -race it also checks the store's
// locking.
func testStepsConcurrent(t *testing.T, s svc.RunStore) {
	l := stepLog(t, s)
	const runs, per = 20, 15
	for r := range runs {
		drive(t, s, fmt.Sprintf("run-%02d", r), svc.RunRunning)
	}
	var wg sync.WaitGroup
	errs := make(chan error, runs)
	for r := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("run-%02d", r)
			for i := range per {
				last, err := l.AppendSteps(t.Context(), id, step(svc.StepModelCall, id, i, fmt.Sprintf(`{"i":%d}`, i)))
				if err == nil && last != int64(i+1) {
					err = fmt.Errorf("%s: AppendSteps %d returned Seq %d", id, i, last)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
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
		checkSteps(t, id, stepsOf(t, l, id, 0), want, 1)
	}
}

// reopenSteps is RunReopen's part for the step log: write writes steps
// before the close, check reads them after it and goes on.
func reopenSteps(t *testing.T, s svc.RunStore) (check func(t *testing.T, s svc.RunStore)) {
	l := stepLog(t, s)
	r := []svc.RunStep{
		step(svc.StepModelCall, "a", 0, `{"content":"x","cost_usd":0.5}`),
		step(svc.StepToolCall, "a", 0, `{"ok": true}`),
	}
	appendSteps(t, l, "r", 2, r...)
	c := []svc.RunStep{step(svc.StepGroupNode, "n", 0, `{"agent_name":"n"}`)}
	appendSteps(t, l, "c", 1, c...)
	return func(t *testing.T, s svc.RunStore) {
		l := stepLog(t, s)
		checkSteps(t, "steps of r after reopen", stepsOf(t, l, "r", 0), r, 1)
		checkSteps(t, "steps of c after reopen", stepsOf(t, l, "c", 0), c, 1)
		// The bytes recorded count after the reopen too.
		var used int64
		for _, st := range r {
			used += st.Size()
		}
		next := step(svc.StepModelCall, "a", 1, "")
		next.Data = bigData(l.MaxStepBytes() - used - int64(len(next.Key)) + 1)
		_, err := l.AppendSteps(t.Context(), "r", next)
		mustKind(t, "AppendSteps past the bound after reopen", err, svc.ErrPayloadTooLarge)
		more := step(svc.StepModelCall, "a", 1, `{"more":1}`)
		appendSteps(t, l, "r", 3, more)
		checkSteps(t, "steps of r going on after reopen", stepsOf(t, l, "r", 0), append(r, more), 1)
	}
}

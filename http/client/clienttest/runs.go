package clienttest

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/http/client"
)

// RunSubmit runs the contract suite of svc.RunBackend, the asynchronous
// runs, over the fixture of Run (agents echo, fail, slow; groups pair,
// split, slowpair; nothing named "nope"). newBackend is called once per
// subtest and registers its own cleanup.
func RunSubmit(t *testing.T, newBackend func(t *testing.T) svc.RunBackend) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, b svc.RunBackend)
	}{
		{"SubmitEcho", testSubmitEcho},
		{"SubmitFail", testSubmitFail},
		{"SubmitCancel", testSubmitCancel},
		{"SubmitUnknown", testSubmitUnknown},
		{"UnknownRun", testUnknownRun},
		{"Events", testRunEvents},
		{"EventsLive", testRunEventsLive},
		{"SubmitGroups", testSubmitGroups},
		{"SubmitTokenBudget", testSubmitTokenBudget},
		{"SubmitIdempotent", testSubmitIdempotent},
		{"EventsWithDeltas", testRunEventsWithDeltas},
		{"EventsWithDeltasLive", testRunEventsWithDeltasLive},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, newBackend(t))
		})
	}
}

// waitTerminal polls a run's status until it is terminal, within the
// suite's call timeout.
func waitTerminal(t *testing.T, b svc.RunBackend, id string) svc.RunStatus {
	t.Helper()
	ctx := ctxFor(t)
	for {
		st, err := b.RunStatus(ctx, id)
		if err != nil {
			t.Fatalf("RunStatus(%s): %v", id, err)
		}
		if st.State.Terminal() {
			return st
		}
		select {
		case <-ctx.Done():
			t.Fatalf("run %s still %s after %v", id, st.State, callTimeout)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// collect reads a run's events until the channel closes.
func collect(t *testing.T, b svc.RunBackend, id string, after int64) []svc.RunEvent {
	t.Helper()
	ctx := ctxFor(t)
	ch, err := b.RunEvents(ctx, id, after)
	if err != nil {
		t.Fatalf("RunEvents(%s, %d): %v", id, after, err)
	}
	var evs []svc.RunEvent
	for ev := range ch {
		evs = append(evs, ev)
	}
	if ctx.Err() != nil {
		t.Fatalf("RunEvents(%s, %d) did not close within %v for a finished run; got %d events", id, after, callTimeout, len(evs))
	}
	return evs
}

func testSubmitEcho(t *testing.T, b svc.RunBackend) {
	run, err := client.Submit(ctxFor(t), b, "echo", svc.TaskSpec{ID: "task-1", Input: json.RawMessage(groupInput), RequestID: "req-submit"}, "")
	if err != nil {
		t.Fatalf("Submit(echo): %v", err)
	}
	if run.ID == "" || run.Target != "echo" {
		t.Fatalf("Submit(echo) = id %q, target %q", run.ID, run.Target)
	}
	// Result waits for the end: no polling here.
	raw, err := run.Result(ctxFor(t))
	if err != nil {
		t.Fatalf("Result: %v", err)
	}
	var res svc.AgentResult
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatalf("Result %s is not an AgentResult: %v", raw, err)
	}
	if !res.Success || res.AgentName != "echo" || res.TaskID != "task-1" || !sameJSON(t, res.Output, json.RawMessage(groupInput)) {
		t.Errorf("Result = %s; want echo's success on task-1 with the input as output", raw)
	}
	if res.Metadata.TraceID != "req-submit" {
		t.Errorf("Result trace_id = %q, want the task's request_id", res.Metadata.TraceID)
	}
	st, err := run.Status(ctxFor(t))
	if err != nil {
		t.Fatal(err)
	}
	if st.RunID != run.ID || st.State != svc.RunCompleted {
		t.Errorf("Status = %+v, want run %s completed", st, run.ID)
	}
	if st.TraceID != "req-submit" {
		t.Errorf("Status trace_id = %q, want the task's request_id", st.TraceID)
	}
	again, err := b.RunResult(ctxFor(t), run.ID)
	if err != nil || !sameJSON(t, again, raw) {
		t.Errorf("RunResult again = %s, %v; want the same result", again, err)
	}
	// Cancelling a finished run is allowed and changes nothing.
	if err := run.Cancel(ctxFor(t)); err != nil {
		t.Errorf("Cancel of a completed run: %v, want nil", err)
	}
	if st, err := b.RunStatus(ctxFor(t), run.ID); err != nil || st.State != svc.RunCompleted {
		t.Errorf("Status after a late cancel = %+v, %v; want completed", st, err)
	}
}

func testSubmitFail(t *testing.T, b svc.RunBackend) {
	run, err := client.Submit(ctxFor(t), b, "fail", svc.TaskSpec{Input: json.RawMessage(`1`)}, svc.TargetAgent)
	if err != nil {
		t.Fatalf("Submit(fail): %v", err)
	}
	st := waitTerminal(t, b, run.ID)
	if st.State != svc.RunFailed {
		t.Errorf("Status of a failing run = %s, want failed", st.State)
	}
	raw, err := run.Result(ctxFor(t))
	if err != nil {
		t.Fatalf("Result of a failed run: %v; want its failed AgentResult", err)
	}
	var res svc.AgentResult
	if err := json.Unmarshal(raw, &res); err != nil || res.Success || res.Error == nil || res.Error.Type != string(svc.KindModel) {
		t.Errorf("Result = %s (%v); want success false with a ModelError", raw, err)
	}
}

func testSubmitCancel(t *testing.T, b svc.RunBackend) {
	run, err := client.Submit(ctxFor(t), b, "slow", svc.TaskSpec{Input: json.RawMessage(`1`)}, "")
	if err != nil {
		t.Fatalf("Submit(slow): %v", err)
	}
	start := time.Now()
	if err := b.CancelRun(ctxFor(t), run.ID); err != nil {
		t.Fatalf("CancelRun: %v", err)
	}
	st := waitTerminal(t, b, run.ID)
	if st.State != svc.RunCancelled {
		t.Fatalf("Status after cancel = %s, want cancelled", st.State)
	}
	// The model sleeps 10 s: the run must not have waited for it.
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("cancel took %v to reach the cancelled state", d)
	}
	if _, err := b.RunResult(ctxFor(t), run.ID); !errors.Is(err, svc.ErrRunState) {
		t.Errorf("RunResult of a cancelled run: %v, want a RunStateError", err)
	}
	if _, err := run.Result(ctxFor(t)); !errors.Is(err, svc.ErrRunState) {
		t.Errorf("Run.Result of a cancelled run: %v, want a RunStateError", err)
	}
	if err := b.CancelRun(ctxFor(t), run.ID); err != nil {
		t.Errorf("second CancelRun: %v, want nil (idempotent)", err)
	}
	evs := collect(t, b, run.ID, 0)
	if len(evs) == 0 || evs[len(evs)-1].Type != svc.RunRunCancelled {
		t.Errorf("events of a cancelled run = %v, want run_cancelled last", types(evs))
	}
	if st := waitTerminal(t, b, run.ID); st.State != svc.RunCancelled {
		t.Errorf("state after a while = %s: cancelled must be final", st.State)
	}
}

func testSubmitUnknown(t *testing.T, b svc.RunBackend) {
	for _, req := range []svc.SubmitRequest{
		{Target: "nope", Task: svc.TaskSpec{Input: json.RawMessage(`1`)}},
		{Target: "nope", Task: svc.TaskSpec{Input: json.RawMessage(`1`)}, Kind: svc.TargetAgent},
		// An agent's name is not a group's, nor the other way round.
		{Target: "echo", Task: svc.TaskSpec{Input: json.RawMessage(`1`)}, Kind: svc.TargetGroup},
		{Target: "pair", Task: svc.TaskSpec{Input: json.RawMessage(`1`)}, Kind: svc.TargetAgent},
	} {
		id, err := b.Submit(ctxFor(t), req)
		if !errors.Is(err, svc.ErrRegistry) {
			t.Errorf("Submit(%s, kind %q) = %q, %v; want a RegistryError", req.Target, req.Kind, id, err)
		}
		if id != "" {
			t.Errorf("Submit(%s, kind %q) refused but returned run id %q", req.Target, req.Kind, id)
		}
	}
	// The refusals say what to submit instead.
	for _, tc := range []struct {
		req  svc.SubmitRequest
		want string
	}{
		{svc.SubmitRequest{Target: "nope"}, `unknown target "nope" (registered agents: `},
		{svc.SubmitRequest{Target: "echo", Kind: svc.TargetGroup}, `echo is an agent: submit it with kind "agent"`},
		{svc.SubmitRequest{Target: "pair", Kind: svc.TargetAgent}, `pair is a group: submit it with kind "group"`},
	} {
		tc.req.Task = svc.TaskSpec{Input: json.RawMessage(`1`)}
		if _, err := b.Submit(ctxFor(t), tc.req); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Submit(%s, kind %q) = %v, want it to say %q", tc.req.Target, tc.req.Kind, err, tc.want)
		}
	}
}

func testUnknownRun(t *testing.T, b svc.RunBackend) {
	const id = "nope-run"
	// The same words from every backend and store, none of them a
	// package's name: users read this text in a 404.
	const want = `unknown run "nope-run"`
	check := func(call string, err error) {
		t.Helper()
		if !errors.Is(err, svc.ErrRegistry) || err.Error() != want {
			t.Errorf("%s(unknown) = %v, want a RegistryError %q", call, err, want)
		}
	}
	check("CancelRun", b.CancelRun(ctxFor(t), id))
	_, err := b.RunStatus(ctxFor(t), id)
	check("RunStatus", err)
	_, err = b.RunResult(ctxFor(t), id)
	check("RunResult", err)
	ctx, cancel := context.WithCancel(ctxFor(t))
	defer cancel()
	_, err = b.RunEvents(ctx, id, 0)
	check("RunEvents", err)
}

func types(evs []svc.RunEvent) []svc.RunEventType {
	out := make([]svc.RunEventType, len(evs))
	for i, ev := range evs {
		out[i] = ev.Type
	}
	return out
}

func testRunEvents(t *testing.T, b svc.RunBackend) {
	run, err := client.Submit(ctxFor(t), b, "echo", svc.TaskSpec{ID: "ev-task", Input: json.RawMessage(`{"x":1}`)}, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Result(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	evs := collect(t, b, run.ID, 0)
	if len(evs) < 2 {
		t.Fatalf("events = %v, want at least agent_started and agent_completed", types(evs))
	}
	if evs[0].Type != svc.RunAgentStarted || evs[1].Type != svc.RunAgentCompleted {
		t.Errorf("events = %v, want agent_started then agent_completed first", types(evs))
	}
	for i, ev := range evs {
		if ev.Seq != int64(i+1) {
			t.Errorf("event %d has seq %d, want %d (numbered from 1 without gaps)", i, ev.Seq, i+1)
		}
		if ev.RunID != run.ID {
			t.Errorf("event %d run_id = %q, want %q", i, ev.RunID, run.ID)
		}
		if ev.Timestamp.IsZero() {
			t.Errorf("event %d has no timestamp", i)
		}
	}
	for _, ev := range evs[:2] {
		if ev.Agent != "echo" || ev.Error != "" {
			t.Errorf("%s event = agent %q, error %q; want agent echo without error", ev.Type, ev.Agent, ev.Error)
		}
	}
	resumed := collect(t, b, run.ID, 1)
	if !slices.EqualFunc(resumed, evs[1:], sameEvent) {
		t.Errorf("events after 1 = %v, want %v", resumed, evs[1:])
	}
	if rest := collect(t, b, run.ID, evs[len(evs)-1].Seq); len(rest) != 0 {
		t.Errorf("events after the last = %v, want none", rest)
	}
}

// sameEvent compares events as they cross the wire: timestamps at the
// precision of their JSON.
func sameEvent(a, b svc.RunEvent) bool {
	return a.Seq == b.Seq && a.Type == b.Type && a.RunID == b.RunID && a.Agent == b.Agent &&
		a.TaskID == b.TaskID && a.Error == b.Error && a.Timestamp.Equal(b.Timestamp)
}

// testRunEventsLive follows a run from before it ends: the stream delivers
// what happens after it was opened and closes once the run is terminal.
func testRunEventsLive(t *testing.T, b svc.RunBackend) {
	run, err := client.Submit(ctxFor(t), b, "slow", svc.TaskSpec{Input: json.RawMessage(`1`)}, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t)
	ch, err := run.Events(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Cancel(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	var evs []svc.RunEvent
	for ev := range ch {
		evs = append(evs, ev)
	}
	if ctx.Err() != nil {
		t.Fatalf("a live stream did not close after the run was cancelled; got %v", types(evs))
	}
	if len(evs) == 0 || evs[len(evs)-1].Type != svc.RunRunCancelled {
		t.Errorf("live events = %v, want run_cancelled last", types(evs))
	}
}

func testSubmitGroups(t *testing.T, b svc.RunBackend) {
	split, err := client.Submit(ctxFor(t), b, "split", svc.TaskSpec{Input: json.RawMessage(groupInput)}, "")
	if err != nil {
		t.Fatalf("Submit(split): %v", err)
	}
	raw, err := split.Result(ctxFor(t))
	if err != nil {
		t.Fatalf("Result(split): %v", err)
	}
	var g svc.GroupResult
	if err := json.Unmarshal(raw, &g); err != nil || !g.Group || !g.Success || len(g.Outputs) != 2 {
		t.Errorf("Result(split) = %s (%v); want a successful GroupResult with two outputs", raw, err)
	}
	if st := waitTerminal(t, b, split.ID); st.State != svc.RunCompleted {
		t.Errorf("Status(split) = %s, want completed", st.State)
	}

	pair, err := client.Submit(ctxFor(t), b, "pair", svc.TaskSpec{Input: json.RawMessage(groupInput)}, svc.TargetGroup)
	if err != nil {
		t.Fatalf("Submit(pair): %v", err)
	}
	raw, err = pair.Result(ctxFor(t))
	if err != nil {
		t.Fatalf("Result(pair): %v", err)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		t.Fatalf("Result(pair) = %s: %v", raw, err)
	}
	if g, ok := obj["group"]; ok && string(g) == "true" {
		t.Errorf("Result(pair) = %s; one terminal fired, want the plain AgentResult", raw)
	}
	if !sameJSON(t, obj["output"], json.RawMessage(groupInput)) {
		t.Errorf("Result(pair).output = %s, want the input through two echoes", obj["output"])
	}
}

// testSubmitTokenBudget: a submitted task's token_budget caps its run as it
// does a synchronous one: below what echo spends, the run fails; a
// negative one is refused at Submit.
func testSubmitTokenBudget(t *testing.T, b svc.RunBackend) {
	run, err := client.Submit(ctxFor(t), b, "echo", svc.TaskSpec{Input: json.RawMessage(`1`), TokenBudget: 1}, svc.TargetAgent)
	if err != nil {
		t.Fatalf("Submit(echo, token_budget 1): %v", err)
	}
	st := waitTerminal(t, b, run.ID)
	if st.State != svc.RunFailed {
		t.Fatalf("Status of a run over its token_budget = %+v, want failed", st)
	}
	if raw, err := run.Result(ctxFor(t)); err == nil {
		var res svc.AgentResult
		if err := json.Unmarshal(raw, &res); err != nil || res.Success || res.Error == nil || res.Error.Type != string(svc.KindBudgetExceeded) {
			t.Errorf("Result = %s (%v); want success false with a BudgetExceededError", raw, err)
		}
	}
	if _, err := client.Submit(ctxFor(t), b, "echo", svc.TaskSpec{Input: json.RawMessage(`1`), TokenBudget: -1}, svc.TargetAgent); !errors.Is(err, svc.ErrSpecValidation) {
		t.Fatalf("Submit with token_budget -1: %v, want a SpecValidationError", err)
	}
}

// testSubmitIdempotent: the request's IdempotencyKey reaches the backend,
// so a retried submit returns the first run and a different request with
// the same key is refused.
func testSubmitIdempotent(t *testing.T, b svc.RunBackend) {
	key := "key-" + time.Now().Format(time.RFC3339Nano)
	req := svc.SubmitRequest{Target: "echo", Task: svc.TaskSpec{Input: json.RawMessage(`1`), RequestID: "req-idem"}, IdempotencyKey: key}
	first, err := b.Submit(ctxFor(t), req)
	if err != nil {
		t.Fatalf("Submit: %v", err)
	}
	again, err := b.Submit(ctxFor(t), req)
	if err != nil || again != first {
		t.Errorf("Submit again with key %q = %q, %v; want the first run %q", key, again, err, first)
	}
	other := req
	other.Task.Input = json.RawMessage(`2`)
	if id, err := b.Submit(ctxFor(t), other); !errors.Is(err, svc.ErrRunState) {
		t.Errorf("Submit of another request with the same key = %q, %v; want a RunStateError", id, err)
	}
	waitTerminal(t, b, first)
}

// deltaStreamer returns b as an svc.RunDeltaStreamer, or skips the test.
func deltaStreamer(t *testing.T, b svc.RunBackend) svc.RunDeltaStreamer {
	t.Helper()
	ds, ok := b.(svc.RunDeltaStreamer)
	if !ok {
		t.Skipf("%T does not follow deltas (svc.RunDeltaStreamer)", b)
	}
	return ds
}

// testRunEventsWithDeltas: a finished run followed with deltas gives its
// stored events, the same as RunEvents, and no delta (deltas are live only,
// never replayed); an unknown run is RunEvents' error.
func testRunEventsWithDeltas(t *testing.T, b svc.RunBackend) {
	ds := deltaStreamer(t, b)
	run, err := client.Submit(ctxFor(t), b, "echo", svc.TaskSpec{Input: json.RawMessage(`"one two three"`)}, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Result(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	want := collect(t, b, run.ID, 0)
	for _, after := range []int64{0, 1} {
		ctx := ctxFor(t)
		ch, err := ds.RunEventsWithDeltas(ctx, run.ID, after)
		if err != nil {
			t.Fatalf("RunEventsWithDeltas(%d): %v", after, err)
		}
		var got []svc.RunEvent
		for ev := range ch {
			got = append(got, ev)
		}
		if ctx.Err() != nil {
			t.Fatalf("RunEventsWithDeltas(%d) of a finished run did not close", after)
		}
		if !slices.EqualFunc(got, want[after:], sameEvent) {
			t.Errorf("RunEventsWithDeltas(after %d) of a finished run = %v, want RunEvents' %v", after, types(got), types(want[after:]))
		}
	}
	ctx, cancel := context.WithCancel(ctxFor(t))
	defer cancel()
	_, err = ds.RunEventsWithDeltas(ctx, "nope-run", 0)
	if !errors.Is(err, svc.ErrRegistry) || err.Error() != `unknown run "nope-run"` {
		t.Errorf("RunEventsWithDeltas(unknown) = %v, want RunEvents' RegistryError", err)
	}
}

// testRunEventsWithDeltasLive follows a run with deltas from before it
// ends: the stream closes once the run is terminal, the terminal event
// last, and whatever deltas came are the run's, with Seq 0 and text,
// before its terminal event.
func testRunEventsWithDeltasLive(t *testing.T, b svc.RunBackend) {
	ds := deltaStreamer(t, b)
	run, err := client.Submit(ctxFor(t), b, "slow", svc.TaskSpec{Input: json.RawMessage(`1`)}, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t)
	ch, err := ds.RunEventsWithDeltas(ctx, run.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Cancel(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	var evs []svc.RunEvent
	for ev := range ch {
		if ev.Type == svc.RunDelta && (ev.Seq != 0 || ev.RunID != run.ID || ev.Text == "") {
			t.Errorf("delta %+v: want Seq 0, run %s and a text", ev, run.ID)
		}
		evs = append(evs, ev)
	}
	if ctx.Err() != nil {
		t.Fatalf("a live stream with deltas did not close after the run was cancelled; got %v", types(evs))
	}
	if len(evs) == 0 || evs[len(evs)-1].Type != svc.RunRunCancelled {
		t.Errorf("live events with deltas = %v, want run_cancelled last", types(evs))
	}
}

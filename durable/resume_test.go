package durable

import (
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/svc-dev/svc/llmsim"
)

// stepMs is how long each scripted model call takes: long enough that a
// kill lands inside the call it aims at on a loaded machine.
const stepMs = 2000

// resumeCase is one killed run: what is submitted, when the server is
// killed, and what the resumed run must have paid.
type resumeCase struct {
	target, kind string
	input        any
	// killWhen sees llmsim's calls per model since the run was submitted
	// and says when the step to interrupt is in flight.
	killWhen func(calls map[string]int) bool
	// calls is llmsim's count per model for the killed and resumed run:
	// each step completed before the kill once, the one in flight twice.
	calls map[string]int
	// inFlight is the agent whose invocation the kill interrupts (its
	// start is in the history once, though it starts again after the
	// restart); inFlightModel is the model of the call the kill cuts.
	inFlight, inFlightModel string
	// startsOver is set when the interrupted agent runs as a nested run (a
	// team's delegate): the step is the coordinator's tool call, so the
	// nested run starts over as a new one and its start is reported again
	// (docs/api.md, "Durable runs").
	startsOver bool
	// after runs last, for the case's own checks (a tool's calls).
	after func(t *testing.T)
}

// checkResume runs c twice on one store: once to the end (the reference),
// then again with `svc serve` killed by SIGKILL while c.killWhen holds,
// and started again on the same store. The killed run must be resumed at
// the restart and end as the reference did (state, output, agent, tokens,
// steps) with status resumed 1, having called each model exactly as
// c.calls says; its stored events must be the reference's plus one
// run_resumed (none twice, not even the interrupted agent's start, but
// for a nested run that starts over), and
// a client that followed the stream before the kill must get the rest of
// it, no more and no less, by reconnecting with Last-Event-ID.
func checkResume(t *testing.T, w *world, c resumeCase) {
	s1 := w.serve()

	refID := w.submit(s1.URL, c.target, c.kind, c.input)
	refSt := w.waitDone(s1.URL, refID)
	if refSt.State != "completed" {
		t.Fatalf("the reference run (no kill) ended %s: %s", refSt.State, refSt.raw)
	}
	ref := w.result(s1.URL, refID)
	refEvents := w.history(s1.URL, refID)
	refCalls := maps.Clone(c.calls)
	refCalls[c.inFlightModel]--
	if got := since(w.calls(), nil); !maps.Equal(got, refCalls) {
		t.Fatalf("the reference run called %v, want each model once per step: %v", got, refCalls)
	}
	t.Logf("reference run: %s, result %s, events %v", refSt.raw, ref.raw, refEvents)

	before := w.calls()
	id := w.submit(s1.URL, c.target, c.kind, c.input)
	fl := w.follow(s1.URL, id)
	deadline := time.Now().Add(60 * time.Second)
	for !c.killWhen(since(w.calls(), before)) {
		if time.Now().After(deadline) {
			t.Fatalf("the step to interrupt did not start within 60 s: calls %v, status %s", since(w.calls(), before), w.status(s1.URL, id).raw)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // well inside the call of stepMs
	if st := w.status(s1.URL, id); st.State != "running" {
		t.Fatalf("the run is %s at the kill, want running: %s", st.State, st.raw)
	}
	atKill := since(w.calls(), before)
	s1.Kill(t)
	seen := fl.wait(t)
	t.Logf("killed svc serve during %s: calls %v, events followed %v", c.inFlight, atKill, seen)

	s2 := w.serve()
	st := w.waitDone(s2.URL, id)
	if st.State != "completed" {
		t.Fatalf("the killed run ended %s after the restart, want completed (resumed): %s", st.State, st.raw)
	}
	if st.Resumed == nil || *st.Resumed != 1 {
		t.Errorf("status %s: want resumed 1", st.raw)
	}
	if refSt.Resumed != nil && *refSt.Resumed != 0 {
		t.Errorf("the reference run's status %s: want resumed 0", refSt.raw)
	}
	switch {
	case st.Steps == nil || refSt.Steps == nil:
		t.Errorf("status without steps: killed %s, reference %s", st.raw, refSt.raw)
	case *st.Steps != *refSt.Steps || *st.Steps == 0:
		t.Errorf("steps %d, the reference run's %d: a resumed run records each step once", *st.Steps, *refSt.Steps)
	case st.CurrentStep == nil || st.CurrentStep.Seq != *st.Steps || refSt.CurrentStep == nil ||
		st.CurrentStep.Kind != refSt.CurrentStep.Kind:
		t.Errorf("current step: killed %s, reference %s; want the last step, of the same kind", st.raw, refSt.raw)
	}

	got := w.result(s2.URL, id)
	if !got.Success || string(got.Output) != string(ref.Output) || got.AgentName != ref.AgentName {
		t.Errorf("result %s\nwant the reference run's %s", got.raw, ref.raw)
	}
	if got.Metadata.TokensUsed != ref.Metadata.TokensUsed {
		t.Errorf("tokens_used %d, the reference run's %d: a replayed step's usage counts once", got.Metadata.TokensUsed, ref.Metadata.TokensUsed)
	}
	if calls := since(w.calls(), before); !maps.Equal(calls, c.calls) {
		t.Errorf("llmsim calls of the killed run %v, want %v: each step completed before the kill once, the one in flight twice", calls, c.calls)
	}

	events := w.history(s2.URL, id)
	checkSeqs(t, "history", events)
	want := counts(refEvents)
	want["run_resumed/"]++
	have := counts(events)
	if c.startsOver && have["agent_started/"+c.inFlight] == want["agent_started/"+c.inFlight]+1 {
		have["agent_started/"+c.inFlight]--
	}
	if !maps.Equal(have, want) {
		t.Errorf("events %v\nwant the reference run's %v and one run_resumed: %v", events, refEvents, diff(have, want))
	}
	if len(events) > 0 {
		if last := events[len(events)-1].Event; last != refEvents[len(refEvents)-1].Event {
			t.Errorf("the history ends with %s, the reference run's with %s", last, refEvents[len(refEvents)-1].Event)
		}
	}

	// A client that followed the run before the kill reconnects with the
	// last id it saw and gets the rest.
	if len(seen) == 0 {
		t.Fatal("the stream followed before the kill got no event")
	}
	rest := []frame{}
	ctx := t.Context()
	if err := w.stream(ctx, s2.URL, id, seen[len(seen)-1].ID, func(f frame) { rest = append(rest, f) }); err != nil {
		t.Fatalf("stream after Last-Event-ID %s: %v", seen[len(seen)-1].ID, err)
	}
	joined := append(append([]frame(nil), seen...), rest...)
	if !slices.EqualFunc(joined, events, func(a, b frame) bool { return a.ID == b.ID && a.Event == b.Event && a.Agent == b.Agent }) {
		t.Errorf("followed before the kill %v\nthen after Last-Event-ID %v\nwant the history %v", seen, rest, events)
	}
	if c.after != nil {
		c.after(t)
	}
}

func diff(have, want map[string]int) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(have)) {
		if have[k] != want[k] {
			out = append(out, fmt.Sprintf("%s: %d, want %d", k, have[k], want[k]))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if _, ok := have[k]; !ok {
			out = append(out, fmt.Sprintf("%s: 0, want %d", k, want[k]))
		}
	}
	return fmt.Sprint(out)
}

// A pipeline of three agents on three models, each answering in 2 s,
// killed during the second: resumed on each persistent store, it calls
// the first and the third model once each and gives the unkilled run's
// result. Each answer is scripted to follow the previous one's, so a
// step fed the wrong input falls through to llmsim's echo and shows.
func TestResumedPipelinePaysOnce(t *testing.T) {
	t.Parallel()
	sc := &llmsim.Scenario{Rules: []llmsim.Rule{
		{Match: llmsim.Match{Model: "m-first"}, Reply: llmsim.Reply{Text: "A1"}, DelayMs: stepMs},
		{Match: llmsim.Match{Model: "m-second", Contains: "A1"}, Reply: llmsim.Reply{Text: "B2"}, DelayMs: stepMs},
		{Match: llmsim.Match{Model: "m-third", Contains: "B2"}, Reply: llmsim.Reply{Text: "C3"}, DelayMs: stepMs},
	}}
	for _, store := range []string{"sqlite", "pebble", "redis"} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, store, sc, map[string]string{
				"agents/first.yaml":  agentSpec("first", "m-first", ""),
				"agents/second.yaml": agentSpec("second", "m-second", ""),
				"agents/third.yaml":  agentSpec("third", "m-third", ""),
				"groups/pipe.yaml": "version: 1\nname: pipe\nnodes:\n  a: {agent: first}\n  b: {agent: second}\n  c: {agent: third}\n" +
					"edges:\n  - {from: a, to: b}\n  - {from: b, to: c}\n",
			})
			checkResume(t, w, resumeCase{
				target: "pipe", kind: "group", input: "start",
				killWhen: func(calls map[string]int) bool { return calls["m-second"] > 0 },
				calls:    map[string]int{"m-first": 1, "m-second": 2, "m-third": 1},
				inFlight: "second", inFlightModel: "m-second",
			})
		})
	}
}

// A team whose coordinator delegates to a researcher, each model call 2 s,
// killed during the researcher's: the coordinator's first call (which
// asked for the delegation) is not made again, the delegation is.
func TestResumedTeamPaysOnce(t *testing.T) {
	t.Parallel()
	sc := &llmsim.Scenario{Rules: []llmsim.Rule{
		{Match: llmsim.Match{Model: "m-lead", Prompt: "R2-facts"}, Reply: llmsim.Reply{Text: "L3-report"}, DelayMs: stepMs},
		{Match: llmsim.Match{Model: "m-lead"}, DelayMs: stepMs, Reply: llmsim.Reply{ToolCalls: []llmsim.ToolCall{
			{Name: "delegate", Arguments: `{"target":"researcher","input":"find facts"}`}}}},
		{Match: llmsim.Match{Model: "m-research", Contains: "find facts"}, Reply: llmsim.Reply{Text: "R2-facts"}, DelayMs: stepMs},
	}}
	w := newWorld(t, "sqlite", sc, map[string]string{
		"agents/lead.yaml":       agentSpec("lead", "m-lead", ""),
		"agents/researcher.yaml": agentSpec("researcher", "m-research", ""),
		"groups/crew.yaml":       "version: 1\nname: crew\nkind: team\ncoordinator: lead\ndelegates: [researcher]\nmax_rounds: 2\n",
	})
	checkResume(t, w, resumeCase{
		target: "crew", kind: "group", input: "write a report",
		killWhen: func(calls map[string]int) bool { return calls["m-research"] > 0 },
		calls:    map[string]int{"m-lead": 2, "m-research": 2},
		inFlight: "researcher", inFlightModel: "m-research", startsOver: true,
	})
}

// An agent loop that calls a tool (http_get, counted at a test server)
// between two model calls, killed during the second model call: the first
// model call and the tool call are not made again.
func TestResumedToolLoopPaysOnce(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	tool := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		_, _ = w.Write([]byte("TOOL-7 is the fact"))
	}))
	t.Cleanup(tool.Close)
	sc := &llmsim.Scenario{Rules: []llmsim.Rule{
		{Match: llmsim.Match{Model: "m-loop", Prompt: "TOOL-7"}, Reply: llmsim.Reply{Text: "the fact is TOOL-7"}, DelayMs: stepMs},
		{Match: llmsim.Match{Model: "m-loop"}, DelayMs: stepMs / 2, Reply: llmsim.Reply{ToolCalls: []llmsim.ToolCall{
			{Name: "http_get", Arguments: `{"url":"` + tool.URL + `/fact"}`}}}},
	}}
	w := newWorld(t, "sqlite", sc, map[string]string{
		"agents/looper.yaml": agentSpec("looper", "m-loop", "tools: [http_get]\ntrust_level: medium\n"),
	})
	checkResume(t, w, resumeCase{
		target: "looper", kind: "agent", input: "find the fact",
		killWhen: func(calls map[string]int) bool { return calls["m-loop"] >= 2 },
		calls:    map[string]int{"m-loop": 3},
		inFlight: "looper", inFlightModel: "m-loop",
		after: func(t *testing.T) {
			if n := hits.Load(); n != 2 {
				t.Errorf("the tool was called %d times, want twice: once by the reference run, once by the killed one, before the kill", n)
			}
		},
	})
}

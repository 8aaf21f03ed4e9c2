package clienttest

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	svc "github.com/svc-dev/svc"
)

// ObserveFixture is what RunObserve needs: the observer under test and the
// backend of the same service (to make events happen), over the fixture of
// Run. Settle, when set, returns once every event emitted so far is
// visible to the observer's rollups (the store emitter batches writes).
type ObserveFixture struct {
	Observer svc.Observer
	Backend  svc.Backend
	Settle   func(t *testing.T)
}

// RunObserve runs the contract suite of svc.Observer: usage, runtime
// stats, the tool list and the live event stream. newFixture is called once
// per subtest and registers its own cleanup; each fixture starts with an
// empty event store. Agents: echo and fail as in Run, and clock (model
// test:echo) with the built-in tool current_time. The fixture prices
// test:echo (a model.PriceTable entry), so that its runs cost something:
// usage must sum the costs the results report.
func RunObserve(t *testing.T, newFixture func(t *testing.T) ObserveFixture) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, f ObserveFixture)
	}{
		{"Usage", testUsage},
		{"UsageTokens", testUsageTokens},
		{"UsageBadGroupBy", testUsageBadGroupBy},
		{"RuntimeStats", testRuntimeStats},
		{"ListTools", testListTools},
		{"StreamEvents", testStreamEvents},
		{"StreamEventsFiltered", testStreamEventsFiltered},
		{"StreamEventsStopsWithContext", testStreamStops},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, newFixture(t))
		})
	}
}

func settle(t *testing.T, f ObserveFixture) {
	if f.Settle != nil {
		f.Settle(t)
	}
}

func runEcho(t *testing.T, b svc.Backend, input string, trace string) svc.AgentResult {
	t.Helper()
	res, err := b.Run(ctxFor(t), "echo", svc.TaskSpec{Input: []byte(input), RequestID: trace})
	if err != nil || !res.Success {
		t.Fatalf("run echo: %+v, %v", res, err)
	}
	return res
}

func testUsage(t *testing.T, f ObserveFixture) {
	a := runEcho(t, f.Backend, `"one two three"`, "")
	b := runEcho(t, f.Backend, `"four"`, "")
	c, err := f.Backend.Run(ctxFor(t), "clock", svc.TaskSpec{Input: []byte(`"five six"`)})
	if err != nil || !c.Success {
		t.Fatalf("run clock: %+v, %v", c, err)
	}
	settle(t, f)
	checkCosts(t, f.Observer, map[string]float64{"echo": a.Metadata.CostUSD + b.Metadata.CostUSD, "clock": c.Metadata.CostUSD})
	want := a.Metadata.TokensUsed + b.Metadata.TokensUsed + c.Metadata.TokensUsed
	if want == 0 {
		t.Fatal("the runs used no tokens; the fixture is wrong")
	}
	u, err := f.Observer.Usage(ctxFor(t), "")
	if err != nil {
		t.Fatal(err)
	}
	if u.Total.TokensUsed != want || u.Total.Invocations != 3 {
		t.Errorf("Usage() total = %+v, want %d tokens over 3 invocations", u.Total, want)
	}
	byTrace, err := f.Observer.Usage(ctxFor(t), svc.GroupByTrace)
	if err != nil {
		t.Fatal(err)
	}
	if byTrace.Groups[a.Metadata.TraceID].TokensUsed != a.Metadata.TokensUsed || len(byTrace.Groups) != 3 {
		t.Errorf("Usage(trace) = %+v, want three traces, %s with %d", byTrace, a.Metadata.TraceID, a.Metadata.TokensUsed)
	}
	if got := byTrace.Groups[b.Metadata.TraceID].CostUSD; !sameCost(got, b.Metadata.CostUSD) {
		t.Errorf("Usage(trace) cost of %s = %v, want its result's %v", b.Metadata.TraceID, got, b.Metadata.CostUSD)
	}
}

// sameCost reports whether a usage sum equals the sum of the results'
// costs: usage adds whole nano-dollars, the results' floats, so they may
// differ by the rounding of each addend.
func sameCost(got, want float64) bool {
	return math.Abs(got-want) <= 2e-9
}

// checkCosts checks usage's costs by agent and by model (every agent of
// want runs test:echo) against the costs the results reported, want by
// agent.
func checkCosts(t *testing.T, o svc.Observer, want map[string]float64) {
	t.Helper()
	var total float64
	for agent, c := range want {
		if c <= 0 {
			t.Fatalf("agent %s's runs cost %v: the fixture must price test:echo", agent, c)
		}
		total += c
	}
	byAgent, err := o.Usage(ctxFor(t), svc.GroupByAgent)
	if err != nil {
		t.Fatal(err)
	}
	for agent, c := range want {
		if got := byAgent.Groups[agent].CostUSD; !sameCost(got, c) {
			t.Errorf("Usage(agent) cost of %s = %v, want %v (the results' sum)", agent, got, c)
		}
	}
	if !sameCost(byAgent.Total.CostUSD, total) {
		t.Errorf("Usage(agent) total cost = %v, want %v", byAgent.Total.CostUSD, total)
	}
	byModel, err := o.Usage(ctxFor(t), svc.GroupByModel)
	if err != nil {
		t.Fatal(err)
	}
	if got := byModel.Groups["test:echo"].CostUSD; !sameCost(got, total) || byModel.Total.CostUSD != byAgent.Total.CostUSD {
		t.Errorf("Usage(model) = %+v, want test:echo and the total at %v (the total by agent: %v)", byModel, total, byAgent.Total.CostUSD)
	}
	none, err := o.Usage(ctxFor(t), svc.GroupByNone)
	if err != nil {
		t.Fatal(err)
	}
	if none.Total.CostUSD != byAgent.Total.CostUSD {
		t.Errorf("Usage(none) total cost = %v, want %v as grouped by agent", none.Total.CostUSD, byAgent.Total.CostUSD)
	}
}

func testUsageTokens(t *testing.T, f ObserveFixture) {
	a := runEcho(t, f.Backend, `"one two three"`, "")
	b := runEcho(t, f.Backend, `"four"`, "")
	settle(t, f)
	want := a.Metadata.TokensUsed + b.Metadata.TokensUsed
	if want == 0 {
		t.Fatal("the echo runs used no tokens; the fixture is wrong")
	}
	u, err := f.Observer.Usage(ctxFor(t), "")
	if err != nil {
		t.Fatal(err)
	}
	if u.Total.TokensUsed != want || u.Total.Invocations != 2 {
		t.Errorf("Usage() total = %+v, want %d tokens over 2 invocations", u.Total, want)
	}
	byAgent, err := f.Observer.Usage(ctxFor(t), svc.GroupByAgent)
	if err != nil {
		t.Fatal(err)
	}
	if byAgent.Groups["echo"].TokensUsed != want {
		t.Errorf("Usage(agent) = %+v, want echo %d", byAgent, want)
	}
	byModel, err := f.Observer.Usage(ctxFor(t), svc.GroupByModel)
	if err != nil {
		t.Fatal(err)
	}
	if byModel.Groups["test:echo"].TokensUsed != want {
		t.Errorf("Usage(model) = %+v, want test:echo %d", byModel, want)
	}
	byTrace, err := f.Observer.Usage(ctxFor(t), svc.GroupByTrace)
	if err != nil {
		t.Fatal(err)
	}
	if byTrace.Groups[a.Metadata.TraceID].TokensUsed != a.Metadata.TokensUsed || len(byTrace.Groups) != 2 {
		t.Errorf("Usage(trace) = %+v, want two traces, %s with %d", byTrace, a.Metadata.TraceID, a.Metadata.TokensUsed)
	}
}

func testUsageBadGroupBy(t *testing.T, f ObserveFixture) {
	_, err := f.Observer.Usage(ctxFor(t), "planet")
	if svc.KindOf(err) != svc.KindSpecValidation {
		t.Errorf("Usage(planet) error = %v (kind %q), want a SpecValidationError", err, svc.KindOf(err))
	}
}

func testRuntimeStats(t *testing.T, f ObserveFixture) {
	runEcho(t, f.Backend, `"x"`, "")
	if res, err := f.Backend.Run(ctxFor(t), "fail", svc.TaskSpec{Input: []byte(`"y"`)}); err != nil || res.Success {
		t.Fatalf("run fail: %+v, %v", res, err)
	}
	settle(t, f)
	st, err := f.Observer.RuntimeStats(ctxFor(t))
	if err != nil {
		t.Fatal(err)
	}
	if st.Header.AgentsCompleted != 1 || st.Header.AgentsFailed != 1 || st.Header.ErrorRate != 0.5 {
		t.Errorf("stats header = %+v, want 1 completed, 1 failed, error rate 0.5", st.Header)
	}
	if len(st.ErrorGroups) == 0 || st.ErrorGroups[0].Count != 1 {
		t.Errorf("error groups = %+v, want the failed run", st.ErrorGroups)
	}
	if st.Rejections == nil || st.ToolServers == nil || st.Workers == nil {
		t.Errorf("stats has nil collections (they must encode as {} and []): %+v", st)
	}
}

func testListTools(t *testing.T, f ObserveFixture) {
	ds, err := f.Observer.ListTools(ctxFor(t))
	if err != nil {
		t.Fatal(err)
	}
	var clock bool
	for _, d := range ds {
		if d.Name == "current_time" && slices.Contains(d.Agents, "clock") {
			clock = true
		}
		if d.Name == "" || len(d.InputSchema) == 0 || d.Source == "" || len(d.Agents) == 0 {
			t.Errorf("descriptor %+v lacks a name, schema, source or agents", d)
		}
	}
	if !clock {
		t.Errorf("ListTools = %+v, want current_time of agent clock", ds)
	}
}

// collectStream reads the stream into a channel from a goroutine the test owns.
func collectStream(ctx context.Context, o svc.Observer, f svc.EventFilter) (<-chan svc.RuntimeEvent, <-chan error) {
	evs := make(chan svc.RuntimeEvent, 1024)
	done := make(chan error, 1)
	go func() {
		defer close(evs)
		for ev, err := range o.StreamEvents(ctx, f) {
			if err != nil {
				done <- err
				return
			}
			select {
			case evs <- ev:
			default:
			}
		}
		done <- nil
	}()
	return evs, done
}

// waitFor runs trigger (a run) until the stream shows an event matching want,
// since a subscription may attach after the first run's events.
func waitFor(t *testing.T, evs <-chan svc.RuntimeEvent, trigger func(), want func(svc.RuntimeEvent) bool) []svc.RuntimeEvent {
	t.Helper()
	var seen []svc.RuntimeEvent
	deadline := time.After(callTimeout)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	trigger()
	for {
		select {
		case ev, ok := <-evs:
			if !ok {
				t.Fatalf("stream ended early after %d events", len(seen))
			}
			seen = append(seen, ev)
			if want(ev) {
				return seen
			}
		case <-tick.C:
			trigger()
		case <-deadline:
			t.Fatalf("no matching event within %s; saw %d", callTimeout, len(seen))
		}
	}
}

func testStreamEvents(t *testing.T, f ObserveFixture) {
	ctx, cancel := context.WithCancel(ctxFor(t))
	defer cancel()
	evs, done := collectStream(ctx, f.Observer, svc.EventFilter{})
	// Each run has its own trace: the subscription may attach in the middle
	// of the first one, so the test waits for a run streamed whole.
	n := 0
	spawned := map[string]bool{}
	seen := waitFor(t, evs, func() {
		n++
		runEcho(t, f.Backend, `"hi"`, fmt.Sprintf("stream-%d-%d", time.Now().UnixNano(), n))
	}, func(ev svc.RuntimeEvent) bool {
		switch {
		case ev.EventType == svc.EventAgentSpawned && ev.AgentName == "echo":
			spawned[ev.TraceID] = true
		case ev.EventType == svc.EventAgentCompleted && spawned[ev.TraceID]:
			return true
		}
		return false
	})
	for _, ev := range seen {
		if ev.Timestamp.IsZero() || ev.Payload == nil || ev.TraceID == "" {
			t.Errorf("streamed event not fully decoded: %+v", ev)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("stream ended with %v after its context was cancelled, want no error", err)
	}
}

func testStreamEventsFiltered(t *testing.T, f ObserveFixture) {
	ctx, cancel := context.WithCancel(ctxFor(t))
	defer cancel()
	evs, done := collectStream(ctx, f.Observer, svc.EventFilter{EventTypes: []svc.EventType{svc.EventAgentFailed}, Agent: "fail"})
	seen := waitFor(t, evs, func() {
		runEcho(t, f.Backend, `"noise"`, "")
		_, _ = f.Backend.Run(ctxFor(t), "fail", svc.TaskSpec{Input: []byte(`"x"`)})
	}, func(ev svc.RuntimeEvent) bool { return ev.EventType == svc.EventAgentFailed })
	for _, ev := range seen {
		if ev.EventType != svc.EventAgentFailed || ev.AgentName != "fail" {
			t.Errorf("filter (agent_failed, agent fail) let through %s of %s", ev.EventType, ev.AgentName)
		}
	}
	cancel()
	<-done
}

func testStreamStops(t *testing.T, f ObserveFixture) {
	ctx, cancel := context.WithTimeout(ctxFor(t), 300*time.Millisecond)
	defer cancel()
	var n int
	for _, err := range f.Observer.StreamEvents(ctx, svc.EventFilter{EventTypes: []svc.EventType{svc.EventWorkerStopped}}) {
		if err != nil {
			t.Fatalf("stream error %v, want a quiet end when the context ends", err)
		}
		n++
	}
	if n != 0 {
		t.Errorf("%d worker_stopped events from a runtime with no workers", n)
	}
	if !slices.Contains([]error{context.DeadlineExceeded}, ctx.Err()) {
		t.Errorf("the stream returned before its context ended (ctx.Err() = %v)", ctx.Err())
	}
}

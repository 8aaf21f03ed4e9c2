package dispatch_test

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/broker/membroker"
	"github.com/svc-dev/svc/dispatch"
	"github.com/svc-dev/svc/emitters"
	"github.com/svc-dev/svc/emitters/bridge"
	"github.com/svc-dev/svc/internal/testutil"
	"github.com/svc-dev/svc/supervisor"
	"github.com/svc-dev/svc/worker"
)

// bridgedWorker is a worker whose runtime emits into rec and a
// BrokerEventBridge, as `svc worker start` wires it.
func bridgedWorker(t *testing.T, b svc.Broker, rec svc.Emitter, agents ...svc.Agent) (*worker.Worker, *bridge.Bridge) {
	t.Helper()
	br := bridge.New(b, bridge.Config{})
	rt, err := supervisor.New(supervisor.Config{Emitter: emitters.Multi(rec, br), Backend: "broker:memory"})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Register(agents...); err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(context.Background(), worker.Config{Broker: b, Runner: rt, Heartbeat: time.Hour, Events: br})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Shutdown(ctx)
		_ = rt.Shutdown(ctx)
		_ = br.Close(ctx)
	})
	return w, br
}

// publisherRuntime is a runtime dispatching through a publisher with cfg.
func publisherRuntime(t *testing.T, cfg dispatch.Config, agents ...svc.Agent) (*supervisor.Runtime, *dispatch.Publisher) {
	t.Helper()
	p, err := dispatch.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := supervisor.New(supervisor.Config{Emitter: cfg.Emitter, Dispatcher: p})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rt.Shutdown(ctx)
		_ = p.Close()
	})
	if err := rt.Register(agents...); err != nil {
		t.Fatal(err)
	}
	return rt, p
}

// TestPublishEvents: with PublishEvents the publisher's emitter sees the
// worker's agent_spawned and agent_completed of its task (the spec's full
// stream), in order and under the dispatching span; a second publisher on
// the same broker without it sees only its own agent_dispatched, and the
// worker relays nothing of its tasks.
func TestPublishEvents(t *testing.T) {
	b := membroker.New()
	t.Cleanup(func() { _ = b.Close() })
	echo := svc.Agent{Name: "echo", Model: "test:echo"}
	var workerRec recorder
	_, br := bridgedWorker(t, b, &workerRec, echo)

	var withRec, withoutRec recorder
	with, pWith := publisherRuntime(t, dispatch.Config{Broker: b, Emitter: &withRec, PublishEvents: true}, echo)
	without, _ := publisherRuntime(t, dispatch.Config{Broker: b, Emitter: &withoutRec}, echo)

	res, err := without.Run(context.Background(), "echo", svc.TaskSpec{ID: "quiet", Input: json.RawMessage(`"hi"`)})
	if err != nil || !res.Success {
		t.Fatalf("run without events: %+v %v", res, err)
	}
	if n := br.Published(); n != 0 {
		t.Errorf("the bridge relayed %d events of a task whose publisher did not ask", n)
	}

	res, err = with.Run(context.Background(), "echo", svc.TaskSpec{ID: "loud", Input: json.RawMessage(`"hi"`)})
	if err != nil || !res.Success {
		t.Fatalf("run with events: %+v %v", res, err)
	}
	testutil.Eventually(t, "the worker's agent_completed at the publisher", func() bool {
		return withRec.count(svc.EventAgentCompleted) == 1
	})
	withRec.mu.Lock()
	var types []svc.EventType
	var dispatchedSpan string
	var relayed []svc.RuntimeEvent
	for _, ev := range withRec.evs {
		if ev.TaskID == "" && (ev.EventType == svc.EventWorkerHeartbeat || ev.EventType == svc.EventWorkerStarted) {
			continue // the fleet's lifecycle (answers to the publishers' pings)
		}
		if ev.TaskID != "loud" {
			t.Errorf("publisher with events got an event of task %q: %+v", ev.TaskID, ev)
		}
		types = append(types, ev.EventType)
		if ev.EventType == svc.EventAgentDispatched {
			dispatchedSpan = ev.SpanID
		} else {
			relayed = append(relayed, ev)
		}
	}
	withRec.mu.Unlock()
	// agent_dispatched is emitted once the broker took the task, and the
	// worker's relayed events come on their own path: on a loaded machine
	// they may arrive first. What holds is the set, the worker's order, and
	// the span: each relayed event names the dispatch as its parent.
	for _, ev := range relayed {
		if ev.ParentSpanID != dispatchedSpan {
			t.Errorf("relayed %s has parent span %q, want the dispatch's %q", ev.EventType, ev.ParentSpanID, dispatchedSpan)
		}
	}
	want := []svc.EventType{svc.EventAgentDispatched, svc.EventAgentSpawned, svc.EventAgentCompleted}
	got := slices.DeleteFunc(slices.Clone(types), func(t svc.EventType) bool { return t == svc.EventAgentDispatched })
	if len(types) != len(want) || len(got) != 2 || got[0] != svc.EventAgentSpawned || got[1] != svc.EventAgentCompleted {
		t.Fatalf("publisher with events saw %v, want %v (agent_dispatched anywhere, the relayed events in the worker's order)", types, want)
	}
	if pWith.Relayed() != 2 {
		t.Errorf("Relayed = %d, want 2", pWith.Relayed())
	}
	if n := withoutRec.count(svc.EventAgentCompleted) + withoutRec.count(svc.EventAgentSpawned); n != 0 {
		t.Errorf("publisher without events saw %d per-agent events", n)
	}
	if withoutRec.count(svc.EventAgentDispatched) != 1 {
		t.Errorf("publisher without events: agent_dispatched %d times, want 1", withoutRec.count(svc.EventAgentDispatched))
	}
	testutil.Eventually(t, "the worker unbinds its tasks", func() bool { return br.Bound() == 0 })
}

// clock is a settable clock for the health thresholds.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func workerOf(t *testing.T, p *dispatch.Publisher, id string) (svc.WorkerStatus, bool) {
	t.Helper()
	ws, err := p.Workers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		if w.RuntimeID == id {
			return w, true
		}
	}
	return svc.WorkerStatus{}, false
}

// TestFleetHealth: every publisher on the broker hears the workers; a
// worker is healthy, then stale after 90 s without news, down after 300 s,
// by the spec's defaults on the publisher's clock; one that stops cleanly
// is down at once; thresholds are the node's to set.
func TestFleetHealth(t *testing.T) {
	b := membroker.New()
	t.Cleanup(func() { _ = b.Close() })
	echo := svc.Agent{Name: "echo", Model: "test:echo"}
	clk := &clock{now: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)}
	p1 := publisherOf(t, dispatch.Config{Broker: b, Now: clk.Now})
	p2 := publisherOf(t, dispatch.Config{Broker: b, Now: clk.Now, Health: svc.WorkerThresholds{Stale: time.Second, Down: 2 * time.Second}})

	fleetWorker(t, b, "quiet", echo)
	stopping := fleetWorker(t, b, "stopping", echo)
	for _, p := range []*dispatch.Publisher{p1, p2} {
		testutil.Eventually(t, "both workers announced on both publishers", func() bool {
			_, a := workerOf(t, p, "quiet")
			_, c := workerOf(t, p, "stopping")
			return a && c
		})
	}
	w, _ := workerOf(t, p1, "quiet")
	if w.Status != svc.WorkerHealthy || w.Concurrency != 3 || len(w.Agents) != 1 || w.Agents[0] != "echo" ||
		w.BrokerScheme != "memory" || w.Stopped {
		t.Errorf("quiet after worker_started = %+v", w)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := stopping.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*dispatch.Publisher{p1, p2} {
		testutil.Eventually(t, "worker_stopped heard", func() bool {
			w, _ := workerOf(t, p, "stopping")
			return w.Stopped
		})
		if w, _ := workerOf(t, p, "stopping"); w.Status != svc.WorkerDown {
			t.Errorf("a worker that stopped cleanly is %s, want down at once", w.Status)
		}
	}

	clk.add(89 * time.Second)
	if w, _ := workerOf(t, p1, "quiet"); w.Status != svc.WorkerHealthy {
		t.Errorf("after 89 s: %s, want healthy", w.Status)
	}
	if w, _ := workerOf(t, p2, "quiet"); w.Status != svc.WorkerDown {
		t.Errorf("after 89 s with thresholds 1 s / 2 s: %s, want down", w.Status)
	}
	clk.add(2 * time.Second)
	if w, _ := workerOf(t, p1, "quiet"); w.Status != svc.WorkerStale {
		t.Errorf("after 91 s: %s, want stale", w.Status)
	}
	clk.add(209 * time.Second)
	if w, _ := workerOf(t, p1, "quiet"); w.Status != svc.WorkerDown || w.Stopped {
		t.Errorf("after 300 s: %+v, want down (not stopped)", w)
	}
}

func publisherOf(t *testing.T, cfg dispatch.Config) *dispatch.Publisher {
	t.Helper()
	p, err := dispatch.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func fleetWorker(t *testing.T, b svc.Broker, id string, agents ...svc.Agent) *worker.Worker {
	t.Helper()
	rt, err := supervisor.New(supervisor.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Register(agents...); err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(context.Background(), worker.Config{Broker: b, Runner: rt, Heartbeat: time.Hour, RuntimeID: id, Concurrency: 3})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Shutdown(ctx)
		_ = rt.Shutdown(ctx)
	})
	return w
}

// TestLateNodeKnowsTheFleetAtOnce: a publisher that starts after a worker
// (whose next heartbeat is an hour away) lists it at once: it pings the
// fleet on start and the worker answers with a heartbeat.
func TestLateNodeKnowsTheFleetAtOnce(t *testing.T) {
	b := membroker.New()
	t.Cleanup(func() { _ = b.Close() })
	fleetWorker(t, b, "early", svc.Agent{Name: "echo", Model: "test:echo"})
	late := publisherOf(t, dispatch.Config{Broker: b})
	testutil.Eventually(t, "the late publisher lists the early worker", func() bool {
		w, ok := workerOf(t, late, "early")
		return ok && w.Status == svc.WorkerHealthy && w.Concurrency == 3
	})
}

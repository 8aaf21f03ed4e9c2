package bench

// Issue 12's benchmark: the cost of --publish-events. See BENCHMARKS.md,
// "Issue 12: publishing the fleet's events".

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/dispatch"
	"github.com/svc-dev/svc/emitters/bridge"
	"github.com/svc-dev/svc/fleetwire"
	"github.com/svc-dev/svc/supervisor"
	"github.com/svc-dev/svc/worker"
)

// countEmitter counts the events a publisher's chain receives, by whether
// they were relayed (per-agent events) or its own.
type countEmitter struct{ relayed, own atomic.Int64 }

func (c *countEmitter) Emit(ev svc.RuntimeEvent) {
	switch ev.EventType {
	case svc.EventAgentSpawned, svc.EventAgentCompleted, svc.EventAgentFailed,
		svc.EventToolCallStarted, svc.EventToolCallCompleted, svc.EventToolCallFailed:
		c.relayed.Add(1)
	default:
		c.own.Add(1)
	}
}

// bridgedBenchWorker is an in-process worker as `svc worker start` wires
// it: its runtime's emitter chain ends in a BrokerEventBridge that the
// worker binds per task.
func bridgedBenchWorker(b *testing.B, br svc.Broker, backend string, concurrency int, agents ...svc.Agent) *bridge.Bridge {
	b.Helper()
	bridgeEm := bridge.New(br, bridge.Config{})
	rt, err := supervisor.New(supervisor.Config{Emitter: bridgeEm, Backend: backend})
	if err != nil {
		b.Fatal(err)
	}
	if err := rt.Register(agents...); err != nil {
		b.Fatal(err)
	}
	setup, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := worker.New(setup, worker.Config{Broker: br, Runner: rt, Concurrency: concurrency, Heartbeat: -1, Events: bridgeEm})
	if err != nil {
		b.Fatal(err)
	}
	if err := w.Start(setup); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Shutdown(ctx)
		_ = rt.Shutdown(ctx)
		_ = bridgeEm.Close(ctx)
	})
	return bridgeEm
}

// BenchmarkFleetPublishEvents is issue 12's benchmark: the throughput of a
// fleet gather of 5,000 test:echo tasks (max_concurrency 500) through an
// embedded NATS server to 2 workers (in this process, each with its own
// runtime, connection and BrokerEventBridge, concurrency 250), from a
// publisher without --publish-events and one with it (each with its own
// connection; the same workers serve both), run alternately. With the flag
// every task's agent_spawned and agent_completed are relayed to the
// publisher and fed into its emitter; it reports the events relayed per
// second, the tasks per second and CPU per task of both modes, and the
// events the bridges dropped.
func BenchmarkFleetPublishEvents(b *testing.B) {
	const n, conc, workerConc = 5000, 500, 250
	ts := tasks(n)
	echo := svc.Agent{Name: "echo", Model: "test:echo"}
	ctx := context.Background()
	e := startNATS(b)

	newPub := func(name string, publish bool, em svc.Emitter) (*supervisor.Runtime, *dispatch.Publisher) {
		setup, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		p, err := dispatch.New(setup, dispatch.Config{Broker: natsClient(b, e.ClientURL(), name), Emitter: em, PublishEvents: publish})
		if err != nil {
			b.Fatal(err)
		}
		rt, err := supervisor.New(supervisor.Config{Emitter: em, Dispatcher: p})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = rt.Shutdown(ctx)
			_ = p.Close()
		})
		if err := rt.Register(echo); err != nil {
			b.Fatal(err)
		}
		return rt, p
	}
	var offEm, onEm countEmitter
	off, _ := newPub("publisher-off", false, &offEm)
	on, onP := newPub("publisher-on", true, &onEm)
	var bridges []*bridge.Bridge
	for i := range 2 {
		bridges = append(bridges, bridgedBenchWorker(b, natsClient(b, e.ClientURL(), fmt.Sprint("worker-", i)), onP.Backend(), workerConc, echo))
	}
	modes := []struct {
		name string
		rt   *supervisor.Runtime
	}{{"off", off}, {"on", on}}
	for _, m := range modes { // warm up
		res, err := m.rt.Gather(ctx, "echo", ts[:1000], conc)
		allSucceeded(b, res, err)
	}
	waitRelayed := func(want int64) {
		for deadline := time.Now().Add(30 * time.Second); onP.Relayed() < want; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				b.Fatalf("relayed %d events of %d within 30s", onP.Relayed(), want)
			}
		}
	}
	waitRelayed(2 * 1000)
	relayed0 := onP.Relayed()
	b.ResetTimer()
	dur := make([]time.Duration, len(modes))
	cpu := make([]time.Duration, len(modes))
	var relayWall time.Duration
	for i := 0; i < b.N; i++ {
		for k, m := range modes {
			runtime.GC()
			start, cpu0, before := time.Now(), cpuTime(), onP.Relayed()
			res, err := m.rt.Gather(ctx, "echo", ts, conc)
			if m.name == "on" {
				// The gather is done when the results are back; the
				// relay finishes on its own goroutines: count it in.
				waitRelayed(before + 2*n)
				relayWall += time.Since(start)
			}
			dur[k] += time.Since(start)
			cpu[k] += cpuTime() - cpu0
			allSucceeded(b, res, err)
		}
	}
	b.StopTimer()
	for k, m := range modes {
		b.ReportMetric(float64(n*b.N)/dur[k].Seconds(), m.name+"_tasks/s")
		b.ReportMetric(float64(cpu[k].Microseconds())/float64(n*b.N), m.name+"_cpu_us/task")
	}
	relayed := onP.Relayed() - relayed0
	b.ReportMetric(float64(relayed)/relayWall.Seconds(), "events_relayed/s")
	b.ReportMetric(float64(relayed)/float64(n*b.N), "events_relayed/task")
	var dropped int64
	for _, br := range bridges {
		dropped += br.Dropped()
	}
	b.ReportMetric(float64(dropped), "events_dropped")
	b.ReportMetric(float64(offEm.relayed.Load()), "off_relayed_events")
}

// BenchmarkFleetEventRelay is the relay alone, without tasks: 200,000
// agent_completed events emitted into a worker's BrokerEventBridge (bound,
// as for a running task; its queue made large enough to hold them all, so
// the figure is the relay's pace rather than the queue's drops) through an
// embedded NATS server to a publisher with PublishEvents that feeds them
// into a counting emitter. It reports the events relayed per second (first
// emit → last event counted at the publisher), the CPU per event, and the
// events lost (dropped, or missed by the at-most-once broadcast).
func BenchmarkFleetEventRelay(b *testing.B) {
	const n = 200_000
	e := startNATS(b)
	var em countEmitter
	setup, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := dispatch.New(setup, dispatch.Config{Broker: natsClient(b, e.ClientURL(), "publisher"), Emitter: &em, PublishEvents: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = p.Close() })
	br := bridge.New(natsClient(b, e.ClientURL(), "worker"), bridge.Config{QueueSize: n})
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = br.Close(ctx)
	})
	defer br.Bind("dispatch-span", fleetwire.EventSubject(p.RuntimeID()))()
	ev := svc.RuntimeEvent{EventType: svc.EventAgentCompleted, Timestamp: time.Now().UTC(), AgentName: "echo",
		TaskID: "0193a3b4-0000-7000-8000-000000000001", TraceID: "0193a3b4-0000-7000-8000-0000000000aa",
		SpanID: "0193a3b4-0000-7000-8000-0000000000bb", ParentSpanID: "dispatch-span",
		Payload: svc.Payload{"duration_ms": 1.5, "tokens_used": 12, "backend": "broker:nats", "model": "test:echo"}}
	var dur, cpu time.Duration
	var lost int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		got0 := p.Relayed()
		start, cpu0 := time.Now(), cpuTime()
		for range n {
			br.Emit(ev)
		}
		// Until every event is counted at the publisher, or nothing has
		// come for a second (the rest was lost; that second is not
		// counted).
		last, moved := p.Relayed(), time.Now()
		for p.Relayed()-got0 < n && time.Since(moved) < time.Second {
			time.Sleep(time.Millisecond)
			if r := p.Relayed(); r != last {
				last, moved = r, time.Now()
			}
		}
		dur += moved.Sub(start)
		cpu += cpuTime() - cpu0
		lost += n - (p.Relayed() - got0)
	}
	b.StopTimer()
	b.ReportMetric(float64(n*b.N)/dur.Seconds(), "events_relayed/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/1000/float64(n*b.N), "cpu_us/event")
	b.ReportMetric(float64(lost), "events_lost")
}

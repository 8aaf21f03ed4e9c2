package dispatch_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/broker/membroker"
	"github.com/svc-dev/svc/dispatch"
	"github.com/svc-dev/svc/fleetwire"
	"github.com/svc-dev/svc/internal/testutil"
	"github.com/svc-dev/svc/supervisor"
	"github.com/svc-dev/svc/worker"
)

// taskSpy is a broker that records the task messages published through
// it, each publish taking delay: while one is on its way the next tasks
// queue, so they go out as a batch whatever the scheduler does.
type taskSpy struct {
	svc.Broker
	delay time.Duration

	mu       sync.Mutex
	messages int
	tasks    []int // tasks per message
}

func (s *taskSpy) Publish(ctx context.Context, subject string, data []byte) error {
	if strings.HasPrefix(subject, "svc.tasks.") {
		n := 1
		if fleetwire.IsBatch(data) {
			b, err := fleetwire.DecodeBatch(data)
			if err != nil {
				return err
			}
			envs, err := b.Envelopes()
			if err != nil {
				return err
			}
			n = len(envs)
		}
		s.mu.Lock()
		s.messages++
		s.tasks = append(s.tasks, n)
		s.mu.Unlock()
		time.Sleep(s.delay)
	}
	return s.Broker.Publish(ctx, subject, data)
}

func (s *taskSpy) largest() (messages, largest int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.tasks {
		largest = max(largest, n)
	}
	return s.messages, largest
}

// workerWith is a worker on b of a runtime serving agents, with cfg's
// concurrency, id and dead-letter bound.
func workerWith(t *testing.T, b svc.Broker, cfg worker.Config, wrap func(worker.Runner) worker.Runner, agents ...svc.Agent) *worker.Worker {
	t.Helper()
	rt, err := supervisor.New(supervisor.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Register(agents...); err != nil {
		t.Fatal(err)
	}
	cfg.Broker, cfg.Runner, cfg.Heartbeat = b, rt, time.Hour
	if wrap != nil {
		cfg.Runner = wrap(rt)
	}
	w, err := worker.New(context.Background(), cfg)
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

// warmUp runs a task of agent on a worker that then stops: the publisher
// batches an agent's tasks only once a result said how long they take.
func warmUp(t *testing.T, b svc.Broker, rt *supervisor.Runtime, p *dispatch.Publisher, agent svc.Agent) {
	t.Helper()
	w := workerWith(t, b, worker.Config{RuntimeID: "warm", Concurrency: 1}, nil, agent)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if res, err := rt.Run(ctx, agent.Name, svc.TaskSpec{Input: json.RawMessage(`"warm"`)}); err != nil || !res.Success {
		t.Fatalf("warm-up task: %+v %v", res, err)
	}
	if err := w.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the warm-up worker stopped", func() bool { s, _ := workerOf(t, p, "warm"); return s.Stopped })
}

func echoTasks(n int) []svc.TaskSpec {
	ts := make([]svc.TaskSpec, n)
	for i := range ts {
		ts[i] = svc.TaskSpec{ID: fmt.Sprint(i), Input: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))}
	}
	return ts
}

// TestGatherGoesOutInBatches: a gather's tasks go to a worker that takes
// batches many to a message, and every task gets its own result.
func TestGatherGoesOutInBatches(t *testing.T) {
	mb := membroker.New()
	t.Cleanup(func() { _ = mb.Close() })
	spy := &taskSpy{Broker: mb, delay: 20 * time.Millisecond}
	echo := svc.Agent{Name: "echo", Model: "test:echo"}
	rt, p := publisherRuntime(t, dispatch.Config{Broker: spy}, echo)
	w := workerWith(t, mb, worker.Config{RuntimeID: "w1", Concurrency: 40}, nil, echo)
	testutil.Eventually(t, "the worker known", func() bool { _, ok := workerOf(t, p, w.RuntimeID()); return ok })
	if _, err := rt.Run(context.Background(), "echo", svc.TaskSpec{Input: json.RawMessage(`1`)}); err != nil {
		t.Fatal(err)
	}
	spy.mu.Lock()
	spy.messages, spy.tasks = 0, nil
	spy.mu.Unlock()

	const n = 300
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := rt.Gather(ctx, "echo", echoTasks(n), n)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if !r.Success || r.TaskID != fmt.Sprint(i) || string(r.Output) != fmt.Sprintf(`{"n":%d}`, i) {
			t.Fatalf("result %d = %+v", i, r)
		}
	}
	messages, largest := spy.largest()
	if messages >= n/4 || largest < 2 {
		t.Errorf("%d tasks went out in %d messages, the largest of %d tasks: want batches", n, messages, largest)
	}
	if d := p.Duplicates(); d != 0 {
		t.Errorf("%d duplicates", d)
	}
}

// announce broadcasts a heartbeat of a worker that is not one: id serving
// agent, taking batches when batches is set, and waits until p knows it.
func announce(t *testing.T, b svc.Broker, p *dispatch.Publisher, id, agent string, concurrency int, batches bool) {
	t.Helper()
	payload := svc.Payload{"runtime_id": id, "agent_subscriptions": []string{agent}, "in_flight": 0, "concurrency_cap": concurrency}
	if batches {
		payload[fleetwire.BatchesPayloadKey] = true
	}
	hb, err := json.Marshal(svc.RuntimeEvent{EventType: svc.EventWorkerHeartbeat, Timestamp: time.Now().UTC(), Payload: payload})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Broadcast(context.Background(), fleetwire.SubjectWorkers, hb); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, id+" known", func() bool { _, ok := workerOf(t, p, id); return ok })
}

// doomed is a worker that takes task messages and dies with them: it
// never settles one. Of each batch it answers the first half (as a worker
// that died halfway through would have), marked "doomed"; single tasks
// it does not answer.
type doomed struct {
	sub      svc.Subscription
	tasks    atomic.Int64 // tasks taken
	answered atomic.Int64
	batches  atomic.Int64
}

func startDoomed(t *testing.T, b svc.Broker, agent string, ackWait time.Duration, answer bool) *doomed {
	t.Helper()
	dm := &doomed{}
	subject := fleetwire.TaskSubject(agent)
	sub, err := b.Subscribe(context.Background(), subject, svc.SubscribeOptions{Group: svc.DefaultGroup(subject),
		Prefetch: 100, AckWait: ackWait, MaxDeliver: -1}, func(ctx context.Context, d *svc.Delivery) {
		if !fleetwire.IsBatch(d.Data) {
			dm.tasks.Add(1)
			return
		}
		bt, err := fleetwire.DecodeBatch(d.Data)
		if err != nil {
			t.Error(err)
			return
		}
		envs, err := bt.Envelopes()
		if err != nil {
			t.Error(err)
			return
		}
		dm.batches.Add(1)
		if answer {
			w := fleetwire.NewBatchWriter(fleetwire.MsgResults, "", "", "doomed")
			for _, e := range envs[:len(envs)/2] {
				item, err := fleetwire.EncodeItem(fleetwire.MsgResults, &fleetwire.Envelope{TaskID: e.TaskID, SpanID: e.SpanID,
					Attempt: e.Attempt, Agent: e.Agent, Delivery: d.Attempt,
					Result: &svc.AgentResult{AgentName: e.Agent, TaskID: e.TaskID, Success: true, Output: json.RawMessage(`"doomed"`)}})
				if err != nil {
					t.Error(err)
					return
				}
				w.Add(item)
			}
			if w.Len() > 0 {
				data, err := w.Seal("", nil)
				if err == nil {
					err = b.Publish(ctx, bt.ReplyTo, data)
				}
				if err != nil {
					t.Error(err)
					return
				}
				dm.answered.Add(int64(w.Len()))
			}
		}
		dm.tasks.Add(int64(len(envs)))
	})
	if err != nil {
		t.Fatal(err)
	}
	dm.sub = sub
	return dm
}

// TestPartlyAnsweredBatchRedelivered: a worker dies holding a batch of
// which it had answered half. The broker delivers the whole batch again
// to a live worker after the ack wait, which runs every task of it; the
// run keeps the first result of each task (the dead worker's for the half
// it answered) and the publisher drops the second ones as duplicates.
// That is the guarantee: a task of a batch whose worker died may run
// twice, as a single task may, and its run sees one result.
func TestPartlyAnsweredBatchRedelivered(t *testing.T) {
	const ackWait, n = 300 * time.Millisecond, 10
	mb := membroker.New()
	t.Cleanup(func() { _ = mb.Close() })
	echo := svc.Agent{Name: "echo", Model: "test:echo"}
	rt, p := publisherRuntime(t, dispatch.Config{Broker: &taskSpy{Broker: mb, delay: 50 * time.Millisecond}, AckWait: ackWait}, echo)
	warmUp(t, mb, rt, p, echo)
	announce(t, mb, p, "doomed", "echo", 100, true)
	dm := startDoomed(t, mb, "echo", ackWait, true)

	var res []svc.AgentResult
	var gerr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		res, gerr = rt.Gather(ctx, "echo", echoTasks(n), n)
	}()
	testutil.Eventually(t, "every task taken by the doomed worker", func() bool { return dm.tasks.Load() == n })
	_ = dm.sub.Stop()
	if dm.batches.Load() == 0 || dm.answered.Load() == 0 {
		t.Fatalf("the doomed worker took %d batches and answered %d tasks: want a partly answered batch", dm.batches.Load(), dm.answered.Load())
	}
	workerWith(t, mb, worker.Config{RuntimeID: "survivor", Concurrency: 100}, nil, echo)
	<-done
	if gerr != nil {
		t.Fatal(gerr)
	}
	fromDoomed := 0
	for i, r := range res {
		if !r.Success {
			t.Fatalf("task %d: %+v", i, r)
		}
		switch string(r.Output) {
		case `"doomed"`:
			fromDoomed++
		case fmt.Sprintf(`{"n":%d}`, i):
		default:
			t.Errorf("task %d: output %s", i, r.Output)
		}
	}
	if int64(fromDoomed) != dm.answered.Load() {
		t.Errorf("%d results from the doomed worker kept, want the %d it answered", fromDoomed, dm.answered.Load())
	}
	testutil.Eventually(t, "the survivor's second results dropped", func() bool { return p.Duplicates() == dm.answered.Load() })
	if r := p.Redeliveries(); r != int64(n)-dm.answered.Load() {
		t.Errorf("Redeliveries = %d, want %d (the results that came from a redelivery)", r, int64(n)-dm.answered.Load())
	}
}

// TestDeadLetteredBatchFailsEveryTask: a batch delivered more often than
// MaxDeliver goes to the dead letter, and every task of it fails with the
// reason instead of waiting for its deadline.
func TestDeadLetteredBatchFailsEveryTask(t *testing.T) {
	const ackWait, n = 200 * time.Millisecond, 8
	mb := membroker.New()
	t.Cleanup(func() { _ = mb.Close() })
	echo := svc.Agent{Name: "echo", Model: "test:echo"}
	rt, p := publisherRuntime(t, dispatch.Config{Broker: &taskSpy{Broker: mb, delay: 50 * time.Millisecond}, AckWait: ackWait}, echo)
	warmUp(t, mb, rt, p, echo)
	announce(t, mb, p, "doomed", "echo", 100, true)
	dm := startDoomed(t, mb, "echo", ackWait, false)
	var res []svc.AgentResult
	var gerr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		res, gerr = rt.Gather(ctx, "echo", echoTasks(n), n)
	}()
	testutil.Eventually(t, "every task taken by the doomed worker", func() bool { return dm.tasks.Load() == n })
	_ = dm.sub.Stop()
	if dm.batches.Load() == 0 {
		t.Fatal("no batch taken")
	}
	// The next delivery is the second: past this worker's MaxDeliver.
	workerWith(t, mb, worker.Config{RuntimeID: "strict", Concurrency: 100, MaxDeliver: 1, AckWait: ackWait}, nil, echo)
	<-done
	if gerr != nil {
		t.Fatal(gerr)
	}
	for i, r := range res {
		if r.Success || r.Error == nil || r.Error.Reason != "dead_letter" || !strings.Contains(r.Error.Message, "given up after 1 deliveries") {
			t.Errorf("task %d: %+v %+v, want failed with dead_letter", i, r, r.Error)
		}
	}
}

// blockingRunner runs a task whose input is "block" until its context
// ends, and any other at once.
type blockingRunner struct {
	worker.Runner
	runs atomic.Int64 // "block" tasks started
}

func (r *blockingRunner) Run(ctx context.Context, agent string, task svc.TaskSpec) (svc.AgentResult, error) {
	if string(task.Input) != `"block"` {
		return r.Runner.Run(ctx, agent, task)
	}
	r.runs.Add(1)
	<-ctx.Done()
	return svc.AgentResult{AgentName: agent, TaskID: task.ID}, context.Cause(ctx)
}

// TestCancelReachesTasksWaitingInABatch: a gather cancelled while a
// worker holds batches of its tasks, some running and some waiting for a
// slot, and more still on the broker: the running ones stop, and none of
// the others runs after the cancel: they are answered cancelled when they
// get a slot (the cancel named their dispatch), so the worker is idle at
// once rather than working through tasks nobody waits for.
func TestCancelReachesTasksWaitingInABatch(t *testing.T) {
	mb := membroker.New()
	t.Cleanup(func() { _ = mb.Close() })
	echo := svc.Agent{Name: "echo", Model: "test:echo"}
	spy := &taskSpy{Broker: mb, delay: 20 * time.Millisecond}
	rt, p := publisherRuntime(t, dispatch.Config{Broker: spy}, echo)
	blocking := &blockingRunner{}
	w := workerWith(t, mb, worker.Config{RuntimeID: "w", Concurrency: 4}, func(r worker.Runner) worker.Runner {
		blocking.Runner = r
		return blocking
	}, echo)
	testutil.Eventually(t, "the worker known", func() bool { _, ok := workerOf(t, p, "w"); return ok })
	// Fast tasks first: the publisher learns they take no time, so the
	// next ones go in batches of the worker's concurrency.
	if _, err := rt.Gather(context.Background(), "echo", echoTasks(8), 8); err != nil {
		t.Fatal(err)
	}
	blocked := make([]svc.TaskSpec, 16)
	for i := range blocked {
		blocked[i] = svc.TaskSpec{ID: fmt.Sprint(i), Input: json.RawMessage(`"block"`)}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := rt.Gather(ctx, "echo", blocked, len(blocked))
		done <- err
	}()
	testutil.Eventually(t, "four tasks running", func() bool { return w.InFlight() == 4 })
	time.Sleep(100 * time.Millisecond) // the next batches reach the worker
	if _, largest := spy.largest(); largest < 2 {
		t.Fatalf("the largest message held %d tasks: want batches", largest)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the cancelled gather did not return")
	}
	testutil.Eventually(t, "the worker idle", func() bool { return w.InFlight() == 0 })
	started := blocking.runs.Load()
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		if w.InFlight() != 0 {
			t.Fatalf("a task of the cancelled gather runs after the cancel (%d in flight, %d started, %d before)", w.InFlight(), blocking.runs.Load(), started)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if w.Skipped() == 0 {
		t.Errorf("no task answered cancelled unrun; %d started", blocking.runs.Load())
	}
}

// TestMixedFleetGetsSingleTasks: while a worker of an earlier release
// (one that does not announce batches) serves the agent, the publisher
// sends single tasks only, so that worker never gets a message it would
// refuse; every task is answered.
func TestMixedFleetGetsSingleTasks(t *testing.T) {
	mb := membroker.New()
	t.Cleanup(func() { _ = mb.Close() })
	echo := svc.Agent{Name: "echo", Model: "test:echo"}
	spy := &taskSpy{Broker: mb, delay: 10 * time.Millisecond}
	rt, p := publisherRuntime(t, dispatch.Config{Broker: spy}, echo)
	workerWith(t, mb, worker.Config{RuntimeID: "new", Concurrency: 50}, nil, echo)
	testutil.Eventually(t, "the new worker known", func() bool { _, ok := workerOf(t, p, "new"); return ok })
	announce(t, mb, p, "old", "echo", 50, false)
	// The old worker: version 1 envelopes only, as its release decodes.
	var refused, answered atomic.Int64
	subject := fleetwire.TaskSubject("echo")
	old, err := mb.Subscribe(context.Background(), subject, svc.SubscribeOptions{Group: svc.DefaultGroup(subject), Prefetch: 10},
		func(ctx context.Context, d *svc.Delivery) {
			env, err := fleetwire.Decode(d.Data)
			if err != nil {
				refused.Add(1)
				_ = d.Ack(ctx)
				return
			}
			out := fleetwire.Envelope{Kind: fleetwire.MsgResult, TaskID: env.TaskID, SpanID: env.SpanID, Attempt: env.Attempt,
				Result: &svc.AgentResult{AgentName: env.Agent, TaskID: env.TaskID, Success: true, Output: env.Input}}
			data, err := out.Encode()
			if err == nil {
				err = mb.Publish(ctx, env.ReplyTo, data)
			}
			if err != nil {
				t.Error(err)
			}
			answered.Add(1)
			_ = d.Ack(ctx)
		})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = old.Stop() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := rt.Gather(ctx, "echo", echoTasks(200), 200)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if !r.Success {
			t.Fatalf("task %d: %+v", i, r)
		}
	}
	if messages, largest := spy.largest(); largest != 1 || messages != 200 {
		t.Errorf("%d messages, the largest of %d tasks: want single tasks only", messages, largest)
	}
	if refused.Load() != 0 || answered.Load() == 0 {
		t.Errorf("the old worker refused %d messages and answered %d", refused.Load(), answered.Load())
	}
}

// TestSlowTasksGoOneByOne: tasks that take long go out one to a message
// even when many wait to be published: a batch of them would wait for
// slots on one worker while others idle, and the broker's share of a
// slow task is small anyway.
func TestSlowTasksGoOneByOne(t *testing.T) {
	mb := membroker.New()
	t.Cleanup(func() { _ = mb.Close() })
	slow := svc.Agent{Name: "slow", Model: "test:echo", ModelSettings: map[string]any{"latency_ms": 100}}
	spy := &taskSpy{Broker: mb, delay: 20 * time.Millisecond}
	rt, p := publisherRuntime(t, dispatch.Config{Broker: spy}, slow)
	workerWith(t, mb, worker.Config{RuntimeID: "w", Concurrency: 8}, nil, slow)
	testutil.Eventually(t, "the worker known", func() bool { _, ok := workerOf(t, p, "w"); return ok })
	for range 2 { // the first gather teaches the publisher how long the tasks take
		res, err := rt.Gather(context.Background(), "slow", echoTasks(16), 16)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range res {
			if !r.Success {
				t.Fatalf("task %d: %+v", i, r)
			}
		}
	}
	if messages, largest := spy.largest(); largest != 1 || messages != 32 {
		t.Errorf("%d messages, the largest of %d tasks: want one task a message", messages, largest)
	}
}

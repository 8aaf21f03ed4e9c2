package dispatch_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/broker/membroker"
	"github.com/svc-dev/svc/dispatch"
	"github.com/svc-dev/svc/fleetwire"
	"github.com/svc-dev/svc/internal/testutil"
	"github.com/svc-dev/svc/supervisor"
	"github.com/svc-dev/svc/worker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type recorder struct {
	mu  sync.Mutex
	evs []svc.RuntimeEvent
}

func (r *recorder) Emit(ev svc.RuntimeEvent) {
	r.mu.Lock()
	r.evs = append(r.evs, ev)
	r.mu.Unlock()
}

func (r *recorder) count(t svc.EventType) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, ev := range r.evs {
		if ev.EventType == t {
			n++
		}
	}
	return n
}

func fleet(t *testing.T, b svc.Broker, agents ...svc.Agent) *worker.Worker {
	t.Helper()
	rt, err := supervisor.New(supervisor.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Register(agents...); err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(context.Background(), worker.Config{Broker: b, Runner: rt, Heartbeat: time.Hour})
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

func publisher(t *testing.T, b svc.Broker, em svc.Emitter) *dispatch.Publisher {
	t.Helper()
	p, err := dispatch.New(context.Background(), dispatch.Config{Broker: b, Emitter: em})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func TestDispatchRunsOnAWorker(t *testing.T) {
	b := membroker.New()
	defer b.Close()
	var em recorder
	p := publisher(t, b, &em)
	w := fleet(t, b, svc.Agent{Name: "echo", Model: "test:echo"})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := p.Dispatch(ctx, dispatch.Request{Agent: "echo", TrustLevel: svc.TrustHigh, TaskID: "t1", TraceID: "tr",
		RunID: "tr", Input: json.RawMessage(`{"a":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Success || string(res.Output) != `{"a":1}` || res.TaskID != "t1" {
		t.Fatalf("result = %+v", res)
	}
	if n := em.count(svc.EventAgentDispatched); n != 1 {
		t.Fatalf("agent_dispatched emitted %d times", n)
	}
	// The worker's started event reaches the publisher's emitter (a
	// broadcast: delivered on its own goroutine, so it may come after the
	// result).
	testutil.Eventually(t, "worker_started relayed to the publisher", func() bool {
		return em.count(svc.EventWorkerStarted) == 1
	})
	_ = w
}

// A result that arrives twice (a task redelivered after its worker died
// runs twice) is taken once.
func TestDuplicateResultDropped(t *testing.T) {
	b := membroker.New()
	defer b.Close()
	p := publisher(t, b, nil)
	// A fake worker that answers every task twice.
	sub, err := b.Subscribe(context.Background(), fleetwire.TaskSubject("twice"), svc.SubscribeOptions{}, func(ctx context.Context, d *svc.Delivery) {
		env, err := fleetwire.Decode(d.Data)
		if err != nil {
			t.Error(err)
			return
		}
		res := fleetwire.Envelope{Kind: fleetwire.MsgResult, TaskID: env.TaskID, SpanID: env.SpanID, Attempt: env.Attempt, Result: &svc.AgentResult{TaskID: env.TaskID, Success: true, Output: json.RawMessage(`1`)}}
		data, _ := res.Encode()
		for range 2 {
			if err := b.Publish(ctx, env.ReplyTo, data); err != nil {
				t.Error(err)
			}
		}
		_ = d.Ack(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range 3 {
		res, err := p.Dispatch(ctx, dispatch.Request{Agent: "twice", TaskID: "t", TraceID: "tr", Input: json.RawMessage(`1`)})
		if err != nil || !res.Success {
			t.Fatalf("dispatch %d: %v %+v", i, err, res)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for p.Duplicates() < 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if got := p.Duplicates(); got != 3 {
		t.Fatalf("duplicates dropped = %d, want 3", got)
	}
}

// With no worker serving the agent the call ends at its deadline with a
// TimeoutError that says so, instead of hanging.
func TestNoWorkerServesTheAgent(t *testing.T) {
	b := membroker.New()
	defer b.Close()
	p := publisher(t, b, nil)
	fleet(t, b, svc.Agent{Name: "echo", Model: "test:echo"})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := p.Dispatch(ctx, dispatch.Request{Agent: "ghost", TaskID: "t", TraceID: "tr", Input: json.RawMessage(`1`)})
	var e *svc.Error
	if !errors.As(err, &e) || e.Kind != svc.KindTimeout || !strings.Contains(e.Message, "no worker") {
		t.Fatalf("err = %v, want a TimeoutError naming the missing worker", err)
	}
}

// Cancelling the call cancels the task on the worker.
func TestCancelReachesTheWorker(t *testing.T) {
	b := membroker.New()
	defer b.Close()
	p := publisher(t, b, nil)
	w := fleet(t, b, svc.Agent{Name: "slow", Model: "test:echo", ModelSettings: map[string]any{"latency_ms": 60_000}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := p.Dispatch(ctx, dispatch.Request{Agent: "slow", TaskID: "t", TraceID: "tr", RunID: "run", Input: json.RawMessage(`1`)})
		done <- err
	}()
	for w.InFlight() == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("dispatch after cancel: %v", err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for w.InFlight() != 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if w.InFlight() != 0 {
		t.Fatal("the worker still runs the cancelled task")
	}
}

// slowConfirm is a broker whose server delivers a task before it confirms
// the publish, as RabbitMQ does (a quorum queue confirms after its log is
// replicated and synced): Publish of a task returns only when ctx ends.
type slowConfirm struct{ svc.Broker }

func (b slowConfirm) Publish(ctx context.Context, subject string, data []byte) error {
	if err := b.Broker.Publish(context.WithoutCancel(ctx), subject, data); err != nil {
		return err
	}
	if subject == fleetwire.TaskSubject("slow") {
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

// A call cancelled while its task's publish still waits for the broker's
// confirm cancels the task too: the worker may be running it already.
func TestCancelDuringPublishReachesTheWorker(t *testing.T) {
	b := membroker.New()
	defer b.Close()
	p := publisher(t, slowConfirm{b}, nil)
	w := fleet(t, b, svc.Agent{Name: "slow", Model: "test:echo", ModelSettings: map[string]any{"latency_ms": 60_000}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := p.Dispatch(ctx, dispatch.Request{Agent: "slow", TaskID: "t", TraceID: "tr", RunID: "run", Input: json.RawMessage(`1`)})
		done <- err
	}()
	testutil.Eventually(t, "the task running on the worker", func() bool { return w.InFlight() == 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("dispatch after cancel: %v", err)
	}
	testutil.Within(t, 20*time.Second, "the worker to drop the cancelled task", func() bool { return w.InFlight() == 0 })
}

// A nested dispatch (a worker's) carries the remaining token cap, where
// the events go (relay_to, with publish_events) and the invocation's
// parent span, which agent_dispatched names too.
func TestDispatchNestedFields(t *testing.T) {
	b := membroker.New()
	defer b.Close()
	got := make(chan *fleetwire.Envelope, 1)
	sub, err := b.Subscribe(context.Background(), fleetwire.TaskSubject("probe"), svc.SubscribeOptions{}, func(ctx context.Context, d *svc.Delivery) {
		env, err := fleetwire.Decode(d.Data)
		if err != nil {
			t.Error(err)
			return
		}
		got <- env
		out := fleetwire.Envelope{Kind: fleetwire.MsgResult, TaskID: env.TaskID, RunID: env.RunID, SpanID: env.SpanID, Attempt: env.Attempt,
			Result: &svc.AgentResult{AgentName: "probe", TaskID: env.TaskID, Success: true, Output: json.RawMessage(`1`)}}
		data, err := out.Encode()
		if err != nil {
			t.Error(err)
			return
		}
		_ = b.Publish(ctx, env.ReplyTo, data)
		_ = d.Ack(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Stop() }()
	rec := &recorder{}
	p := publisher(t, b, rec)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := p.Dispatch(ctx, dispatch.Request{Agent: "probe", TaskID: "t1", TraceID: "child-trace", ParentTraceID: "parent-trace",
		SpanID: "child-span", ParentSpanID: "parent-span", RunID: "run-1", Input: json.RawMessage(`{}`), Depth: 2,
		TokenBudget: 90, EventsTo: fleetwire.EventSubject("origin")})
	if err != nil || !res.Success {
		t.Fatalf("dispatch: %+v %v", res, err)
	}
	env := <-got
	if env.TokenBudget != 90 || env.EventsTo() != "svc.events.origin" || env.Depth != 2 || env.RunID != "run-1" ||
		env.ParentTraceID != "parent-trace" {
		t.Errorf("task envelope = %+v", env)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var found bool
	for _, ev := range rec.evs {
		if ev.EventType == svc.EventAgentDispatched {
			found = ev.ParentSpanID == "parent-span" && ev.SpanID == "child-span" && ev.ParentTraceID == "parent-trace"
		}
	}
	if !found {
		t.Errorf("no agent_dispatched under the parent span: %+v", rec.evs)
	}
}

// failingPublish fails the first fails publishes of tasks with err, and
// counts the tries.
type failingPublish struct {
	svc.Broker
	err   error
	fails int32
	tries atomic.Int32
}

func (b *failingPublish) Publish(ctx context.Context, subject string, data []byte) error {
	if subject == fleetwire.TaskSubject("echo") && b.tries.Add(1) <= b.fails {
		return b.err
	}
	return b.Broker.Publish(ctx, subject, data)
}

// Dispatch decides by the broker's error type: a transient publish failure
// (a dropped connection) is tried again and the task runs; a permanent one
// (too large a task, a closed broker) fails the dispatch at once.
func TestDispatchRetriesTransientPublishOnly(t *testing.T) {
	b := membroker.New()
	defer b.Close()
	fleet(t, b, svc.Agent{Name: "echo", Model: "test:echo"})
	req := dispatch.Request{Agent: "echo", TaskID: "t", TraceID: "tr", RunID: "run", Input: json.RawMessage(`1`)}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	flaky := &failingPublish{Broker: b, fails: 2, err: svc.TransientBrokerError("testbroker", "publish", errors.New("connection reset"))}
	res, err := publisher(t, flaky, nil).Dispatch(ctx, req)
	if err != nil || !res.Success {
		t.Fatalf("dispatch over two transient failures = %+v, %v; want the task's result", res, err)
	}
	if n := flaky.tries.Load(); n != 3 {
		t.Errorf("published %d times, want 3", n)
	}

	refused := &failingPublish{Broker: b, fails: 100, err: svc.PermanentBrokerError("testbroker", "publish", errors.New("message too large"))}
	_, err = publisher(t, refused, nil).Dispatch(ctx, req)
	if !errors.Is(err, svc.ErrRuntime) || !svc.IsPermanentBrokerError(err) {
		t.Fatalf("dispatch after a permanent failure = %v", err)
	}
	if n := refused.tries.Load(); n != 1 {
		t.Errorf("a permanent failure was tried %d times, want once", n)
	}

	down := &failingPublish{Broker: b, fails: 100, err: svc.TransientBrokerError("testbroker", "publish", errors.New("connection refused"))}
	if _, err = publisher(t, down, nil).Dispatch(ctx, req); !svc.IsTransientBrokerError(err) {
		t.Fatalf("dispatch while the broker stays down = %v", err)
	}
	if n := down.tries.Load(); n < 2 || n > 10 {
		t.Errorf("a broker that stays down was tried %d times, want a few", n)
	}
}

package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/broker/membroker"
	"github.com/svc-dev/svc/fleetwire"
	"github.com/svc-dev/svc/internal/testutil"
	"github.com/svc-dev/svc/supervisor"
	"github.com/svc-dev/svc/worker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// wait bounds every wait of these tests for something that must happen; a
// worker that needs longer is broken, not slow.
const wait = 20 * time.Second

var agents = []svc.Agent{
	{Name: "echo", Model: "test:echo"},
	{Name: "slow", Model: "test:echo", ModelSettings: map[string]any{"latency_ms": 60_000}},
	{Name: "nap", Model: "test:echo", ModelSettings: map[string]any{"latency_ms": 300}},
	{Name: "broken", Model: "test:fail"},
}

func newRuntime(t *testing.T) *supervisor.Runtime {
	t.Helper()
	rt, err := supervisor.New(supervisor.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rt.Shutdown(ctx)
	})
	if err := rt.Register(agents...); err != nil {
		t.Fatal(err)
	}
	return rt
}

func newBroker(t *testing.T) svc.Broker {
	t.Helper()
	b := membroker.New()
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// recorder keeps emitted events.
type recorder struct {
	mu  sync.Mutex
	evs []svc.RuntimeEvent
}

func (r *recorder) Emit(ev svc.RuntimeEvent) {
	r.mu.Lock()
	r.evs = append(r.evs, ev)
	r.mu.Unlock()
}

func (r *recorder) of(t svc.EventType) []svc.RuntimeEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []svc.RuntimeEvent
	for _, ev := range r.evs {
		if ev.EventType == t {
			out = append(out, ev)
		}
	}
	return out
}

func startWorker(t *testing.T, cfg worker.Config) *worker.Worker {
	t.Helper()
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
	})
	return w
}

// inbox collects the result envelopes published on a reply subject.
type inbox struct {
	subject string
	ch      chan *fleetwire.Envelope
}

func newInbox(t *testing.T, b svc.Broker, name string) *inbox {
	t.Helper()
	in := &inbox{subject: fleetwire.ResultSubject(name), ch: make(chan *fleetwire.Envelope, 64)}
	sub, err := b.Subscribe(context.Background(), in.subject, svc.SubscribeOptions{Prefetch: 16}, func(ctx context.Context, d *svc.Delivery) {
		env, err := fleetwire.Decode(d.Data)
		if err != nil {
			t.Errorf("result: %v", err)
		}
		_ = d.Ack(ctx)
		in.ch <- env
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Stop() })
	return in
}

func (in *inbox) next(t *testing.T) *fleetwire.Envelope {
	t.Helper()
	select {
	case env := <-in.ch:
		return env
	case <-time.After(wait):
		t.Fatal("no result")
		return nil
	}
}

func (in *inbox) none(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case env := <-in.ch:
		t.Fatalf("unexpected result for task %s: %+v", env.TaskID, env.Result)
	case <-time.After(d):
	}
}

func publishTask(t *testing.T, b svc.Broker, env fleetwire.Envelope) {
	t.Helper()
	env.Kind = fleetwire.MsgTask
	if env.Input == nil {
		env.Input = json.RawMessage(`{"text":"hi"}`)
	}
	data, err := env.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(context.Background(), fleetwire.TaskSubject(env.Agent), data); err != nil {
		t.Fatal(err)
	}
}

func TestTaskRoundTrip(t *testing.T) {
	b := newBroker(t)
	w := startWorker(t, worker.Config{Broker: b, Runner: newRuntime(t), Heartbeat: -1})
	in := newInbox(t, b, "pub")
	publishTask(t, b, fleetwire.Envelope{TaskID: "t1", RunID: "r1", TraceID: "trace-1", SpanID: "s1/1", Agent: "echo",
		ReplyTo: in.subject, Attempt: 1, Input: json.RawMessage(`{"text":"hello"}`)})
	env := in.next(t)
	if env.Kind != fleetwire.MsgResult || env.TaskID != "t1" || env.RunID != "r1" || env.SpanID != "s1/1" || env.RuntimeID != w.RuntimeID() {
		t.Fatalf("result envelope = %+v", env)
	}
	r := env.Result
	if !r.Success || string(r.Output) != `{"text":"hello"}` || r.TaskID != "t1" || r.Metadata.TraceID != "trace-1" {
		t.Fatalf("result = %+v", r)
	}
	// A failure inside the run is a result too, with its typed error.
	publishTask(t, b, fleetwire.Envelope{TaskID: "t2", TraceID: "trace-2", Agent: "broken", ReplyTo: in.subject})
	if r := in.next(t).Result; r.Success || r.Error == nil || r.Error.Type != string(svc.KindModel) {
		t.Fatalf("failed result = %+v", r)
	}
}

func TestAgentsDefaultToTheRunnersAndUnknownIsRefused(t *testing.T) {
	b := newBroker(t)
	rt := newRuntime(t)
	w, err := worker.New(context.Background(), worker.Config{Broker: b, Runner: rt})
	if err != nil {
		t.Fatal(err)
	}
	if got := w.Agents(); !slices.Equal(got, []string{"broken", "echo", "nap", "slow"}) {
		t.Fatalf("agents = %v", got)
	}
	_, err = worker.New(context.Background(), worker.Config{Broker: b, Runner: rt, Agents: []string{"echo", "nope"}})
	if !errors.Is(err, svc.ErrRegistry) {
		t.Fatalf("unknown agent: err = %v, want a RegistryError", err)
	}
}

func TestDepthTravelsInTheTask(t *testing.T) {
	b := newBroker(t)
	rt, err := supervisor.New(supervisor.Config{Options: func() svc.Options {
		o := svc.DefaultOptions()
		o.MaxSpawnDepth = 2
		return o
	}()})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	if err := rt.Register(agents[0]); err != nil {
		t.Fatal(err)
	}
	startWorker(t, worker.Config{Broker: b, Runner: rt, Heartbeat: -1})
	in := newInbox(t, b, "pub")
	publishTask(t, b, fleetwire.Envelope{TaskID: "ok", TraceID: "a", Agent: "echo", ReplyTo: in.subject, Depth: 2})
	if r := in.next(t).Result; !r.Success {
		t.Fatalf("depth 2 of 2: %+v", r)
	}
	publishTask(t, b, fleetwire.Envelope{TaskID: "deep", TraceID: "b", Agent: "echo", ReplyTo: in.subject, Depth: 3})
	if r := in.next(t).Result; r.Success || r.Error.Type != string(svc.KindDepthLimit) {
		t.Fatalf("depth 3 of 2: %+v", r.Error)
	}
}

func TestExpiredTaskIsNotRun(t *testing.T) {
	b := newBroker(t)
	startWorker(t, worker.Config{Broker: b, Runner: newRuntime(t), Heartbeat: -1})
	in := newInbox(t, b, "pub")
	env := fleetwire.Envelope{TaskID: "late", TraceID: "x", Agent: "echo", ReplyTo: in.subject}
	env.SetDeadline(time.Now().Add(-time.Second))
	publishTask(t, b, env)
	if r := in.next(t).Result; r.Success || r.Error.Type != string(svc.KindTimeout) {
		t.Fatalf("expired task: %+v", r)
	}
}

func TestCancelBroadcastStopsTheRun(t *testing.T) {
	b := newBroker(t)
	w := startWorker(t, worker.Config{Broker: b, Runner: newRuntime(t), Heartbeat: -1})
	in := newInbox(t, b, "pub")
	publishTask(t, b, fleetwire.Envelope{TaskID: "t", RunID: "run-1", TraceID: "x", Agent: "slow", ReplyTo: in.subject})
	for w.InFlight() == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	cancel, _ := (&fleetwire.Envelope{Kind: fleetwire.MsgCancel, RunID: "run-1"}).Encode()
	if err := b.Broadcast(context.Background(), fleetwire.SubjectCancel, cancel); err != nil {
		t.Fatal(err)
	}
	if r := in.next(t).Result; r.Success || r.Error.Type != string(svc.KindCancelled) {
		t.Fatalf("cancelled task: %+v", r)
	}
	// A task of that run that arrives after the cancel does not run.
	publishTask(t, b, fleetwire.Envelope{TaskID: "t2", RunID: "run-1", TraceID: "x", Agent: "echo", ReplyTo: in.subject})
	if r := in.next(t).Result; r.Success || r.Error.Type != string(svc.KindCancelled) {
		t.Fatalf("task of a cancelled run: %+v", r)
	}
}

func TestShutdownLetsTasksFinish(t *testing.T) {
	b := newBroker(t)
	w, err := worker.New(context.Background(), worker.Config{Broker: b, Runner: newRuntime(t), Heartbeat: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	in := newInbox(t, b, "pub")
	publishTask(t, b, fleetwire.Envelope{TaskID: "t", TraceID: "x", Agent: "nap", ReplyTo: in.subject})
	for w.InFlight() == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := w.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if r := in.next(t).Result; !r.Success {
		t.Fatalf("drained task: %+v", r)
	}
}

// A worker out of grace gives its task back, and another worker runs it:
// nothing is lost.
func TestShutdownPastGraceHandsTasksToAnotherWorker(t *testing.T) {
	b := newBroker(t)
	rt := newRuntime(t)
	first, err := worker.New(context.Background(), worker.Config{Broker: b, Runner: rt, Agents: []string{"slow"}, Heartbeat: -1, RuntimeID: "first"})
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	in := newInbox(t, b, "pub")
	publishTask(t, b, fleetwire.Envelope{TaskID: "t", TraceID: "x", Agent: "slow", ReplyTo: in.subject})
	for first.InFlight() == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := first.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("shutdown past grace: err = %v", err)
	}
	in.none(t, 200*time.Millisecond) // handed back, not answered

	// The second worker gets it; it cancels it by run to end the test fast.
	second := startWorker(t, worker.Config{Broker: b, Runner: rt, Agents: []string{"slow"}, Heartbeat: -1, RuntimeID: "second"})
	for second.InFlight() == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	cancelRun, _ := (&fleetwire.Envelope{Kind: fleetwire.MsgCancel, RunID: "x", TaskID: "t"}).Encode()
	if err := b.Broadcast(context.Background(), fleetwire.SubjectCancel, cancelRun); err != nil {
		t.Fatal(err)
	}
	if env := in.next(t); env.RuntimeID != "second" {
		t.Fatalf("result from %q, want the second worker", env.RuntimeID)
	}
}

func TestSignedTasks(t *testing.T) {
	b := newBroker(t)
	keys := map[string][]byte{"k1": []byte("secret")}
	startWorker(t, worker.Config{Broker: b, Runner: newRuntime(t), Heartbeat: -1, Keys: keys, SignKeyID: "k1", SignKey: []byte("secret")})
	in := newInbox(t, b, "pub")
	// Unsigned: refused, no result (its reply subject cannot be trusted).
	publishTask(t, b, fleetwire.Envelope{TaskID: "unsigned", TraceID: "x", Agent: "echo", ReplyTo: in.subject})
	// Signed: run, and the result is signed.
	env := fleetwire.Envelope{Kind: fleetwire.MsgTask, TaskID: "signed", TraceID: "x", Agent: "echo", ReplyTo: in.subject, Input: json.RawMessage(`1`)}
	if err := env.Sign("k1", []byte("secret")); err != nil {
		t.Fatal(err)
	}
	data, _ := env.Encode()
	if err := b.Publish(context.Background(), fleetwire.TaskSubject("echo"), data); err != nil {
		t.Fatal(err)
	}
	res := in.next(t)
	if res.TaskID != "signed" {
		t.Fatalf("first result is for %q, want only the signed task's", res.TaskID)
	}
	if err := res.Verify(keys); err != nil {
		t.Fatalf("result signature: %v", err)
	}
	in.none(t, 200*time.Millisecond)
}

func TestLifecycleEvents(t *testing.T) {
	b := newBroker(t)
	var seen recorder
	sub, err := b.SubscribeBroadcast(context.Background(), fleetwire.SubjectWorkers, func(_ context.Context, _ string, data []byte) {
		var ev svc.RuntimeEvent
		if err := json.Unmarshal(data, &ev); err != nil {
			t.Errorf("worker event: %v", err)
		}
		seen.Emit(ev)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Stop()
	var local recorder
	w, err := worker.New(context.Background(), worker.Config{Broker: b, Runner: newRuntime(t), Agents: []string{"echo"},
		Concurrency: 3, Prefetch: 2, Heartbeat: 20 * time.Millisecond, ConsumerID: "c-1", Emitter: &local})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(wait)
	for len(local.of(svc.EventWorkerHeartbeat)) < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if err := w.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	id := w.RuntimeID()
	for _, typ := range []svc.EventType{svc.EventWorkerStarted, svc.EventWorkerHeartbeat, svc.EventWorkerStopped} {
		evs := local.of(typ)
		if len(evs) == 0 {
			t.Fatalf("no %s emitted", typ)
		}
		ev := evs[0]
		if ev.AgentName != id || ev.TraceID != id || ev.Payload["runtime_id"] != id {
			t.Errorf("%s names %q/%q, want the runtime id %q", typ, ev.AgentName, ev.TraceID, id)
		}
		want := svc.PayloadKeys[typ]
		if typ != svc.EventWorkerStopped {
			// A worker of this release takes batches and says so.
			want = append(slices.Clone(want), fleetwire.BatchesPayloadKey)
		}
		var got []string
		for k := range ev.Payload {
			got = append(got, k)
		}
		slices.Sort(got)
		w2 := slices.Clone(want)
		slices.Sort(w2)
		if !slices.Equal(got, w2) {
			t.Errorf("%s payload keys = %v, want %v", typ, got, w2)
		}
	}
	st := local.of(svc.EventWorkerStarted)[0].Payload
	if st["concurrency"] != 3 || st["prefetch"] != 2 || st["consumer_id"] != "c-1" || st["broker_scheme"] != "memory" {
		t.Errorf("worker_started payload = %v", st)
	}
	hb := local.of(svc.EventWorkerHeartbeat)[0].Payload
	if hb["concurrency_cap"] != 3 || hb["in_flight"] != 0 {
		t.Errorf("worker_heartbeat payload = %v", hb)
	}
	// Every serve node sees them on svc.workers.
	deadline = time.Now().Add(wait)
	for len(seen.of(svc.EventWorkerStopped)) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if len(seen.of(svc.EventWorkerStarted)) != 1 || len(seen.of(svc.EventWorkerStopped)) != 1 {
		t.Fatalf("broadcast worker events: started %d, stopped %d", len(seen.of(svc.EventWorkerStarted)), len(seen.of(svc.EventWorkerStopped)))
	}
}

// A task's token_budget is the cap of its run on the worker; a run stopped
// by it reports the tokens it used, for its dispatcher to charge.
func TestTokenBudgetTravelsInTheTask(t *testing.T) {
	b := newBroker(t)
	rt, err := supervisor.New(supervisor.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	if err := rt.Register(svc.Agent{Name: "big", Model: "test:echo", ModelSettings: map[string]any{"tokens": 50}}); err != nil {
		t.Fatal(err)
	}
	startWorker(t, worker.Config{Broker: b, Runner: rt, Heartbeat: -1})
	in := newInbox(t, b, "pub")
	publishTask(t, b, fleetwire.Envelope{TaskID: "roomy", TraceID: "a", Agent: "big", ReplyTo: in.subject, TokenBudget: 100})
	if r := in.next(t).Result; !r.Success || r.Metadata.TokensUsed != 50 {
		t.Fatalf("50 tokens of a 100 cap: %+v", r)
	}
	publishTask(t, b, fleetwire.Envelope{TaskID: "tight", TraceID: "b", Agent: "big", ReplyTo: in.subject, TokenBudget: 20})
	r := in.next(t).Result
	if r.Success || r.Error.Type != string(svc.KindBudgetExceeded) || r.Metadata.TokensUsed != 50 {
		t.Fatalf("50 tokens of a 20 cap: %+v (error %+v)", r, r.Error)
	}
}

// countingRunner counts the runs it is asked for.
type countingRunner struct {
	worker.Runner
	runs atomic.Int64
}

func (c *countingRunner) Run(ctx context.Context, agent string, task svc.TaskSpec) (svc.AgentResult, error) {
	c.runs.Add(1)
	return c.Runner.Run(ctx, agent, task)
}

// deadLetters collects the records of a dead-letter subject.
func deadLetters(t *testing.T, b svc.Broker, subject string) <-chan svc.DeadLetter {
	t.Helper()
	ch := make(chan svc.DeadLetter, 64)
	sub, err := b.Subscribe(context.Background(), fleetwire.DeadLetterSubject(subject), svc.SubscribeOptions{Prefetch: 16},
		func(ctx context.Context, d *svc.Delivery) {
			var dl svc.DeadLetter
			if err := json.Unmarshal(d.Data, &dl); err != nil {
				t.Errorf("dead letter: %v", err)
			}
			_ = d.Ack(ctx)
			ch <- dl
		})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Stop() })
	return ch
}

// TestRejectedTasks puts forged task messages on the broker, as an attacker
// with access to it would: none is run, each is counted, logged and
// dead-lettered once (not redelivered), and the worker goes on running
// tasks signed with a key it knows.
func TestRejectedTasks(t *testing.T) {
	const secret = "0123456789abcdef-k1"
	b := newBroker(t)
	keys := map[string][]byte{"k1": []byte(secret)}
	runner := &countingRunner{Runner: newRuntime(t)}
	rec := &recorder{}
	w := startWorker(t, worker.Config{Broker: b, Runner: runner, Heartbeat: 50 * time.Millisecond, Emitter: rec,
		Keys: keys, SignKeyID: "k1", SignKey: []byte(secret), MaxDeliver: 3})
	in := newInbox(t, b, "pub")
	dead := deadLetters(t, b, fleetwire.TaskSubject("echo"))

	task := func(id string) fleetwire.Envelope {
		return fleetwire.Envelope{V: fleetwire.Version, Kind: fleetwire.MsgTask, TaskID: id, TraceID: "x", Agent: "echo",
			ReplyTo: in.subject, Input: json.RawMessage(`{"text":"hi"}`)}
	}
	forged := map[string][]byte{}
	raw := func(name string, e fleetwire.Envelope) {
		data, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		forged[name] = data
	}
	raw("unsigned", task("unsigned"))
	e := task("wrong-secret")
	if err := e.Sign("k1", []byte("0123456789abcdef-not-k1")); err != nil {
		t.Fatal(err)
	}
	raw("wrong-secret", e)
	e = task("unknown-key")
	if err := e.Sign("k0", []byte(secret)); err != nil {
		t.Fatal(err)
	}
	raw("unknown-key", e)
	e = task("tampered")
	if err := e.Sign("k1", []byte(secret)); err != nil {
		t.Fatal(err)
	}
	e.Input = json.RawMessage(`{"text":"rm -rf /"}`) // changed after signing
	raw("tampered", e)
	e = task("garbled-sig")
	e.KeyID, e.Sig = "k1", "!!not base64!!"
	raw("garbled-sig", e)
	forged["not-json"] = []byte("\x00\x01 not an envelope")
	for name, data := range forged {
		if err := b.Publish(context.Background(), fleetwire.TaskSubject("echo"), data); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}

	got := map[string]string{}
	for range forged {
		select {
		case dl := <-dead:
			for name, data := range forged {
				if string(dl.Data) == string(data) {
					got[name] = dl.Reason
				}
			}
			if !strings.HasPrefix(dl.Reason, "rejected: ") || dl.Subject != fleetwire.TaskSubject("echo") {
				t.Errorf("dead letter %q on %s", dl.Reason, dl.Subject)
			}
		case <-time.After(wait):
			t.Fatalf("dead letters: got %v, want all of %d forged messages", got, len(forged))
		}
	}
	for name := range forged {
		if _, ok := got[name]; !ok {
			t.Errorf("%s: not dead-lettered", name)
		}
	}
	for name, want := range map[string]string{"unsigned": "not signed", "unknown-key": `"k0"`,
		"wrong-secret": "bad signature", "tampered": "bad signature", "garbled-sig": "bad signature"} {
		if !strings.Contains(got[name], want) {
			t.Errorf("%s: dead-letter reason %q, want it to say %q", name, got[name], want)
		}
	}

	// A task signed with k1 still runs: the only run of this test.
	good := task("good")
	if err := good.Sign("k1", []byte(secret)); err != nil {
		t.Fatal(err)
	}
	data, err := good.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(context.Background(), fleetwire.TaskSubject("echo"), data); err != nil {
		t.Fatal(err)
	}
	if res := in.next(t); res.TaskID != "good" || !res.Result.Success {
		t.Fatalf("result %s: %+v", res.TaskID, res.Result)
	}
	in.none(t, 200*time.Millisecond)
	if n := runner.runs.Load(); n != 1 {
		t.Errorf("runner ran %d tasks, want only the good one", n)
	}
	if n := w.Rejected(); n != int64(len(forged)) {
		t.Errorf("Rejected = %d, want %d", n, len(forged))
	}
	// Acked, not redelivered up to MaxDeliver: nothing more dead-lettered.
	select {
	case dl := <-dead:
		t.Errorf("a second dead letter: %q", dl.Reason)
	case <-time.After(200 * time.Millisecond):
	}
	testutil.Eventually(t, fmt.Sprintf("a worker_heartbeat with rejected = %d", len(forged)), func() bool {
		for _, ev := range rec.of(svc.EventWorkerHeartbeat) {
			if n, _ := ev.Payload["rejected"].(int64); n == int64(len(forged)) {
				return true
			}
		}
		return false
	})
}

// dlBroker is a broker whose deliveries can dead-letter themselves, as
// amqpbroker's do (through RabbitMQ's dead-letter exchange): DeadLetter
// records the record and acks the message.
type dlBroker struct {
	svc.Broker
	got chan svc.DeadLetter
}

type dlAcker struct {
	svc.Acknowledger
	got chan svc.DeadLetter
}

func (a dlAcker) DeadLetter(ctx context.Context, dl svc.DeadLetter) error {
	a.got <- dl
	return a.Ack(ctx)
}

func (b dlBroker) Subscribe(ctx context.Context, subject string, opts svc.SubscribeOptions, h svc.Handler) (svc.Subscription, error) {
	return b.Broker.Subscribe(ctx, subject, opts, func(ctx context.Context, d *svc.Delivery) {
		d.Acker = dlAcker{Acknowledger: d.Acker, got: b.got}
		h(ctx, d)
	})
}

// TestRejectedTaskDeadLetteredByBroker: a broker that dead-letters a
// delivery itself is asked to for a rejected task, with the reason, and the
// worker publishes no record of its own.
func TestRejectedTaskDeadLetteredByBroker(t *testing.T) {
	mem := newBroker(t)
	b := dlBroker{Broker: mem, got: make(chan svc.DeadLetter, 4)}
	const secret = "0123456789abcdef-k1"
	startWorker(t, worker.Config{Broker: b, Runner: newRuntime(t), Heartbeat: time.Hour,
		Keys: map[string][]byte{"k1": []byte(secret)}, SignKeyID: "k1", SignKey: []byte(secret)})
	dead := deadLetters(t, mem, fleetwire.TaskSubject("echo"))
	data, err := json.Marshal(fleetwire.Envelope{V: fleetwire.Version, Kind: fleetwire.MsgTask, TaskID: "unsigned", TraceID: "x", Agent: "echo",
		ReplyTo: "svc.inbox.x", Input: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if err := mem.Publish(context.Background(), fleetwire.TaskSubject("echo"), data); err != nil {
		t.Fatal(err)
	}
	select {
	case dl := <-b.got:
		if !strings.Contains(dl.Reason, "not signed") || string(dl.Data) != string(data) || dl.Subject != fleetwire.TaskSubject("echo") {
			t.Errorf("DeadLetter asked with %+v", dl)
		}
	case <-time.After(wait):
		t.Fatal("the broker was not asked to dead-letter the unsigned task")
	}
	select {
	case dl := <-dead:
		t.Errorf("the worker also published a record: %q", dl.Reason)
	case <-time.After(200 * time.Millisecond):
	}
}

// TestCancelRecordedBeforeTheWorkerStarted: a run cancelled (and recorded
// on the broker) while this worker was not connected; its queued task is
// answered as cancelled, counted, and never run, and the heartbeat says
// so.
func TestCancelRecordedBeforeTheWorkerStarted(t *testing.T) {
	b := newBroker(t)
	if err := b.(svc.Retainer).Retain(context.Background(), fleetwire.CancelledRunKey("run-old"), time.Hour); err != nil {
		t.Fatal(err)
	}
	in := newInbox(t, b, "pub")
	publishTask(t, b, fleetwire.Envelope{TaskID: "queued", RunID: "run-old", TraceID: "x", Agent: "echo", ReplyTo: in.subject})
	var em recorder
	runner := &countingRunner{Runner: newRuntime(t)}
	w := startWorker(t, worker.Config{Broker: b, Runner: runner, Emitter: &em, Heartbeat: 50 * time.Millisecond})
	if r := in.next(t).Result; r.Success || r.Error.Type != string(svc.KindCancelled) {
		t.Fatalf("task of a run cancelled before the worker started: %+v", r)
	}
	if n := runner.runs.Load(); n != 0 || w.Skipped() != 1 {
		t.Fatalf("runs %d, skipped %d; want 0 and 1", n, w.Skipped())
	}
	testutil.Eventually(t, "a heartbeat with skipped_cancelled", func() bool {
		for _, ev := range em.of(svc.EventWorkerHeartbeat) {
			if n, ok := ev.Payload["skipped_cancelled"].(int64); ok && n == 1 {
				return true
			}
		}
		return false
	})
	// Another run's task still runs.
	publishTask(t, b, fleetwire.Envelope{TaskID: "other", RunID: "run-new", TraceID: "x", Agent: "echo", ReplyTo: in.subject})
	if r := in.next(t).Result; !r.Success {
		t.Fatalf("task of a live run: %+v", r)
	}
}

// failingRetainer is a broker whose cancel records cannot be read.
type failingRetainer struct{ svc.Broker }

func (failingRetainer) Retain(context.Context, string, time.Duration) error {
	return errors.New("down")
}
func (failingRetainer) Retained(context.Context, string) (bool, error) {
	return false, errors.New("down")
}

// TestCancelRecordsUnreadableRunTheTask: a broker that fails the look-up
// does not stop the fleet's work.
func TestCancelRecordsUnreadableRunTheTask(t *testing.T) {
	b := failingRetainer{newBroker(t)}
	runner := &countingRunner{Runner: newRuntime(t)}
	startWorker(t, worker.Config{Broker: b, Runner: runner, Heartbeat: -1})
	in := newInbox(t, b, "pub")
	publishTask(t, b, fleetwire.Envelope{TaskID: "t", RunID: "run-1", TraceID: "x", Agent: "echo", ReplyTo: in.subject})
	if r := in.next(t).Result; !r.Success || runner.runs.Load() != 1 {
		t.Fatalf("task with the cancel records unreadable: %+v (runs %d)", r, runner.runs.Load())
	}
}

// refusingResults is a broker that refuses every result with a permanent
// error (a result larger than the broker carries, say) and records each
// try, and whether the worker's dead-letter result was among them.
type refusingResults struct {
	svc.Broker
	tries      atomic.Int32
	deadLetter atomic.Bool
}

func (b *refusingResults) Publish(ctx context.Context, subject string, data []byte) error {
	if !strings.HasPrefix(subject, fleetwire.ResultSubject("")) {
		return b.Broker.Publish(ctx, subject, data)
	}
	b.tries.Add(1)
	if env, err := fleetwire.Decode(data); err == nil && env.Result != nil && env.Result.Error != nil &&
		env.Result.Error.Reason == "dead_letter" {
		b.deadLetter.Store(true)
	}
	return svc.PermanentBrokerError("testbroker", "publish", errors.New("message too large"))
}

// A result the broker refuses permanently is not tried again for
// resultPublishTimeout: the task goes back at once (here, with one
// delivery allowed, to the dead letter, whose failed result is tried once
// too).
func TestPermanentReplyFailureIsNotRetried(t *testing.T) {
	b := &refusingResults{Broker: newBroker(t)}
	startWorker(t, worker.Config{Broker: b, Runner: newRuntime(t), Heartbeat: -1, MaxDeliver: 1})
	publishTask(t, b.Broker, fleetwire.Envelope{TaskID: "t1", RunID: "r1", Agent: "echo", ReplyTo: fleetwire.ResultSubject("pub")})
	testutil.Within(t, time.Minute, "the dead-letter result", b.deadLetter.Load)
	if n := b.tries.Load(); n != 2 {
		t.Errorf("results tried %d times, want 2 (the task's, the dead letter's)", n)
	}
}

// panicsCounted is a broker client that has recovered panics of its
// handlers (svc.PanicCounter).
type panicsCounted struct{ svc.Broker }

func (panicsCounted) HandlerPanics() int64 { return 3 }

// The panics the worker's broker client recovered reach the fleet view in
// the heartbeat.
func TestHeartbeatCarriesHandlerPanics(t *testing.T) {
	rec := &recorder{}
	startWorker(t, worker.Config{Broker: panicsCounted{newBroker(t)}, Runner: newRuntime(t), Heartbeat: 20 * time.Millisecond, Emitter: rec})
	testutil.Eventually(t, "a worker_heartbeat with handler_panics = 3", func() bool {
		for _, ev := range rec.of(svc.EventWorkerHeartbeat) {
			if n, _ := ev.Payload["handler_panics"].(int64); n == 3 {
				return true
			}
		}
		return false
	})
}

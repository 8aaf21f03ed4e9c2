package dispatch_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/broker"
	"github.com/svc-dev/svc/broker/membroker"
	"github.com/svc-dev/svc/dispatch"
	"github.com/svc-dev/svc/emitters/bridge"
	"github.com/svc-dev/svc/fleetwire"
	"github.com/svc-dev/svc/internal/servertest"
	"github.com/svc-dev/svc/internal/testutil"
	"github.com/svc-dev/svc/worker"
)

// The bridge relays a task's deltas for the worker.
var _ worker.DeltaRelayer = (*bridge.Bridge)(nil)

// deltaSpy is a worker's broker client that counts the agent_delta events
// the worker broadcasts: what went over the broker.
type deltaSpy struct {
	svc.Broker
	mu     sync.Mutex
	deltas int
}

func (s *deltaSpy) Broadcast(ctx context.Context, subject string, data []byte) error {
	if strings.HasPrefix(subject, "svc.events.") {
		if evs, err := bridge.Decode(data); err == nil {
			s.mu.Lock()
			for _, ev := range evs {
				if ev.EventType == svc.EventAgentDelta {
					s.deltas++
				}
			}
			s.mu.Unlock()
		}
	}
	return s.Broker.Broadcast(ctx, subject, data)
}

func (s *deltaSpy) sent() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deltas
}

// writerAnswer is what the writer agent streams, word by word.
const writerAnswer = "one two three four five six seven eight"

// writer streams writerAnswer a word every 20 ms, after 300 ms (time for
// a follower to come), unless its model_settings say otherwise.
func writer(settings map[string]any) svc.Agent {
	ms := map[string]any{"output": writerAnswer, "latency_ms": 300, "stream_interval_ms": 20}
	for k, v := range settings {
		ms[k] = v
	}
	return svc.Agent{Name: "writer", Model: "test:echo", ModelSettings: ms}
}

// TestFleetDeltas: over real brokers (embedded-style NATS, redis-server),
// a run on the publisher that reads its streamed answer gets the worker's
// deltas: a submitted run's followers get them before the run completes,
// in order, making the answer; a synchronous run with a DeltaSink gets
// them all before its result; with PublishEvents the publisher's emitter
// sees each once, as the plain agent_delta event. A run nobody reads
// makes the worker send no delta over the broker.
func TestFleetDeltas(t *testing.T) {
	for name, start := range map[string]func(testing.TB) string{"nats": servertest.NATS, "redis": servertest.Redis} {
		t.Run(name, func(t *testing.T) {
			url := start(t)
			open := func() svc.Broker {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				b, err := broker.Open(ctx, url, broker.Options{Logger: zaptest.NewLogger(t)})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = b.Close() })
				return b
			}
			spy := &deltaSpy{Broker: open()}
			var workerRec recorder
			_, br := bridgedWorker(t, spy, &workerRec, writer(nil))
			var pubRec recorder
			rt, _ := publisherRuntime(t, dispatch.Config{Broker: open(), Emitter: &pubRec, PublishEvents: true}, writer(nil))
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()

			// Nobody reads: no deltas on the broker.
			res, err := rt.Run(ctx, "writer", svc.TaskSpec{ID: "quiet", Input: json.RawMessage(`"x"`)})
			if err != nil || !res.Success || string(res.Output) != `"`+writerAnswer+`"` {
				t.Fatalf("run nobody reads: %+v %v", res, err)
			}
			if n := spy.sent(); n != 0 {
				t.Errorf("the worker sent %d deltas of a run nobody reads", n)
			}
			if n := pubRec.count(svc.EventAgentDelta); n != 0 {
				t.Errorf("the publisher's emitter got %d deltas of a run nobody reads", n)
			}

			// A submitted run, followed.
			id, err := rt.Submit(ctx, svc.SubmitRequest{Target: "writer", Task: svc.TaskSpec{ID: "followed", Input: json.RawMessage(`"x"`)}})
			if err != nil {
				t.Fatal(err)
			}
			events, err := rt.RunEventsWithDeltas(ctx, id, 0)
			if err != nil {
				t.Fatal(err)
			}
			var text strings.Builder
			var deltas int
			completed := false
			for ev := range events {
				switch ev.Type {
				case svc.RunDelta:
					if completed {
						t.Errorf("a delta after the run completed: %+v", ev)
					}
					if ev.Agent != "writer" || ev.TaskID != "followed" {
						t.Errorf("delta %+v: want writer's, of task followed", ev)
					}
					deltas++
					text.WriteString(ev.Text)
				case svc.RunAgentCompleted:
					completed = true
				}
			}
			out, err := rt.RunResult(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			var got svc.AgentResult
			if err := json.Unmarshal(out, &got); err != nil || string(got.Output) != `"`+writerAnswer+`"` {
				t.Fatalf("run result %s: %v", out, err)
			}
			if !completed || text.String() != writerAnswer || deltas < 2 {
				t.Errorf("followed run: %d deltas before completing (%v) make %q, want several making %q",
					deltas, completed, text.String(), writerAnswer)
			}

			// A synchronous run read as it streams: every delta before the
			// result, each once on the publisher's emitter.
			before := pubRec.count(svc.EventAgentDelta)
			var mu sync.Mutex
			var sinkText strings.Builder
			var sinkN int
			sctx := svc.WithDeltas(ctx, svc.DeltaFunc(func(d svc.Delta) {
				mu.Lock()
				defer mu.Unlock()
				if d.Index != sinkN || d.Agent != "writer" || d.TaskID != "read" || d.SpanID == "" || d.ParentSpanID == "" {
					t.Errorf("delta %d: %+v", sinkN, d)
				}
				sinkN++
				sinkText.WriteString(d.Text)
			}))
			res, err = rt.Run(sctx, "writer", svc.TaskSpec{ID: "read", Input: json.RawMessage(`"x"`)})
			if err != nil || !res.Success {
				t.Fatalf("run read as it streams: %+v %v", res, err)
			}
			mu.Lock()
			if sinkText.String() != writerAnswer {
				t.Errorf("%d deltas before the result make %q, want %q", sinkN, sinkText.String(), writerAnswer)
			}
			n := sinkN
			mu.Unlock()
			testutil.Eventually(t, "the deltas on the publisher's emitter", func() bool { return pubRec.count(svc.EventAgentDelta)-before >= n })
			time.Sleep(100 * time.Millisecond) // a duplicate would come now
			pubRec.mu.Lock()
			var relayed strings.Builder
			for _, ev := range pubRec.evs[:] {
				if ev.EventType != svc.EventAgentDelta || ev.TaskID != "read" {
					continue
				}
				if _, tagged := ev.Payload[bridge.DeltaDispatch]; tagged || len(ev.Payload) != 2 {
					t.Errorf("agent_delta on the publisher's emitter has payload %v, want text and index only", ev.Payload)
				}
				relayed.WriteString(ev.Payload["text"].(string))
			}
			pubRec.mu.Unlock()
			if relayed.String() != writerAnswer {
				t.Errorf("the publisher's emitter got deltas making %q, want each once making %q", relayed.String(), writerAnswer)
			}
			if d := br.DeltasDropped(); d != 0 {
				t.Errorf("the bridge dropped %d deltas", d)
			}
		})
	}
}

// TestFleetDeltasWithoutEvents: a publisher that does not ask for its
// tasks' events still gets the deltas of a run that reads them, and its
// emitter gets none of them (nor any other event of the worker's).
func TestFleetDeltasWithoutEvents(t *testing.T) {
	b := servertest.NATS(t)
	open := func() svc.Broker {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		br, err := broker.Open(ctx, b, broker.Options{Logger: zaptest.NewLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = br.Close() })
		return br
	}
	var workerRec recorder
	bridgedWorker(t, open(), &workerRec, writer(nil))
	var pubRec recorder
	rt, p := publisherRuntime(t, dispatch.Config{Broker: open(), Emitter: &pubRec}, writer(nil))
	var text strings.Builder
	var mu sync.Mutex
	ctx := svc.WithDeltas(t.Context(), svc.DeltaFunc(func(d svc.Delta) {
		mu.Lock()
		text.WriteString(d.Text)
		mu.Unlock()
	}))
	res, err := rt.Run(ctx, "writer", svc.TaskSpec{ID: "read", Input: json.RawMessage(`"x"`)})
	if err != nil || !res.Success {
		t.Fatalf("%+v %v", res, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if text.String() != writerAnswer {
		t.Errorf("deltas make %q, want %q", text.String(), writerAnswer)
	}
	if n := pubRec.count(svc.EventAgentDelta) + pubRec.count(svc.EventAgentSpawned); n != 0 || p.Relayed() != 0 {
		t.Errorf("a publisher without PublishEvents fed %d relayed events (%d deltas or spawns) to its emitter", p.Relayed(), n)
	}
}

// TestDispatchWaitsForDeltas: the deltas of a task travel apart from its
// result, so a result that overtakes them is held back (up to
// dispatch.DeltaWait) until the delta_count deltas it announces reached
// the listener. A hand-made worker answers at once and
// relays its two deltas afterwards.
func TestDispatchWaitsForDeltas(t *testing.T) {
	b := membroker.New()
	t.Cleanup(func() { _ = b.Close() })
	p := publisher(t, b, nil)
	sub, err := b.Subscribe(context.Background(), fleetwire.TaskSubject("w"), svc.SubscribeOptions{Group: "g"},
		func(ctx context.Context, d *svc.Delivery) {
			_ = d.Ack(ctx)
			env, err := fleetwire.Decode(d.Data)
			if err != nil || !env.Deltas {
				t.Errorf("task %s: %v; want one asking for deltas", d.Data, err)
				return
			}
			res := fleetwire.Envelope{Kind: fleetwire.MsgResult, TaskID: env.TaskID, SpanID: env.SpanID, Attempt: env.Attempt,
				Result: &svc.AgentResult{AgentName: "w", TaskID: env.TaskID, Success: true, Output: json.RawMessage(`"ab"`)}, DeltaCount: 2}
			data, _ := res.Encode()
			if err := b.Publish(ctx, env.ReplyTo, data); err != nil {
				t.Error(err)
			}
			time.Sleep(200 * time.Millisecond) // the result is taken by now
			key := fleetwire.DispatchKey(env.SpanID, env.Attempt)
			var evs []svc.RuntimeEvent
			for i, text := range []string{"a", "b"} {
				evs = append(evs, svc.RuntimeEvent{EventType: svc.EventAgentDelta, AgentName: "w", TaskID: env.TaskID, SpanID: "s",
					Payload: svc.Payload{"text": text, "index": i, bridge.DeltaDispatch: key}})
			}
			msg, _ := bridge.Encode(evs)
			if err := b.Broadcast(ctx, fleetwire.EventSubject(p.RuntimeID()), msg); err != nil {
				t.Error(err)
			}
		})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Stop() })

	var mu sync.Mutex
	var got []svc.Delta
	res, err := p.Dispatch(t.Context(), dispatch.Request{Agent: "w", TaskID: "t", Input: json.RawMessage(`1`),
		Deltas: svc.DeltaFunc(func(d svc.Delta) { mu.Lock(); got = append(got, d); mu.Unlock() })})
	if err != nil || !res.Success {
		t.Fatalf("%+v %v", res, err)
	}
	mu.Lock()
	if len(got) != 2 || got[0].Text != "a" || got[1].Index != 1 || got[1].Text != "b" || got[0].TaskID != "t" {
		t.Errorf("deltas when Dispatch returned: %+v, want a and b", got)
	}
	mu.Unlock()
}

package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/agent"
)

// deltaLog is a DeltaSink that keeps what it gets.
type deltaLog struct {
	mu     sync.Mutex
	deltas []svc.Delta
	deaf   bool // Listening reports false
}

func (l *deltaLog) Delta(d svc.Delta) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.deltas = append(l.deltas, d)
}

func (l *deltaLog) Listening() bool { return !l.deaf }

func (l *deltaLog) get() []svc.Delta {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]svc.Delta(nil), l.deltas...)
}

func joined(ds []svc.Delta) string {
	var b strings.Builder
	for _, d := range ds {
		b.WriteString(d.Text)
	}
	return b.String()
}

const streamed = "the quick brown fox jumps"

// streamingAgent answers streamed with the test model, settings merged in.
func streamingAgent(t *testing.T, settings map[string]any, opts ...agent.CompileOption) *agent.Compiled {
	t.Helper()
	ms := map[string]any{"output": streamed}
	for k, v := range settings {
		ms[k] = v
	}
	c, err := agent.Compile(svc.Agent{Name: "writer", Model: "test:echo", ModelSettings: ms}, registry(nil), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func deltaEvents(evs []svc.RuntimeEvent) []svc.RuntimeEvent {
	var out []svc.RuntimeEvent
	for _, ev := range evs {
		if ev.EventType == svc.EventAgentDelta {
			out = append(out, ev)
		}
	}
	return out
}

// A listener gets the answer's text, fragment by fragment, in order and
// numbered, and so does the emitter, as agent_delta events of the
// invocation's span; the result is the same as without a stream.
func TestDeltasReachListenerAndEmitter(t *testing.T) {
	c := streamingAgent(t, nil)
	var em events
	var sink deltaLog
	inv := &agent.Invocation{Agent: c, Input: json.RawMessage(`"x"`), Emitter: agent.WithDeltaSink(&em, &sink), TaskID: "t1", TraceID: "tr", SpanID: "sp"}
	out, err := agent.Run(t.Context(), inv)
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := json.Marshal(streamed); string(out.Output) != string(want) {
		t.Errorf("output %s, want %s", out.Output, want)
	}
	ds := sink.get()
	if len(ds) != 5 || joined(ds) != streamed {
		t.Fatalf("deltas %+v: want the 5 words of %q", ds, streamed)
	}
	for i, d := range ds {
		if d.Index != i || d.Agent != "writer" || d.TaskID != "t1" || d.SpanID != "sp" || d.TraceID != "tr" {
			t.Errorf("delta %d = %+v", i, d)
		}
	}
	evs := deltaEvents(em.get())
	if len(evs) != len(ds) {
		t.Fatalf("%d agent_delta events for %d deltas", len(evs), len(ds))
	}
	for i, ev := range evs {
		if ev.Payload["text"] != ds[i].Text || ev.Payload["index"] != i || ev.SpanID != "sp" || ev.AgentName != "writer" {
			t.Errorf("event %d = %+v", i, ev)
		}
		if len(ev.Payload) != len(svc.PayloadKeys[svc.EventAgentDelta]) {
			t.Errorf("event %d payload %v: want exactly %v", i, ev.Payload, svc.PayloadKeys[svc.EventAgentDelta])
		}
	}
}

// Without a listener nothing streams, unless the agent says stream: true;
// stream: false wins over a listener.
func TestStreamSetting(t *testing.T) {
	cases := []struct {
		name     string
		settings map[string]any
		sink     *deltaLog
		want     bool
	}{
		{"nobody listens", nil, nil, false},
		{"a deaf sink", nil, &deltaLog{deaf: true}, false},
		{"stream true", map[string]any{"stream": true}, nil, true},
		{"stream false", map[string]any{"stream": false}, &deltaLog{}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var em events
			var emitter svc.Emitter = &em
			if tc.sink != nil {
				emitter = agent.WithDeltaSink(&em, tc.sink)
			}
			if _, err := agent.Run(t.Context(), &agent.Invocation{Agent: streamingAgent(t, tc.settings), Input: json.RawMessage(`1`), Emitter: emitter}); err != nil {
				t.Fatal(err)
			}
			if got := len(deltaEvents(em.get())) > 0; got != tc.want {
				t.Errorf("streamed %v, want %v", got, tc.want)
			}
		})
	}
	if _, err := agent.Compile(svc.Agent{Name: "a", Model: "test:echo", ModelSettings: map[string]any{"stream": "yes"}}, registry(nil)); err == nil ||
		!strings.Contains(err.Error(), "model_settings.stream") {
		t.Errorf("stream: yes compiled: %v", err)
	}
}

// Coalescing by bytes: the first fragment goes at once, then fragments
// wait until Bytes have gathered; the call's end hands on the rest.
func TestCoalesceBytes(t *testing.T) {
	c := streamingAgent(t, nil, agent.WithCoalesce(agent.Coalesce{Interval: time.Hour, Bytes: 10}))
	var sink deltaLog
	if _, err := agent.Run(t.Context(), &agent.Invocation{Agent: c, Input: json.RawMessage(`1`), Emitter: agent.WithDeltaSink(nil, &sink)}); err != nil {
		t.Fatal(err)
	}
	ds := sink.get()
	if joined(ds) != streamed {
		t.Fatalf("deltas %+v do not make %q", ds, streamed)
	}
	// "the " at once; "quick brown " (12 bytes); "fox jumps" at the end.
	want := []string{"the ", "quick brown ", "fox jumps"}
	if len(ds) != len(want) {
		t.Fatalf("deltas %+v, want %q", ds, want)
	}
	for i, d := range ds {
		if d.Text != want[i] || d.Index != i {
			t.Errorf("delta %d = %+v, want %q", i, d, want[i])
		}
	}
}

// Coalescing by time: fragments that come faster than the interval are
// handed on together by the timer, not one by one.
func TestCoalesceInterval(t *testing.T) {
	// 5 words 20 ms apart, gathered for 200 ms: the first at once, the rest
	// (80 ms of words) in one or two more deltas, never five.
	c := streamingAgent(t, map[string]any{"stream_interval_ms": 20}, agent.WithCoalesce(agent.Coalesce{Interval: 200 * time.Millisecond}))
	var sink deltaLog
	if _, err := agent.Run(t.Context(), &agent.Invocation{Agent: c, Input: json.RawMessage(`1`), Emitter: agent.WithDeltaSink(nil, &sink)}); err != nil {
		t.Fatal(err)
	}
	ds := sink.get()
	if joined(ds) != streamed || ds[0].Text != "the " || len(ds) > 3 {
		t.Errorf("deltas %+v: want %q in at most 3, the first word alone", ds, streamed)
	}
}

// A model that fails after streaming part of an answer: the fallback's
// answer starts again at index 0, which tells listeners to drop the text
// they have.
func TestFailedStreamRestartsIndex(t *testing.T) {
	broken := svc.ModelFunc(func(ctx context.Context, req svc.ModelRequest) (svc.ModelResponse, error) {
		req.OnDelta("half an ")
		req.OnDelta("answ")
		return svc.ModelResponse{}, &svc.Error{Kind: svc.KindModel, Reason: "server_error", Message: "stream broke", Err: errors.New("boom")}
	})
	c, err := agent.Compile(svc.Agent{Name: "a", Model: "fake:broken", FallbackModels: []string{"test:echo"},
		ModelSettings: map[string]any{"output": "whole"}}, registry(map[string]svc.Model{"broken": broken}))
	if err != nil {
		t.Fatal(err)
	}
	var sink deltaLog
	if _, err := agent.Run(t.Context(), &agent.Invocation{Agent: c, Input: json.RawMessage(`1`), Emitter: agent.WithDeltaSink(nil, &sink)}); err != nil {
		t.Fatal(err)
	}
	ds := sink.get()
	if len(ds) < 2 || ds[0].Index != 0 || ds[len(ds)-1].Index != 0 || ds[len(ds)-1].Text != "whole" {
		t.Errorf("deltas %+v: want the broken model's text from index 0, then the fallback's from index 0 again", ds)
	}
}

package providers_test

import (
	"encoding/json"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/agent"
	"github.com/svc-dev/svc/llmsim"
	"github.com/svc-dev/svc/model"
	"github.com/svc-dev/svc/model/providers"
)

// deltaLog is a DeltaSink that keeps what it gets.
type deltaLog struct {
	mu     sync.Mutex
	deltas []svc.Delta
}

func (l *deltaLog) Delta(d svc.Delta) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.deltas = append(l.deltas, d)
}

func (l *deltaLog) Listening() bool { return true }

func (l *deltaLog) get() []svc.Delta {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]svc.Delta(nil), l.deltas...)
}

// lastAnswer is the text a dashboard shows: the deltas from the last
// index 0 on.
func lastAnswer(ds []svc.Delta) string {
	start := 0
	for i, d := range ds {
		if d.Index == 0 {
			start = i
		}
	}
	var b strings.Builder
	for _, d := range ds[start:] {
		b.WriteString(d.Text)
	}
	return b.String()
}

func startSim(t *testing.T, sc *llmsim.Scenario) *llmsim.Server {
	t.Helper()
	return startSimWith(t, llmsim.Config{Scenario: sc})
}

// startSimWith starts llmsim with cfg on a free port; it stops with the
// test.
func startSimWith(t *testing.T, cfg llmsim.Config) *llmsim.Server {
	t.Helper()
	sim := llmsim.New(cfg)
	if err := sim.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	// Idle keep-alive connections of the shared transports would outlive
	// the simulator; closing them keeps the next test's goroutine count
	// honest.
	t.Cleanup(func() {
		if tr, ok := http.DefaultTransport.(*http.Transport); ok {
			tr.CloseIdleConnections()
		}
	})
	return sim
}

// An agent on a real provider, streamed, through agent.Run: the listener
// gets the answer's text; a second identical run reads the cached prompt,
// reports it as cached tokens and costs less, by the table's cached price.
func TestAgentStreamsAndCachesThroughProviders(t *testing.T) {
	sim := startSim(t, nil)
	prices := model.NewPriceTable(map[string]model.Price{
		"openai:gpt-4o-mini":         {InputPerMTok: 1, CachedInputPerMTok: 0.1, OutputPerMTok: 2},
		"anthropic:claude-haiku-4-5": {InputPerMTok: 1, CachedInputPerMTok: 0.1, OutputPerMTok: 2},
	})
	for _, c := range []struct {
		model    string
		settings map[string]any
	}{
		{"openai:gpt-4o-mini", map[string]any{"base_url": sim.URL() + "/v1"}},
		{"anthropic:claude-haiku-4-5", map[string]any{"base_url": sim.URL(), "api_key": "sk-test", "prompt_cache": true}},
	} {
		t.Run(c.model, func(t *testing.T) {
			c.settings["stream"] = true
			a := svc.Agent{Name: "writer", Model: c.model, ModelSettings: c.settings,
				Instructions: strings.Repeat("You answer with the very words you were given. ", 200)}
			comp, err := agent.Compile(a, providers.Default(), agent.WithPrices(&prices))
			if err != nil {
				t.Fatal(err)
			}
			run := func() (agent.Outcome, []svc.Delta) {
				var sink deltaLog
				out, err := agent.Run(t.Context(), &agent.Invocation{Agent: comp, Input: json.RawMessage(`"the quick brown fox jumps over"`),
					Emitter: agent.WithDeltaSink(nil, &sink)})
				if err != nil {
					t.Fatal(err)
				}
				return out, sink.get()
			}
			first, ds := run()
			if string(first.Output) != `"the quick brown fox jumps over"` {
				t.Fatalf("output %s", first.Output)
			}
			if len(ds) == 0 || lastAnswer(ds) != "the quick brown fox jumps over" {
				t.Errorf("deltas %+v, want the answer's text", ds)
			}
			second, _ := run()
			if first.CachedTokens != 0 || second.CachedTokens < 1000 {
				t.Fatalf("cached tokens %d, then %d: want 0, then the instructions", first.CachedTokens, second.CachedTokens)
			}
			saved := float64(second.CachedTokens) * (1 - 0.1) / 1e6
			if math.Abs(first.CostUSD-second.CostUSD-saved) > 1e-12 || second.TokensUsed != first.TokensUsed {
				t.Errorf("cost %.9f then %.9f (tokens %d, %d), want the second cheaper by %.9f", first.CostUSD, second.CostUSD,
					first.TokensUsed, second.TokensUsed, saved)
			}
		})
	}
}

// A stream that stalls after some text fails the call with a timeout
// (stream_idle_timeout_ms) and the agent falls back; the fallback's text
// starts again at index 0, so a listener that keeps the text from the
// last index 0 shows the answer, not the broken call's text before it.
func TestAgentFallsBackAfterStalledStream(t *testing.T) {
	sim := startSim(t, &llmsim.Scenario{Rules: []llmsim.Rule{
		{Match: llmsim.Match{Model: "gpt-stalls"}, Reply: llmsim.Reply{Text: "a broken answer that stops half way through"}, StallAfterTokens: 3},
	}})
	a := svc.Agent{Name: "writer", Model: "openai:gpt-stalls", FallbackModels: []string{"openai:gpt-4o-mini"},
		ModelSettings: map[string]any{"base_url": sim.URL() + "/v1", "stream": true, "stream_idle_timeout_ms": 300, "max_retries": 0}}
	comp, err := agent.Compile(a, providers.Default())
	if err != nil {
		t.Fatal(err)
	}
	var sink deltaLog
	out, err := agent.Run(t.Context(), &agent.Invocation{Agent: comp, Input: json.RawMessage(`"hello there friend"`),
		Emitter: agent.WithDeltaSink(nil, &sink)})
	if err != nil {
		t.Fatal(err)
	}
	if out.Model != "openai:gpt-4o-mini" || string(out.Output) != `"hello there friend"` {
		t.Fatalf("answered by %s: %s", out.Model, out.Output)
	}
	ds := sink.get()
	if len(ds) < 2 || ds[0].Index != 0 || !strings.HasPrefix("a broken answer", ds[0].Text) {
		t.Fatalf("deltas %+v: want the stalled call's text first", ds)
	}
	if got := lastAnswer(ds); got != "hello there friend" {
		t.Errorf("text from the last index 0: %q (deltas %+v)", got, ds)
	}
}

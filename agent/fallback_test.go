package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/agent"
	"github.com/svc-dev/svc/model"
)

func providerErr(class model.Class, status int) *model.ProviderError {
	return &model.ProviderError{Provider: "fake", Model: "m", Status: status, Class: class, Message: string(class) + " happened"}
}

// Fallback models are tried only after failures another model could get
// past: rate limits, overload, server errors, timeouts. An invalid request
// or a bad key ends the invocation at once.
func TestFallbackByErrorClass(t *testing.T) {
	tests := []struct {
		class     model.Class
		status    int
		fallsBack bool
	}{
		{model.ClassRateLimit, 429, true},
		{model.ClassOverloaded, 529, true},
		{model.ClassServer, 500, true},
		{model.ClassTimeout, 408, true},
		{model.ClassTimeout, 0, true},
		{model.ClassInvalid, 400, false},
		{model.ClassAuth, 401, false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s %d", tt.class, tt.status), func(t *testing.T) {
			log := &callLog{}
			perr := providerErr(tt.class, tt.status)
			// Wrapped the way a provider adapter might: the class must still
			// be found in the chain.
			models := map[string]svc.Model{
				"first":  &recorder{name: "first", log: log, fn: failing(fmt.Errorf("calling: %w", perr))},
				"second": &recorder{name: "second", log: log, fn: answer(`"second"`)},
				"third":  &recorder{name: "third", log: log, fn: answer(`"third"`)},
			}
			c := mustCompile(t, svc.Agent{Name: "fb", Model: "fake:first", FallbackModels: []string{"fake:second", "fake:third"}}, models)
			out, err := agent.Run(context.Background(), invocation(c, `"x"`))
			if tt.fallsBack {
				if err != nil || string(out.Output) != `"second"` || out.Model != "fake:second" {
					t.Fatalf("Run = %+v, %v; want the second model's answer", out, err)
				}
				if got := log.get(); !slices.Equal(got, []string{"first", "second"}) {
					t.Errorf("models called %q", got)
				}
				if !slices.Equal(out.ModelsTried, []string{"fake:first", "fake:second"}) {
					t.Errorf("ModelsTried = %q", out.ModelsTried)
				}
				return
			}
			se := kindAndReason(t, err, svc.KindModel, agent.ReasonModelError)
			if got := log.get(); !slices.Equal(got, []string{"first"}) {
				t.Errorf("models called %q, want only the first", got)
			}
			if !slices.Equal(out.ModelsTried, []string{"fake:first"}) || out.ModelCalls != 1 || out.Model != "" {
				t.Errorf("Outcome = %+v", out)
			}
			var pe *model.ProviderError
			if !errors.As(err, &pe) || pe != perr {
				t.Errorf("the provider error is not in the chain of %v", err)
			}
			if !strings.Contains(se.Message, "1 of 3 models failed") || !strings.Contains(err.Error(), "not tried") {
				t.Errorf("error %q should say the fallbacks were not tried", err)
			}
		})
	}
}

// A later model's non-fallback failure stops the chain there too, and a
// chain that runs out is a ModelError listing every model tried.
func TestFallbackChainStops(t *testing.T) {
	log := &callLog{}
	models := map[string]svc.Model{
		"busy":   &recorder{name: "busy", log: log, fn: failing(providerErr(model.ClassOverloaded, 503))},
		"badkey": &recorder{name: "badkey", log: log, fn: failing(providerErr(model.ClassAuth, 403))},
		"ok":     &recorder{name: "ok", log: log, fn: answer(`1`)},
	}
	c := mustCompile(t, svc.Agent{Name: "fb", Model: "fake:busy", FallbackModels: []string{"fake:badkey", "fake:ok"}}, models)
	out, err := agent.Run(context.Background(), invocation(c, `1`))
	kindAndReason(t, err, svc.KindModel, agent.ReasonModelError)
	if got := log.get(); !slices.Equal(got, []string{"busy", "badkey"}) {
		t.Errorf("models called %q", got)
	}
	if !slices.Equal(out.ModelsTried, []string{"fake:busy", "fake:badkey"}) {
		t.Errorf("ModelsTried = %q", out.ModelsTried)
	}
	if !strings.Contains(err.Error(), "2 of 3 models failed") {
		t.Errorf("error = %v", err)
	}

	log = &callLog{}
	models = map[string]svc.Model{
		"a": &recorder{name: "a", log: log, fn: failing(providerErr(model.ClassRateLimit, 429))},
		"b": &recorder{name: "b", log: log, fn: failing(providerErr(model.ClassServer, 502))},
	}
	c = mustCompile(t, svc.Agent{Name: "fb", Model: "fake:a", FallbackModels: []string{"fake:b"}}, models)
	out, err = agent.Run(context.Background(), invocation(c, `1`))
	kindAndReason(t, err, svc.KindModel, agent.ReasonModelError)
	if !strings.Contains(err.Error(), "all 2 models failed") || !slices.Equal(out.ModelsTried, []string{"fake:a", "fake:b"}) {
		t.Errorf("err = %v, tried %q", err, out.ModelsTried)
	}
	if kind := svc.KindOf(err); kind != svc.KindModel {
		t.Errorf("kind %s, want ModelError (HTTP 502)", kind)
	}
}

// ModelsTried is the primary alone when it answers, and every model called
// otherwise, even across turns.
func TestModelsTried(t *testing.T) {
	c := mustCompile(t, svc.Agent{Name: "a", Model: "test:echo", FallbackModels: []string{"test:fail"}}, nil)
	out, err := agent.Run(context.Background(), invocation(c, `1`))
	if err != nil || !slices.Equal(out.ModelsTried, []string{"test:echo"}) {
		t.Fatalf("Run = %+v, %v", out, err)
	}
	// It shares the agent's list; an append must copy, not write into it.
	if cap(out.ModelsTried) != len(out.ModelsTried) {
		t.Errorf("ModelsTried has spare capacity %d: an append would overwrite the agent's models", cap(out.ModelsTried))
	}

	// A budget that refuses before the first call: nothing was tried.
	c = mustCompile(t, svc.Agent{Name: "a", Model: "test:echo"}, nil)
	inv := invocation(c, `1`)
	inv.Budget = &budget{reserveErr: svc.Errorf(svc.KindBudgetExceeded, "no"), failAt: 1}
	out, err = agent.Run(context.Background(), inv)
	if !errors.Is(err, svc.ErrBudgetExceeded) || out.ModelsTried != nil {
		t.Fatalf("Run = %+v, %v", out, err)
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-12 }

// cost_usd comes from the provider when it says, else from the price table
// by the resolved model id and the call's tokens; a model without a price
// costs 0 and the outcome says the cost is unknown.
func TestCostFromPrices(t *testing.T) {
	tokens := func(in, out int64, cost float64) svc.Model {
		return svc.ModelFunc(func(context.Context, svc.ModelRequest) (svc.ModelResponse, error) {
			return svc.ModelResponse{Output: json.RawMessage(`1`), InputTokens: in, OutputTokens: out, CostUSD: cost}, nil
		})
	}
	prices := model.NewPriceTable(map[string]model.Price{
		"fake:priced": {InputPerMTok: 2, OutputPerMTok: 10},
		"test:*":      {},
	})
	models := map[string]svc.Model{
		"priced":          tokens(1_000_000, 100_000, 0),
		"priced-20250101": tokens(1_000_000, 100_000, 0),
		"billed":          tokens(1_000_000, 100_000, 0.125), // the provider's own figure wins
		"unknown":         tokens(1_000_000, 100_000, 0),
	}
	tests := []struct {
		model       string
		want        float64
		wantUnknown bool
	}{
		{"fake:priced", 2 + 1, false},
		{"fake:priced-20250101", 2 + 1, false}, // a snapshot, priced as its model
		{"fake:billed", 0.125, false},
		{"fake:unknown", 0, true},
		{"test:echo", 0, false},
	}
	for _, tt := range tests {
		c, err := agent.Compile(svc.Agent{Name: "a", Model: tt.model}, registry(models), agent.WithPrices(&prices))
		if err != nil {
			t.Fatal(err)
		}
		out, err := agent.Run(context.Background(), invocation(c, `"some words here"`))
		if err != nil {
			t.Fatal(err)
		}
		if !near(out.CostUSD, tt.want) || out.CostUnknown != tt.wantUnknown {
			t.Errorf("%s: CostUSD %v unknown %v, want %v %v", tt.model, out.CostUSD, out.CostUnknown, tt.want, tt.wantUnknown)
		}
	}

	// Without WithPrices the built-in table applies: gpt-4o-mini by its
	// real id, summed over a tool round's two calls.
	calls := 0
	m := svc.ModelFunc(func(context.Context, svc.ModelRequest) (svc.ModelResponse, error) {
		calls++
		if calls == 1 {
			r := callTool("noop", `{}`)
			r.InputTokens, r.OutputTokens = 1_000_000, 0
			return r, nil
		}
		return svc.ModelResponse{Output: json.RawMessage(`1`), InputTokens: 0, OutputTokens: 1_000_000}, nil
	})
	reg := registry(nil)
	reg.Register("openai", func(string) (svc.Model, error) { return m, nil })
	c, err := agent.Compile(svc.Agent{Name: "a", Model: "openai:gpt-4o-mini", Tools: []svc.Tool{constTool("noop", svc.AccessRead, `1`)}}, reg)
	if err != nil {
		t.Fatal(err)
	}
	out, err := agent.Run(context.Background(), invocation(c, `1`))
	if err != nil || !near(out.CostUSD, 0.15+0.60) || out.CostUnknown {
		t.Fatalf("default prices: %+v, %v", out, err)
	}
}

// A prompt too long for a model's window goes on only to a later model
// whose window is larger, skipping those no larger; with none, the
// invocation fails with a ContextError (400), not a ModelError.
func TestContextErrorFallsBackToWiderWindow(t *testing.T) {
	for id, w := range map[string]int{"fake:small": 8_000, "fake:same": 8_000, "fake:wide": 200_000} {
		model.ContextWindows[id] = w
		t.Cleanup(func() { delete(model.ContextWindows, id) })
	}
	tooLong := func() *model.ProviderError {
		return providerErr(model.ClassContext, 400)
	}
	t.Run("a wider model answers", func(t *testing.T) {
		log := &callLog{}
		models := map[string]svc.Model{
			"small": &recorder{name: "small", log: log, fn: failing(tooLong())},
			"same":  &recorder{name: "same", log: log, fn: answer(`"same"`)},
			"wide":  &recorder{name: "wide", log: log, fn: answer(`"wide"`)},
		}
		c := mustCompile(t, svc.Agent{Name: "ctx", Model: "fake:small", FallbackModels: []string{"fake:same", "fake:wide"}}, models)
		out, err := agent.Run(context.Background(), invocation(c, `"x"`))
		if err != nil || string(out.Output) != `"wide"` {
			t.Fatalf("Run = %+v, %v; want the wide model's answer", out, err)
		}
		if got := log.get(); !slices.Equal(got, []string{"small", "wide"}) {
			t.Errorf("models called %q: the one with the same window must be skipped", got)
		}
	})
	t.Run("no wider model", func(t *testing.T) {
		log := &callLog{}
		models := map[string]svc.Model{
			"small": &recorder{name: "small", log: log, fn: failing(tooLong())},
			"same":  &recorder{name: "same", log: log, fn: answer(`"same"`)},
		}
		c := mustCompile(t, svc.Agent{Name: "ctx", Model: "fake:small", FallbackModels: []string{"fake:same"}}, models)
		_, err := agent.Run(context.Background(), invocation(c, `"x"`))
		kindAndReason(t, err, svc.KindContext, agent.ReasonContextLength)
		if got := log.get(); !slices.Equal(got, []string{"small"}) {
			t.Errorf("models called %q", got)
		}
	})
	t.Run("the answering model overflows later", func(t *testing.T) {
		// The first turn calls a tool; the second turn's prompt (with the
		// tool's result) is too long for the model that answered.
		log := &callLog{}
		models := map[string]svc.Model{
			"small": &recorder{name: "small", log: log, fn: func(n int, _ svc.ModelRequest) (svc.ModelResponse, error) {
				if n == 0 {
					return svc.ModelResponse{ToolCalls: []svc.ToolCall{{ID: "1", Name: "big", Arguments: json.RawMessage(`{}`)}}}, nil
				}
				return svc.ModelResponse{}, tooLong()
			}},
			"wide": &recorder{name: "wide", log: log, fn: answer(`"wide"`)},
		}
		c := mustCompile(t, svc.Agent{Name: "ctx", Model: "fake:small", FallbackModels: []string{"fake:wide"},
			Tools: []svc.Tool{constTool("big", svc.AccessRead, `"lots"`)}}, models)
		out, err := agent.Run(context.Background(), invocation(c, `"x"`))
		if err != nil || string(out.Output) != `"wide"` {
			t.Fatalf("Run = %+v, %v; want the wide model's answer", out, err)
		}
		if got := log.get(); !slices.Equal(got, []string{"small", "small", "wide"}) {
			t.Errorf("models called %q", got)
		}
	})
}

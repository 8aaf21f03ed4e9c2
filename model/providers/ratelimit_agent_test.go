package providers_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/agent"
	"github.com/svc-dev/svc/llmsim"
	"github.com/svc-dev/svc/model/providers"
	"github.com/svc-dev/svc/ratelimit"
)

// rateLimitedRun runs calls agents on model id at once against an llmsim
// limited to 1,200 requests a minute, enforced over one second as hosted
// APIs do (20 at once), under set's limits, and returns how many runs
// failed, how many 429s the simulator sent (its requests beyond the
// answered calls: the SDKs' own retries of a 429 count too) and how long
// it took.
func rateLimitedRun(t *testing.T, id string, calls int, set *ratelimit.Set, settings map[string]any) (failed, refused int, took time.Duration) {
	t.Helper()
	sim := startSimWith(t, llmsim.Config{RPM: 1200, Window: time.Second})
	settings["base_url"] = sim.URL()
	if id == "openai:gpt-4o-mini" {
		settings["base_url"] = sim.URL() + "/v1"
		settings["max_retries"] = 0
	} else {
		settings["api_key"] = "sk-test" // the SDK's 2 retries stay on: the 429s they meet are counted at llmsim
	}
	a := svc.Agent{Name: "caller", Model: id, ModelSettings: settings}
	comp, err := agent.Compile(a, providers.Default(), agent.WithRateLimits(set))
	if err != nil {
		t.Fatal(err)
	}
	var nFailed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for i := range calls {
		wg.Go(func() {
			_, err := agent.Run(t.Context(), &agent.Invocation{Agent: comp, TraceID: fmt.Sprint("run-", i),
				Input: json.RawMessage(`"hello"`)})
			if err != nil {
				nFailed.Add(1)
			}
		})
	}
	wg.Wait()
	took = time.Since(start)
	requests := 0
	for _, n := range sim.Stats() {
		requests += n
	}
	failed = int(nFailed.Load())
	return failed, requests - (calls - failed), took
}

// Agents calling a rate-limited provider (llmsim: 1,200 requests a
// minute, enforced over one second, as hosted APIs do) all at once, with
// the client's own retries off: without flow control, most calls past the
// first second's 20 get a 429; with the limit declared (rate_limits,
// model_settings.rate_limit) the calls are paced and none is refused; with
// nothing declared, the learned limit of the key starts with a few calls
// at once, learns the limit from the first answer's rate-limit headers
// and paces the rest by it: fewer than 5 % are refused (issue 29's
// target for learning).
func TestAgentRateLimitedThroughProviders(t *testing.T) {
	const calls = 60
	const openai = "openai:gpt-4o-mini"
	none, _, _ := rateLimitedRun(t, openai, calls, nil, map[string]any{})
	if none < calls/3 {
		t.Fatalf("without flow control %d of %d calls were refused; the simulator's limit should refuse most past 20", none, calls)
	}
	declared := ratelimit.NewSet(map[string]svc.RateLimit{"sim": {RequestsPerMinute: 1200}}, ratelimit.Options{})
	t.Cleanup(declared.Close)
	paced, _, took := rateLimitedRun(t, openai, calls, declared, map[string]any{"rate_limit": "sim"})
	// 10 at once, then 20 a second: about 2.5 s for 60.
	if paced > 0 || took < 2*time.Second {
		t.Errorf("with the limit declared: %d of %d calls refused in %v; want none, paced over about 2.5 s", paced, calls, took)
	}
	if s := declared.Stats(); len(s) != 1 || s[0].Name != "sim" || s[0].Calls != calls {
		t.Errorf("declared limit's stats %+v", s)
	}
	learned := ratelimit.NewSet(nil, ratelimit.Options{})
	t.Cleanup(learned.Close)
	slowed, refused, _ := rateLimitedRun(t, openai, calls, learned, map[string]any{})
	if refused != slowed {
		t.Errorf("learned: %d runs failed, llmsim sent %d 429s; with no retries they are the same calls", slowed, refused)
	}
	if refused*20 >= calls {
		t.Errorf("with the learned limit %d of %d calls got a 429 (without flow control %d): want fewer than 5 %%", refused, calls, none)
	}
	st := learned.Stats()
	if len(st) != 1 || st[0].Throttled != uint64(slowed) || st[0].Limit.RequestsPerMinute != 1200 {
		t.Errorf("learned limit's stats %+v; want one key, 1,200 requests a minute learned from the headers, the %d 429s counted", st, slowed)
	}
	t.Logf("refused of %d calls: %d without flow control, %d with the limit declared (%v), %d learned", calls, none, paced, took.Round(time.Millisecond), refused)
}

// The same through the Anthropic SDK (anthropic-ratelimit-* headers,
// resets as RFC 3339 times), with the SDK's own retries on: the 429s they
// meet are counted at the simulator, and fewer than 5 % of the calls meet
// one; every run succeeds.
func TestAgentLearnsAnthropicRateLimit(t *testing.T) {
	const calls = 60
	learned := ratelimit.NewSet(nil, ratelimit.Options{})
	t.Cleanup(learned.Close)
	failed, refused, _ := rateLimitedRun(t, "anthropic:claude-haiku-4-5", calls, learned, map[string]any{})
	if failed > 0 || refused*20 >= calls {
		t.Errorf("with the learned limit %d of %d runs failed and llmsim sent %d 429s; want none failed, 429s fewer than 5 %% of calls", failed, calls, refused)
	}
	if st := learned.Stats(); len(st) != 1 || st[0].Limit.RequestsPerMinute != 1200 {
		t.Errorf("learned limit's stats %+v; want 1,200 requests a minute learned from the headers", st)
	}
	t.Logf("anthropic, learned: %d of %d calls got a 429", refused, calls)
}

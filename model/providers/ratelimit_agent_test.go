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

// Agents calling a rate-limited provider (llmsim: 1,200 requests a
// minute, enforced over one second, as hosted APIs do) all at once, with
// the client's own retries off: without flow control, most calls past the
// first second's 20 get a 429; with the limit declared (rate_limits,
// model_settings.rate_limit) the calls are paced and none is refused; with
// nothing declared, the learned limit of the key slows down at the first
// 429s and fewer are refused than without flow control.
func TestAgentRateLimitedThroughProviders(t *testing.T) {
	const calls = 60
	run := func(t *testing.T, set *ratelimit.Set, settings map[string]any) (refused int, took time.Duration) {
		sim := startSimWith(t, llmsim.Config{RPM: 1200, Window: time.Second})
		settings["base_url"] = sim.URL() + "/v1"
		settings["max_retries"] = 0
		a := svc.Agent{Name: "caller", Model: "openai:gpt-4o-mini", ModelSettings: settings}
		comp, err := agent.Compile(a, providers.Default(), agent.WithRateLimits(set))
		if err != nil {
			t.Fatal(err)
		}
		var failed atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for i := range calls {
			wg.Go(func() {
				_, err := agent.Run(t.Context(), &agent.Invocation{Agent: comp, TraceID: fmt.Sprint("run-", i),
					Input: json.RawMessage(`"hello"`)})
				if err != nil {
					failed.Add(1)
				}
			})
		}
		wg.Wait()
		return int(failed.Load()), time.Since(start)
	}
	none, _ := run(t, nil, map[string]any{})
	if none < calls/3 {
		t.Fatalf("without flow control %d of %d calls were refused; the simulator's limit should refuse most past 20", none, calls)
	}
	declared := ratelimit.NewSet(map[string]svc.RateLimit{"sim": {RequestsPerMinute: 1200}}, ratelimit.Options{})
	t.Cleanup(declared.Close)
	paced, took := run(t, declared, map[string]any{"rate_limit": "sim"})
	// 10 at once, then 20 a second: about 2.5 s for 60.
	if paced > 0 || took < 2*time.Second {
		t.Errorf("with the limit declared: %d of %d calls refused in %v; want none, paced over about 2.5 s", paced, calls, took)
	}
	if s := declared.Stats(); len(s) != 1 || s[0].Name != "sim" || s[0].Calls != calls {
		t.Errorf("declared limit's stats %+v", s)
	}
	learned := ratelimit.NewSet(nil, ratelimit.Options{})
	t.Cleanup(learned.Close)
	slowed, _ := run(t, learned, map[string]any{})
	if slowed >= none {
		t.Errorf("with the learned limit %d calls were refused, without flow control %d: want fewer", slowed, none)
	}
	st := learned.Stats()
	if len(st) != 1 || st[0].Throttled != uint64(slowed) {
		t.Errorf("learned limit's stats %+v; want one key, with the %d 429s counted", st, slowed)
	}
	t.Logf("refused of %d calls: %d without flow control, %d with the limit declared (%v), %d learned", calls, none, paced, took.Round(time.Millisecond), slowed)
}

package dashboard_test

// Cached input tokens from a provider's prompt cache to the usage view:
// an Anthropic agent with prompt_cache runs against llmsim through the
// real SDK in a real `svc serve`; the results' metadata.cached_tokens are
// summed by the event store into GET /usage's cached_tokens, which the
// usage view shows.

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/internal/testutil"
	"github.com/svc-dev/svc/llmsim"
)

type cachedTotals struct {
	TokensUsed   int64  `json:"tokens_used"`
	CachedTokens *int64 `json:"cached_tokens"` // nil: the key is missing
	Invocations  int64  `json:"invocations"`
}

type cachedAnswer struct {
	Total  cachedTotals            `json:"total"`
	Groups map[string]cachedTotals `json:"groups"`
}

// TestDashboardCachedTokens: the first call of an agent with prompt_cache
// writes the cache and the second reads it; /usage sums what the results
// report as cached by agent and by model (an agent without a cache counts
// 0, written out), and the usage view shows those figures in its Cached
// meter and columns.
func TestDashboardCachedTokens(t *testing.T) {
	t.Parallel()
	sim := llmsim.New(llmsim.Config{})
	if err := sim.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	const model = "anthropic:claude-haiku-4-5"
	agent := "version: 1\nname: cached\nmodel: " + model + "\ninstructions: " +
		strings.Repeat("Answer in one short sentence, politely and to the point. ", 20) +
		"\nmodel_settings: {base_url: \"" + sim.URL() + "\", api_key: sk-test, prompt_cache: true, max_tokens: 64}\n"
	a := startAppSpecs(t, map[string]string{"agents/cached.yaml": agent}, "")

	var cached int64
	for i, q := range []string{"first question", "second question"} {
		var res svc.AgentResult
		if st := api(t, a, "", http.MethodPost, "/agents/cached/run", fmt.Sprintf(`{"input":%q}`, q), &res); st != http.StatusOK || !res.Success {
			t.Fatalf("run %d: status %d, %+v", i, st, res)
		}
		if i == 0 && res.Metadata.CachedTokens != 0 {
			t.Fatalf("the first call read %d cached tokens; llmsim's cache was empty", res.Metadata.CachedTokens)
		}
		cached += res.Metadata.CachedTokens
	}
	if cached == 0 {
		t.Fatal("the second call with prompt_cache read no cached tokens")
	}
	if st := api(t, a, "", http.MethodPost, "/agents/echo/run", `{"input":{"text":"no cache here"}}`, nil); st != http.StatusOK {
		t.Fatalf("run echo: %d", st)
	}

	var byAgent, byModel cachedAnswer
	testutil.Within(t, wait, "the three completions to be stored", func() bool {
		api(t, a, "", http.MethodGet, "/usage?group_by=agent", "", &byAgent)
		return byAgent.Total.Invocations >= 3
	})
	api(t, a, "", http.MethodGet, "/usage?group_by=model", "", &byModel)
	for what, got := range map[string]*int64{
		"total": byAgent.Total.CachedTokens, "agent cached": byAgent.Groups["cached"].CachedTokens,
		"model " + model: byModel.Groups[model].CachedTokens, "model total": byModel.Total.CachedTokens,
	} {
		if got == nil || *got != cached {
			t.Errorf("/usage %s cached_tokens = %v, want %d (the results' metadata.cached_tokens)", what, got, cached)
		}
	}
	for what, got := range map[string]*int64{"agent echo": byAgent.Groups["echo"].CachedTokens, "model test:echo": byModel.Groups["test:echo"].CachedTokens} {
		if got == nil || *got != 0 {
			t.Errorf("/usage %s cached_tokens = %v, want 0 written out", what, got)
		}
	}

	b := newBrowser(t, 1200, 900)
	b.do(chromedp.Navigate(a.page("#usage")))
	b.until("the Cached tokens meter", fmt.Sprintf(
		`[...document.querySelectorAll('#usage-total .meter')].some(m => m.querySelector('.meter-label')?.textContent === 'Cached tokens' && m.querySelector('.meter-value')?.textContent.replace(/\D/g, '') === %q)`,
		fmt.Sprint(cached)))
	for _, row := range []struct{ table, key string }{{"agent", "cached"}, {"model", model}, {"agent", "echo"}, {"model", "test:echo"}} {
		want := "0"
		if row.key == "cached" || row.key == model {
			want = fmt.Sprint(cached)
		}
		b.until(row.table+" "+row.key+" cached "+want, fmt.Sprintf(
			`document.querySelector('#usage-%s tbody tr[data-key=%q] td.cached')?.textContent === %q`, row.table, row.key, want))
	}
	b.shot("usage-cached")
}

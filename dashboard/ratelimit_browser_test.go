package dashboard_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"golang.org/x/sync/errgroup"

	"github.com/svc-dev/svc/llmsim"
)

// TestDashboardRateLimits: the health view lists each rate limit of
// GET /runtime/stats and follows it. A limit declared in runtime.yaml (one
// call at once) shows its queue, calls in flight and calls in the last
// minute against the limit ("1 / 6000 rpm"), and they move as the calls
// waiting on it are let through and leave; the learned limit of a
// provider key (an openai agent against llmsim, which refuses past one
// call a second) shows the 429s it received and its learned window.
func TestDashboardRateLimits(t *testing.T) {
	t.Parallel() // its own server, simulator and browser
	// Each answer takes 2 s: the simulator's rate-limit headers (which
	// the learned limit paces by from the first answer on) come back only
	// after the first calls went out together, some of them refused.
	sim := llmsim.New(llmsim.Config{RPM: 60, Window: time.Second, FirstToken: llmsim.Latency{Mean: 2 * time.Second}})
	if err := sim.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	a := startAppSpecs(t, map[string]string{
		"runtime.yaml": "version: 1\nrate_limits:\n  shared:\n    requests_per_minute: 6000\n    tokens_per_minute: 90000\n    max_concurrent: 1\n",
		// Each call holds the limit's one slot for two minutes, until its
		// run is cancelled.
		"agents/limited.yaml": "version: 1\nname: limited\nmodel: test:echo\ninstructions: Wait.\nmodel_settings:\n  latency_ms: 120000\n  rate_limit: shared\n",
		"agents/learner.yaml": fmt.Sprintf("version: 1\nname: learner\nmodel: openai:gpt-4o-mini\ninstructions: Answer.\nmodel_settings:\n"+
			"  base_url: %s/v1\n  api_key: sk-dashboard\n  max_retries: 0\n", sim.URL()),
	}, "")

	b := newBrowser(t, 1280, 900)
	b.do(chromedp.Navigate(a.page("#health")))
	cell := func(limit, k string) string {
		return fmt.Sprintf(`((document.querySelector('#limits-table tr[data-limit=%q] td[data-k=%q]') || {}).textContent || '')`, limit, k)
	}
	is := func(limit, k, want string) string { return fmt.Sprintf(`%s === %q`, cell(limit, k), want) }
	b.until("the declared limit, idle", `!document.querySelector('#limits-card').hidden && `+
		is("shared", "queued", "0")+` && `+is("shared", "in_flight", "0 / 1")+` && `+is("shared", "calls", "0 / 6000 rpm")+` && `+is("shared", "tokens", "0 / 90.0k tpm"))

	// Three runs on one slot: the first in flight, two queued behind it.
	ids := []string{submit(t, a, "limited", `"x"`)}
	b.until("the first call in flight", is("shared", "in_flight", "1 / 1")+` && `+is("shared", "calls", "1 / 6000 rpm"))
	ids = append(ids, submit(t, a, "limited", `"x"`), submit(t, a, "limited", `"x"`))
	b.until("one call in flight, two queued", is("shared", "queued", "2")+` && `+is("shared", "in_flight", "1 / 1")+` && `+is("shared", "calls", "1 / 6000 rpm"))
	b.shot("health-rate-limits")

	// The first run cancelled: the next call takes its slot after its wait.
	cancel := func(id string) {
		t.Helper()
		if st := api(t, a, "", http.MethodPost, "/runs/"+id+"/cancel", "", nil); st != http.StatusNoContent {
			t.Fatalf("cancel %s: status %d", id, st)
		}
	}
	cancel(ids[0])
	b.until("the next call let through after its wait", is("shared", "queued", "1")+` && `+is("shared", "in_flight", "1 / 1")+` && `+
		is("shared", "calls", "2 / 6000 rpm")+` && `+cell("shared", "wait")+` !== '0 ms / 0 ms'`)
	for _, id := range ids[1:] {
		cancel(id)
	}
	b.until("nothing queued or in flight once the runs are cancelled", is("shared", "queued", "0")+` && `+is("shared", "in_flight", "0 / 1"))
	if got := eval[string](b, cell("shared", "throttled")); got != "0" {
		t.Errorf("429s of the declared limit: %q, want 0", got)
	}

	// The learned limit of the simulator's key: it starts at 4 calls at
	// once, the simulator lets one a second through, the rest are 429s
	// until the first answer's headers say the limit. Twelve, submitted
	// at once, so that some reach the simulator within a second of each
	// other even on a busy machine (in one fresh make check all twelve
	// came one at a time, answered at once, and none was refused).
	learners := make([]string, 12)
	var g errgroup.Group
	for i := range learners {
		g.Go(func() (err error) {
			learners[i], err = a.submit(t.Context(), "learner", `"hello"`)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatalf("submitting the learners: %v", err)
	}
	learned := `[...document.querySelectorAll('#limits-table tr[data-limit^="openai:gpt-4o-mini"]')]`
	b.until("the learned limit with the 429s it received, its window and the tokens of its answers",
		learned+`.some((tr) => Number(tr.querySelector('td[data-k="throttled"]').textContent) > 0 && tr.querySelector('td[data-k="throttled"]').classList.contains('bad') && `+
			`/^window [\d.]+ at once/.test(tr.querySelector('td[data-k="learned"]').textContent) && /^[1-9]\d* tpm$/.test(tr.querySelector('td[data-k="tokens"]').textContent))`)
	if refused := sim.Throttled(); len(refused) == 0 {
		t.Errorf("the simulator refused nothing: %v", refused)
	}
	if errs := b.errors(); len(errs) > 0 {
		t.Errorf("console errors: %q", errs)
	}
	// The calls still waiting on the learned limit (it lets one a second
	// through) are cancelled: a server stopped with runs in flight past its
	// --shutdown-grace exits 1, and the page can show the 429s seconds
	// before the last call is let through.
	for _, id := range learners {
		cancel(id)
	}
}

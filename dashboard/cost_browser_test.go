package dashboard_test

// The usage view's costs and the run drawer's tree, in the browser: the
// costs come from GET /usage (agent_completed's cost_usd summed by the
// event store), and the drawer opens the tree of the trace the run's
// status names (trace_id), guessing nothing.

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/svc-dev/svc/internal/testutil"
)

// prices make test:echo (free in the built-in table) cost something, at
// prices whose sums have no short decimal form: `svc serve --prices FILE`.
const prices = `{"test:echo": {"input_per_mtok": 1234.567, "output_per_mtok": 3210.987}}`

// startPricedApp is startApp with the price file above (svc serve --prices).
func startPricedApp(t testing.TB) *server {
	t.Helper()
	pricesFile := filepath.Join(t.TempDir(), "prices.json")
	if err := os.WriteFile(pricesFile, []byte(prices), 0o644); err != nil {
		t.Fatal(err)
	}
	return startApp(t, "", "--prices", pricesFile)
}

type usageTotals struct {
	TokensUsed  int64   `json:"tokens_used"`
	CostUSD     float64 `json:"cost_usd"`
	Invocations int64   `json:"invocations"`
}

type usageAnswer struct {
	Total  usageTotals            `json:"total"`
	Groups map[string]usageTotals `json:"groups"`
}

// jsNum is f as a JavaScript number literal that reads back as f exactly.
func jsNum(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// TestDashboardCostAndTrace: the usage view shows, per agent and per
// model, the cost /usage reports (the exact figure in data-usd, the text
// rounded to four significant digits) with a bar each; and clicking a run
// opens the tree of the trace its status names.
func TestDashboardCostAndTrace(t *testing.T) {
	t.Parallel() // each has its own server and browser
	a := startPricedApp(t)

	var ids []string
	for _, s := range []struct{ target, input string }{
		{"echo", `{"text":"one two three"}`}, {"echo", `{"text":"four"}`},
		{"clock", `{"q":"time?"}`}, {"fan", `{"items":["a","b"]}`},
	} {
		ids = append(ids, submit(t, a, s.target, s.input))
	}
	for _, id := range ids {
		testutil.Within(t, wait, "run "+id+" to finish", func() bool { s, _ := runStatus(t, a, id); return s == "completed" || s == "failed" })
	}
	// echo ×2, clock, and the fan's split and two items: 6 invocations.
	var byAgent, byModel usageAnswer
	testutil.Within(t, wait, "the runs' completions to be stored", func() bool {
		api(t, a, "", http.MethodGet, "/usage?group_by=agent", "", &byAgent)
		return byAgent.Total.Invocations >= 6
	})
	api(t, a, "", http.MethodGet, "/usage?group_by=model", "", &byModel)
	if byAgent.Total.CostUSD <= 0 || byModel.Groups["test:echo"].CostUSD != byAgent.Total.CostUSD {
		t.Fatalf("usage by agent %+v, by model %+v: want test:echo priced, the totals equal", byAgent, byModel)
	}

	b := newBrowser(t, 1200, 900)
	b.do(chromedp.Navigate(a.page("#usage")))
	b.until("the total cost", fmt.Sprintf(`Number(document.querySelector('#usage-total [data-usd]')?.dataset.usd) === %s`, jsNum(byAgent.Total.CostUSD)))
	for _, view := range []struct {
		key string
		u   usageAnswer
	}{{"agent", byAgent}, {"model", byModel}} {
		for name, g := range view.u.Groups {
			row := fmt.Sprintf(`document.querySelector('#usage-cost-%s tbody tr[data-key=%q]')`, view.key, name)
			b.until(view.key+" "+name+" at $"+jsNum(g.CostUSD), fmt.Sprintf(`Number(%s?.cells[1].dataset.usd) === %s`, row, jsNum(g.CostUSD)))
			shown := eval[string](b, row+`.cells[1].textContent`)
			v, err := strconv.ParseFloat(shown[1:], 64)
			if shown[0] != '$' || err != nil || v < g.CostUSD*(1-5e-4) || v > g.CostUSD*(1+5e-4) {
				t.Errorf("%s %s shows %q, want $%v to four significant digits", view.key, name, shown, g.CostUSD)
			}
		}
		if n := eval[int](b, fmt.Sprintf(`document.querySelectorAll('#usage-cost-%s-chart svg rect').length`, view.key)); n != len(view.u.Groups) {
			t.Errorf("cost by %s chart has %d bars, want %d", view.key, n, len(view.u.Groups))
		}
		if n := eval[int](b, fmt.Sprintf(`document.querySelectorAll('#usage-%s-chart svg rect').length`, view.key)); n != len(view.u.Groups) {
			t.Errorf("tokens by %s chart has %d bars, want %d", view.key, n, len(view.u.Groups))
		}
	}
	b.shot("usage-cost")

	// A run submitted with a request id has that trace; one without gets a
	// new one. Either way the drawer shows the tree of the status's
	// trace_id.
	var given struct {
		RunID string `json:"run_id"`
	}
	if st := api(t, a, "", http.MethodPost, "/submit", `{"target":"echo","task":{"input":{"x":1},"request_id":"dash-trace-1"}}`, &given); st != http.StatusAccepted {
		t.Fatalf("submit: %d", st)
	}
	b.do(chromedp.Navigate(a.page("#live")))
	for _, id := range []string{given.RunID, ids[3]} {
		var st struct {
			State   string `json:"state"`
			TraceID string `json:"trace_id"`
		}
		testutil.Within(t, wait, "run "+id+" to finish", func() bool {
			api(t, a, "", http.MethodGet, "/runs/"+id+"/status", "", &st)
			return st.State == "completed" || st.State == "failed"
		})
		if st.TraceID == "" || id == given.RunID && st.TraceID != "dash-trace-1" {
			t.Fatalf("status of %s has trace_id %q", id, st.TraceID)
		}
		b.until("run "+id+" to appear live", fmt.Sprintf(`!!document.querySelector(%q)`, runRow(id)))
		// Its row's cost column is the result's cost_usd, to four
		// significant digits.
		var res struct {
			Metadata struct {
				CostUSD float64 `json:"cost_usd"`
			} `json:"metadata"`
		}
		api(t, a, "", http.MethodGet, "/runs/"+id+"/result", "", &res)
		cell := fmt.Sprintf(`(document.querySelector(%q)?.cells[6]?.textContent || '')`, runRow(id))
		b.until("run "+id+"'s cost in its live row", cell+` !== '–' && `+cell+` !== ''`)
		shown := eval[string](b, cell)
		if v, err := strconv.ParseFloat(strings.TrimPrefix(shown, "$"), 64); !strings.HasPrefix(shown, "$") || err != nil ||
			v < res.Metadata.CostUSD*(1-5e-4) || v > res.Metadata.CostUSD*(1+5e-4) {
			t.Errorf("run %s's live row shows cost %q, want $%v", id, shown, res.Metadata.CostUSD)
		}
		b.click(runRow(id))
		b.until("the drawer to show the tree of trace "+st.TraceID,
			fmt.Sprintf(`document.querySelector('#drawer-tree [data-trace]')?.dataset.trace === %q && document.querySelectorAll('#drawer-tree ul.tree li').length >= 1`, st.TraceID))
		if got := b.text("#drawer-trace"); got != st.TraceID {
			t.Errorf("drawer names trace %q, want %q", got, st.TraceID)
		}
		b.do(chromedp.Click(chromedp.CSS("#drawer-close")))
	}
	if errs := b.errors(); len(errs) > 0 {
		t.Errorf("console errors: %q", errs)
	}
}

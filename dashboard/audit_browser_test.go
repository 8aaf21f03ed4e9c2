package dashboard_test

// Browser tests of what TestDashboardInBrowser leaves out: the live
// view's filters and columns, a tree with tools and a spawned child, the
// health view's rejections and error groups against /runtime/stats, the
// worker fleet's healthy → stale → down, and the bounded event window
// with more events than it keeps.

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/svc-dev/svc/internal/svcproc"
	"github.com/svc-dev/svc/internal/testutil"
)

// liveRows is the JavaScript for the run ids the live table shows, sorted
// and joined with commas.
const liveRows = `[...document.querySelectorAll('#live-table tbody tr[data-run]')].map(r => r.dataset.run).sort().join(',')`

func sortedIDs(ids ...string) string {
	s := slices.Clone(ids)
	slices.Sort(s)
	return strings.Join(s, ",")
}

// setFilters sets the live view's state select and agent input as a user
// does (their change and input events redraw the table).
func (b *browser) setFilters(state, agent string) {
	b.t.Helper()
	eval[chromedp.Void](b, fmt.Sprintf(`(() => {
		const s = document.querySelector('#live-state'); s.value = %q; s.dispatchEvent(new Event('change'));
		const a = document.querySelector('#live-agent'); a.value = %q; a.dispatchEvent(new Event('input'));
	})()`, state, agent))
}

// TestDashboardLiveFiltersTreeHealth: the live view filters by state and
// by agent (case-insensitive, a part of the name), shows a finished
// run's tokens as its result has them and a duration; the drawer's tree
// of a run that spawns a child has the tool call and the child nested
// under it, each with a duration; the health view shows the rejections
// and error groups /runtime/stats reports.
func TestDashboardLiveFiltersTreeHealth(t *testing.T) {
	t.Parallel() // each has its own server and browser
	a := startApp(t, "")
	b := newBrowser(t, 1200, 800)
	b.do(chromedp.Navigate(a.page("")))
	b.until("the event stream to connect", `document.querySelector('#conn').dataset.state === 'connected'`)

	echo := submit(t, a, "echo", `{"text":"one"}`)
	fan := submit(t, a, "fan", `{"items":["a","b"]}`)
	failed := submit(t, a, "item", `"bad"`) // fail_on: bad
	parent := submit(t, a, "parent", `{"p":1}`)
	slow := submit(t, a, "slow", `{"text":"wait"}`)
	// Cancelled before the server is stopped (cleanups run last first).
	t.Cleanup(func() { api(t, a, "", http.MethodPost, "/runs/"+slow+"/cancel", "", nil) })
	for _, id := range []string{echo, fan, failed, parent} {
		testutil.Within(t, wait, "run "+id+" to finish", func() bool { s, _ := runStatus(t, a, id); return s == "completed" || s == "failed" })
	}
	testutil.Within(t, wait, "the slow run to start", func() bool { s, _ := runStatus(t, a, slow); return s == "running" })
	want := map[string][]string{"": {echo, fan, failed, parent, slow}}
	for _, id := range []string{echo, fan, failed, parent, slow} {
		s, _ := runStatus(t, a, id)
		want[s] = append(want[s], id)
	}
	if len(want["failed"]) != 1 || want["failed"][0] != failed || len(want["running"]) != 1 {
		t.Fatalf("runs by state %v: want the item run failed and the slow one running", want)
	}
	for state, ids := range want {
		b.setFilters(state, "")
		b.until(fmt.Sprintf("state filter %q to show %v", state, ids), fmt.Sprintf(`%s === %q`, liveRows, sortedIDs(ids...)))
		b.until(fmt.Sprintf("state filter %q badges", state), fmt.Sprintf(`[...document.querySelectorAll('#live-table tbody tr[data-run] .badge')].every(e => %q === '' || e.textContent === %q)`, state, state))
	}
	for agent, ids := range map[string][]string{"ECH": {echo}, "fa": {fan}, "lo": {slow}, "ite": {failed}, "nobody": nil} {
		b.setFilters("", agent)
		b.until(fmt.Sprintf("agent filter %q to show %v", agent, ids), fmt.Sprintf(`%s === %q`, liveRows, sortedIDs(ids...)))
		if ids == nil {
			b.until("the empty filter's message", `document.querySelector('#live-table tbody').textContent.includes('No run matches the filter.')`)
		}
	}
	b.setFilters("completed", "par")
	b.until("both filters at once", fmt.Sprintf(`%s === %q`, liveRows, parent))
	b.setFilters("", "")

	// Columns: the echo run's tokens are its result's; every finished run
	// has a duration.
	var res struct {
		Metadata struct {
			TokensUsed int64 `json:"tokens_used"`
		} `json:"metadata"`
	}
	if st := api(t, a, "", http.MethodGet, "/runs/"+echo+"/result", "", &res); st != http.StatusOK || res.Metadata.TokensUsed <= 0 {
		t.Fatalf("result of %s: %d %+v", echo, st, res)
	}
	b.until("every run listed again", fmt.Sprintf(`%s === %q`, liveRows, sortedIDs(want[""]...)))
	b.until("the echo run's tokens", fmt.Sprintf(`document.querySelector(%q)?.cells[5].textContent === %q`, runRow(echo), fmt.Sprint(res.Metadata.TokensUsed)))
	dur := regexp.MustCompile(`^\d+(\.\d)? (ms|s)$|^\d+m \d+s$`)
	for _, id := range []string{echo, fan, failed, parent} {
		if d := eval[string](b, fmt.Sprintf(`document.querySelector(%q).cells[4].textContent`, runRow(id))); !dur.MatchString(d) {
			t.Errorf("run %s: duration cell %q", id, d)
		}
	}

	// The tree: run parent → agent parent → its spawn_agents call, and
	// the spawned run helper nested under the agent, with its own agent.
	b.do(chromedp.Click(chromedp.CSS(runRow(parent))))
	b.until("the parent's tree with its spawned child", `!!document.querySelector('#drawer-tree li[data-kind="run"] li[data-kind="agent"] li[data-kind="run"] li[data-kind="agent"]')`)
	if got := b.text(`#drawer-tree > ul > li > ul > li[data-kind="agent"] > ul > li[data-kind="tool"] .tname`); got != "tool spawn_agents" {
		t.Errorf("the parent agent's tool node says %q, want tool spawn_agents", got)
	}
	if got := b.text(`#drawer-tree > ul > li > ul > li[data-kind="agent"] > ul > li[data-kind="run"] .tname`); got != "run helper" {
		t.Errorf("the spawned child's node says %q, want run helper", got)
	}
	for _, d := range eval[[]string](b, `[...document.querySelectorAll('#drawer-tree .tdur')].map(e => e.textContent)`) {
		if !dur.MatchString(d) {
			t.Errorf("tree node duration %q", d)
		}
	}
	b.do(chromedp.Click(chromedp.CSS("#drawer-close")))

	// Tools: p50, p95 and p99 per tool as /tools has them, and a click on
	// a column sorts the rows by it, again the other way.
	if st := api(t, a, "", http.MethodPost, "/agents/clock/run", `{"input":{"q":"time?"}}`, nil); st != http.StatusOK {
		t.Fatalf("run clock: %d", st)
	}
	var raw struct {
		Rows []map[string]any `json:"rows"`
	}
	testutil.Within(t, wait, "two tools with calls in /tools", func() bool {
		api(t, a, "", http.MethodGet, "/tools?group_by=tool", "", &raw)
		return len(raw.Rows) >= 2
	})
	b.do(chromedp.Navigate(a.page("#tools")))
	for _, r := range raw.Rows {
		b.until("tool row "+fmt.Sprint(r["tool"]), fmt.Sprintf(`[...document.querySelectorAll('#tools-table tbody tr')].some(tr => tr.cells[0].textContent === %q && tr.cells[2].textContent === %q && tr.cells[4].textContent === %q && tr.cells[5].textContent === %q && tr.cells[6].textContent === %q)`,
			r["tool"], fmt.Sprint(r["calls"]), fmt.Sprintf("%.1f", r["p50_ms"]), fmt.Sprintf("%.1f", r["p95_ms"]), fmt.Sprintf("%.1f", r["p99_ms"])))
	}
	column := func(i int) []string {
		return eval[[]string](b, fmt.Sprintf(`[...document.querySelectorAll('#tools-table tbody tr')].map(tr => tr.cells[%d].textContent)`, i))
	}
	numbers := func(xs []string) []float64 {
		var out []float64
		for _, x := range xs {
			var f float64
			fmt.Sscan(x, &f)
			out = append(out, f)
		}
		return out
	}
	if c := numbers(column(2)); !slices.IsSortedFunc(c, func(x, y float64) int { return int(y - x) }) {
		t.Errorf("the tools open sorted by calls, most first: %v", c)
	}
	b.do(chromedp.Click(chromedp.CSS(`#tools-table th[data-key="calls"]`)))
	b.until("sorted by calls, fewest first", `document.querySelector('#tools-table th[data-key="calls"]').dataset.sort === 'asc'`)
	if c := numbers(column(2)); !slices.IsSorted(c) {
		t.Errorf("sorted by calls ascending: %v", c)
	}
	b.do(chromedp.Click(chromedp.CSS(`#tools-table th[data-key="tool"]`)))
	b.until("sorted by tool", `document.querySelector('#tools-table th[data-key="tool"]').dataset.sort === 'asc'`)
	if c := column(0); !slices.IsSorted(c) {
		t.Errorf("sorted by tool: %v", c)
	}
	b.do(chromedp.Click(chromedp.CSS(`#tools-table th[data-key="tool"]`)))
	b.until("sorted by tool, backwards", `document.querySelector('#tools-table th[data-key="tool"]').dataset.sort === 'desc'`)
	if c := column(0); !slices.IsSortedFunc(c, func(x, y string) int { return strings.Compare(y, x) }) {
		t.Errorf("sorted by tool, descending: %v", c)
	}

	// Health: rejections by kind and error groups, as /runtime/stats has them.
	var stats struct {
		Rejections  map[string]int64 `json:"rejections"`
		ErrorGroups []struct {
			Error string `json:"error"`
			Count int64  `json:"count"`
		} `json:"error_groups"`
	}
	testutil.Within(t, wait, "the item run's failure in /runtime/stats", func() bool {
		api(t, a, "", http.MethodGet, "/runtime/stats", "", &stats)
		return len(stats.ErrorGroups) > 0 && len(stats.Rejections) > 0
	})
	b.do(chromedp.Navigate(a.page("#health")))
	// The header meters are the API's header (the page polls every 5 s;
	// nothing changes now but the slow run, which spends nothing yet). In
	// flight is the runtime's live count: the slow run, the one run not
	// finished, whatever the event counts add up to (a refused invocation
	// fails without a spawn, so spawned - completed - failed is not it).
	meter := func(label string) string {
		return fmt.Sprintf(`([...document.querySelectorAll('#health-meters .meter')].find(m => m.querySelector('.meter-label').textContent === %q)?.querySelector('.meter-value').textContent)`, label)
	}
	var header struct {
		Header struct {
			Spawned   int64 `json:"agents_spawned"`
			Completed int64 `json:"agents_completed"`
			Failed    int64 `json:"agents_failed"`
			ToolCalls int64 `json:"tool_calls"`
			Tokens    int64 `json:"tokens_used"`
			InFlight  int64 `json:"runs_in_flight"`
		} `json:"header"`
	}
	api(t, a, "", http.MethodGet, "/runtime/stats", "", &header)
	hd := header.Header
	if hd.Spawned >= 10_000 || hd.Tokens >= 10_000 {
		t.Fatalf("header %+v: the meters below compare plain numbers", hd)
	}
	if s, _ := runStatus(t, a, slow); s != "running" || hd.InFlight != 1 {
		t.Fatalf("header %+v with the slow run %s: want runs_in_flight 1", hd, s)
	}
	t.Logf("header %+v: spawned - completed - failed = %d", hd, hd.Spawned-hd.Completed-hd.Failed)
	for label, v := range map[string]int64{"Tokens": hd.Tokens, "Spawns": hd.Spawned, "In flight": hd.InFlight,
		"Completed": hd.Completed, "Failed": hd.Failed, "Tool calls": hd.ToolCalls} {
		b.until(fmt.Sprintf("the %s meter at %d", label, v), fmt.Sprintf(`%s === %q`, meter(label), fmt.Sprint(v)))
	}
	for kind, n := range stats.Rejections {
		b.until("rejection bar "+kind, fmt.Sprintf(`[...document.querySelectorAll('#rejections svg g title')].some(e => e.textContent === %q)`, fmt.Sprintf("%s: %d", kind, n)))
	}
	for _, g := range stats.ErrorGroups {
		b.until("error group "+g.Error, fmt.Sprintf(`[...document.querySelectorAll('#errors-table tbody tr')].some(r => r.cells[0].textContent === %q && r.cells[1].textContent === %q)`, g.Error, fmt.Sprint(g.Count)))
	}
	b.until("no MCP servers said so", `document.querySelector('#servers-table tbody').textContent.includes('No MCP tool servers.')`)
	if errs := b.errors(); len(errs) > 0 {
		t.Errorf("console errors: %q", errs)
	}
}

// TestDashboardBoundedWindow: a gather of 1,200 tasks sends the page more
// events than its window; it sees them all and keeps no more than the
// window (2,000), and the feed no more than its rows.
func TestDashboardBoundedWindow(t *testing.T) {
	t.Parallel() // each has its own server and browser
	a := startApp(t, "")
	b := newBrowser(t, 1200, 800)
	b.do(chromedp.Navigate(a.page("")))
	b.until("the event stream to connect", `document.querySelector('#conn').dataset.state === 'connected'`)
	// Gathers of 250 tasks (agent_spawned and agent_completed each, and
	// the batch's two), one after the other until the page has seen more
	// events than its window: a burst of all at once would overflow the
	// server's SSE queue for the page and be dropped before it.
	const batch = 250
	var tasks []string
	for i := range batch {
		tasks = append(tasks, fmt.Sprintf(`{"input":%d}`, i))
	}
	body := `{"tasks":[` + strings.Join(tasks, ",") + `],"max_concurrency":16}`
	seen := 0
	for i := 0; seen <= 2200; i++ {
		if i == 12 {
			t.Fatalf("the page saw %d events after %d gathers of %d tasks", seen, i, batch)
		}
		if st := api(t, a, "", http.MethodPost, "/agents/echo/gather", body, nil); st != http.StatusOK {
			t.Fatalf("gather: %d", st)
		}
		// Until the page has caught up: its count stands still for a second.
		for last := -1; seen != last; {
			last = seen
			time.Sleep(time.Second)
			seen = eval[int](b, `window.__svcPerf.kept().seen`)
		}
	}
	var kept struct{ Events, Traces, Tasks, Results, Seen int }
	if err := json.Unmarshal(eval[[]byte](b, `window.__svcPerf.kept()`), &kept); err != nil {
		t.Fatal(err)
	}
	if kept.Events > 2000 || kept.Events < 1000 || kept.Traces > 2000 || kept.Tasks > 2000 {
		t.Errorf("after %d events the page keeps %+v, want at most its window of 2,000 (and not nothing)", kept.Seen, kept)
	}
	if rows := eval[int](b, `document.querySelectorAll('#feed-table tbody tr').length`); rows > 2000 || rows == 0 {
		t.Errorf("the feed has %d rows", rows)
	}
	if errs := b.errors(); len(errs) > 0 {
		t.Errorf("console errors: %q", errs)
	}
}

// TestDashboardFleet: with a broker and a real `svc worker start`, the
// health view lists the worker as /runtime/stats does: healthy while it
// beats, then stale and down once it is killed.
func TestDashboardFleet(t *testing.T) {
	t.Parallel() // each has its own server and browser
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	natsAddr := l.Addr().String()
	_ = l.Close()
	a := startApp(t, "", "--broker", "embedded", "--nats-listen", natsAddr, "--worker-stale-after", "3s", "--worker-down-after", "15s")
	w := exec.Command(svcBinary(t), "worker", "start", "--broker", "nats://"+natsAddr, "--specs", a.specs, "--agents", "echo",
		"--heartbeat-seconds", "1", "--runtime-id", "dash-worker")
	w.Env = svcproc.Env()
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = w.Wait(); close(exited) }()
	t.Cleanup(func() { _ = w.Process.Kill(); <-exited })

	status := func() string {
		var st struct {
			Workers []struct {
				RuntimeID string `json:"runtime_id"`
				Status    string `json:"status"`
			} `json:"workers"`
		}
		api(t, a, "", http.MethodGet, "/runtime/stats", "", &st)
		for _, x := range st.Workers {
			if x.RuntimeID == "dash-worker" {
				return x.Status
			}
		}
		return ""
	}
	b := newBrowser(t, 1200, 900)
	b.do(chromedp.Navigate(a.page("#health")))
	badge := `(document.querySelector('#workers-table tbody tr td .badge') || {}).textContent`
	for i, want := range []string{"healthy", "stale", "down"} {
		if i == 1 {
			if err := w.Process.Kill(); err != nil { // no worker_stopped: it goes stale, then down
				t.Fatal(err)
			}
		}
		testutil.Within(t, wait, "/runtime/stats to call the worker "+want, func() bool { return status() == want })
		// The page polls /runtime/stats every 5 s.
		b.until("the health view to show the worker "+want, fmt.Sprintf(`document.querySelector('#workers-table tbody').textContent.includes('dash-worker') && %s === %q`, badge, want))
		if want == "stale" {
			eval[bool](b, `(document.querySelector('#workers-table').scrollIntoView({block: 'center'}), true)`)
			b.shot("fleet-stale")
		}
	}
	if errs := b.errors(); len(errs) > 0 {
		t.Errorf("console errors: %q", errs)
	}
}

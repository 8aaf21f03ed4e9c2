package dashboard_test

// Browser tests: headless Chromium (Debian's chromium, driven with
// chromedp) against a real `svc serve`: the binary of ./cmd/svc, built once
// in TestMain (with -race when the tests run with it), started with its
// flags on a free port and a data directory of its own, and stopped by its
// PID. Without a browser the tests skip, unless SVC_REQUIRE_BROWSER=1 (CI)
// makes that a failure.
//
// With SVC_DASHBOARD_SHOTS=DIR the screenshots of each view are written to
// DIR (the repository's docs/dashboard); otherwise to a temporary
// directory, so a test run leaves the working tree alone.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/svc-dev/svc/internal/svcproc"
	"github.com/svc-dev/svc/internal/testutil"
)

// wait is how long the page may take to show something: generous, the
// machine is shared.
const wait = 45 * time.Second

var specs = map[string]string{
	"agents/echo.yaml":  "version: 1\nname: echo\nmodel: test:echo\ninstructions: Repeat the input.\n",
	"agents/slow.yaml":  "version: 1\nname: slow\nmodel: test:echo\ninstructions: Take a minute.\nmodel_settings: {latency_ms: 120000}\n",
	"agents/item.yaml":  "version: 1\nname: item\nmodel: test:echo\ninstructions: One item.\nmodel_settings: {latency_ms: 200, fail_on: bad}\n",
	"agents/clock.yaml": "version: 1\nname: clock\nmodel: test:echo\ninstructions: Tell the time.\ntools: [current_time]\ntrust_level: low\nmodel_settings: {call_tools: all}\n",
	// parent spawns a helper child (spawn_agents), for a tree with a child nested under a tool.
	"agents/parent.yaml": "version: 1\nname: parent\nmodel: test:echo\ninstructions: Spawn one.\nbuiltin_tools: [spawn_agents]\nmodel_settings:\n" +
		"  call_tools: [spawn_agents]\n  tool_arguments:\n    spawn_agents: {agents: [{name: helper, instructions: help, input: {from: parent}}]}\n",
	"groups/fan.yaml": "version: 1\nname: fan\nnodes:\n  split: {agent: echo}\n  work: {agent: item}\n" +
		"edges:\n  - {from: split, to: work, fan_out: output.items, max_concurrency: 2}\n",
	// talk streams its answer a word every 500 ms (the test model's
	// streaming), for the drawer's live text: 8 s during which the drawer
	// must show part of it (200 ms, 3.2 s, was too short for a loaded
	// machine: the page had not caught up before the run ended).
	"agents/talk.yaml": "version: 1\nname: talk\nmodel: test:echo\ninstructions: Talk.\nmodel_settings:\n" +
		"  output: \"one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen\"\n  stream_interval_ms: 500\n",
	"groups/crew.yaml": "version: 1\nname: crew\nkind: team\ncoordinator: echo\ndelegates: [item, clock]\nmax_rounds: 3\n",
}

// chromiumPath finds the browser, or skips (fails under
// SVC_REQUIRE_BROWSER=1).
func chromiumPath(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("SVC_REQUIRE_BROWSER") == "1" {
		t.Fatal("no chromium on PATH, and SVC_REQUIRE_BROWSER=1: install Debian's chromium (apt-get install chromium)")
	}
	t.Skip("no chromium on PATH: the dashboard's browser tests need headless Chromium (apt-get install chromium); SVC_REQUIRE_BROWSER=1 makes this a failure")
	return ""
}

// The svc binary the tests run: built once per test binary, on first use
// (the tests of the handler alone, or a machine without a browser, do not
// pay for the build), into binDir, which TestMain removes.
var (
	binDir   string
	binOnce  sync.Once
	svcBin   string
	buildErr error
)

func TestMain(m *testing.M) {
	var err error
	if binDir, err = os.MkdirTemp("", "svc-dashboard-test-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(binDir)
	os.Exit(code)
}

// svcBinary builds ./cmd/svc the first time it is called.
func svcBinary(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() { svcBin, buildErr = svcproc.Build(binDir) })
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return svcBin
}

// server is a real `svc serve` (the binary built in TestMain) with the
// test specs, a data directory of its own (the default SQLite run and
// event stores) and the dashboard on (the default).
type server struct {
	t       testing.TB
	specs   string
	dataDir string
	token   string
	extra   []string // more flags for svc serve
	proc    *svcproc.Server
	client  *http.Client // its own connections, dropped on restart
}

// URL is the server's base address, http://127.0.0.1:PORT.
func (s *server) URL() string { return s.proc.URL }

// page is the dashboard's address with view (a fragment such as "#health",
// or "" for the default view), polling the stats and runs every second
// (`?poll=1`) rather than every 5 s: a test waits for the page to show
// each change, and at 5 s a test of several steps waited half a minute.
func (s *server) page(view string) string { return s.URL() + "/dashboard/?poll=1" + view }

// startApp starts `svc serve` on a free port, with --auth-token when token
// is not empty and the extra flags; it is stopped (SIGTERM by its PID)
// when t ends.
func startApp(t testing.TB, token string, extra ...string) *server {
	t.Helper()
	return startAppSpecs(t, nil, token, extra...)
}

// startAppSpecs is startApp with more spec files (path under the specs
// directory → body) beside the test specs.
func startAppSpecs(t testing.TB, more map[string]string, token string, extra ...string) *server {
	t.Helper()
	chromiumPath(t) // skip (or fail) before building anything
	dir := t.TempDir()
	all := maps.Clone(specs)
	maps.Copy(all, more)
	for name, body := range all {
		p := filepath.Join(dir, "specs", name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := &server{t: t, specs: filepath.Join(dir, "specs"), dataDir: filepath.Join(dir, "data"), token: token, extra: extra,
		client: &http.Client{Timeout: wait, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}}
	t.Cleanup(s.client.CloseIdleConnections)
	s.start("0")
	return s
}

// start runs the server on port ("0": any free one).
func (s *server) start(port string) {
	s.t.Helper()
	args := []string{"--specs", s.specs, "--data-dir", s.dataDir, "--host", "127.0.0.1", "--port", port,
		"--shutdown-grace", "5s"}
	if s.token != "" {
		args = append(args, "--auth-token", s.token)
	}
	args = append(args, s.extra...)
	s.proc = svcproc.Serve(s.t, svcBinary(s.t), args...)
}

// restart starts the server again on the port and data directory it had,
// after kill or stop.
func (s *server) restart() {
	s.t.Helper()
	u, err := url.Parse(s.proc.URL)
	if err != nil {
		s.t.Fatal(err)
	}
	s.client.CloseIdleConnections()
	s.start(u.Port())
}

// browser is one headless Chromium tab and what its console said.
type browser struct {
	t   testing.TB
	ctx context.Context
	mu  sync.Mutex
	log []chromedp.ConsoleMessage
}

func newBrowser(t testing.TB, width, height int, more ...chromedp.ExecAllocatorOption) *browser {
	t.Helper()
	path := chromiumPath(t)
	opts := append(slices.Clone(chromedp.DefaultExecAllocatorOptions[:]), chromedp.ExecPath(path),
		chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(width, height), chromedp.Flag("force-device-scale-factor", "1"),
		// Containers often give /dev/shm a few MiB: use /tmp instead.
		chromedp.Flag("disable-dev-shm-usage", true))
	opts = append(opts, more...)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	b := &browser{t: t, ctx: ctx}
	if err := chromedp.Do(ctx); err != nil { // start the browser
		t.Fatalf("starting %s: %v", path, err)
	}
	msgs := chromedp.Console(ctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			b.mu.Lock()
			b.log = append(b.log, m)
			b.mu.Unlock()
		}
	}()
	return b
}

// errors are the console errors and uncaught exceptions so far. Failed
// HTTP answers (a 401 before the token is given, a 404 for a tree not yet
// written) are the browser's network log, not the page's errors.
func (b *browser) errors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, m := range b.log {
		if (m.Type == chromedp.ConsoleError || m.IsException()) && m.Source != "network" {
			out = append(out, m.String())
		}
	}
	return out
}

func (b *browser) do(steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, wait)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatalf("browser: %v (console: %v)", err, b.errors())
	}
}

// click clicks the element sel finds, as a mouse does. The live views
// re-render their rows as events arrive, which can replace the element
// between chromedp finding it and clicking it ("Could not find node with
// given id"); the click is then tried again on the new element, as a
// person whose row moved would.
func (b *browser) click(sel string) {
	b.t.Helper()
	deadline := time.Now().Add(wait)
	for {
		ctx, cancel := context.WithTimeout(b.ctx, wait)
		err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(sel)))
		cancel()
		if err == nil {
			return
		}
		if !strings.Contains(err.Error(), "Could not find node") || time.Now().After(deadline) {
			b.t.Fatalf("browser: clicking %s: %v (console: %v)", sel, err, b.errors())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func eval[T any](b *browser, expr string, opts ...chromedp.EvaluateOption) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, wait)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, opts...))
	if err != nil {
		b.t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

// until waits for the JavaScript expression to be true; on a timeout it
// names the console's errors, which usually say why.
func (b *browser) until(what, expr string) {
	b.t.Helper()
	deadline := time.Now().Add(wait)
	for !eval[bool](b, expr) {
		if time.Now().After(deadline) {
			// What the page showed says which part never came: the
			// open drawer, the view in front and the console.
			page := eval[string](b, `[...document.querySelectorAll('#drawer:not([hidden]), section:not([hidden])')].map((e) => '#' + e.id + ': ' + e.innerText.replace(/\s+/g, ' ').slice(0, 1500)).join('\n')`)
			b.t.Fatalf("timed out after %v waiting for %s (console errors: %q)\npage:\n%s", wait, what, b.errors(), page)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (b *browser) text(sel string) string {
	return eval[string](b, fmt.Sprintf(`(document.querySelector(%q) || {}).textContent || ""`, sel))
}

// shot saves a screenshot of the viewport as NAME.png.
func (b *browser) shot(name string) {
	b.t.Helper()
	dir := os.Getenv("SVC_DASHBOARD_SHOTS")
	if dir == "" {
		dir = b.t.TempDir()
	}
	ctx, cancel := context.WithTimeout(b.ctx, wait)
	defer cancel()
	// Let the last frame settle so the picture is the page, not a blank.
	time.Sleep(300 * time.Millisecond)
	img, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	if _, err := png.Decode(bytes.NewReader(img)); err != nil {
		b.t.Fatalf("screenshot %s is not a PNG: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), img, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// api calls the server as a client would.
func api(t testing.TB, a *server, token, method, path, body string, out any) int {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, a.URL()+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := a.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	data, _ := io.ReadAll(res.Body)
	if out != nil && res.StatusCode < 300 {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, path, err, data)
		}
	}
	return res.StatusCode
}

func submit(t testing.TB, a *server, target, input string) string {
	t.Helper()
	var r struct {
		RunID string `json:"run_id"`
	}
	if st := api(t, a, "", http.MethodPost, "/submit", fmt.Sprintf(`{"target":%q,"task":{"input":%s}}`, target, input), &r); st != http.StatusAccepted {
		t.Fatalf("submit %s: status %d", target, st)
	}
	return r.RunID
}

// submit submits a run over HTTP (POST /submit, with the server's token)
// and returns its id; it is safe to call from any goroutine.
func (s *server) submit(ctx context.Context, target, input string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL()+"/submit",
		strings.NewReader(fmt.Sprintf(`{"target":%q,"task":{"input":%s}}`, target, input)))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	res, err := s.client.Do(req)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	data, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusAccepted {
		return "", fmt.Errorf("POST /submit %s: %s: %s", target, res.Status, data)
	}
	var r struct {
		RunID string `json:"run_id"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return "", fmt.Errorf("POST /submit %s: %w in %s", target, err, data)
	}
	return r.RunID, nil
}

type progress struct{ Total, Completed, Failed, Running int }

func runStatus(t testing.TB, a *server, id string) (state string, p *progress) {
	var st struct {
		State    string    `json:"state"`
		Progress *progress `json:"progress"`
	}
	if code := api(t, a, "", http.MethodGet, "/runs/"+id+"/status", "", &st); code != http.StatusOK {
		t.Fatalf("status of %s: %d", id, code)
	}
	return st.State, st.Progress
}

func runRow(id string) string { return fmt.Sprintf(`#live-table tr[data-run=%q]`, id) }

// TestDashboardInBrowser walks every view of the page against a live
// server: runs arrive and finish with their progress, a click shows a
// run's tree, Cancel stops a running run, the usage and tool tables show
// what the API returns, history pages, groups are drawn, and nothing is
// written to the console.
func TestDashboardInBrowser(t *testing.T) {
	t.Parallel() // each has its own server and browser
	a := startApp(t, "")
	b := newBrowser(t, 1200, 800)
	b.do(chromedp.Navigate(a.page("")))
	b.until("the event stream to connect", `document.querySelector('#conn').dataset.state === 'connected'`)

	// Runs submitted after the page loaded appear without a reload, and
	// end with the progress the API reports.
	fan := submit(t, a, "fan", `{"items":["a","b","c","bad"]}`)
	echo := submit(t, a, "echo", `{"text":"hello dashboard"}`)
	for _, id := range []string{fan, echo} {
		b.until("run "+id+" to appear live", fmt.Sprintf(`!!document.querySelector(%q)`, runRow(id)))
	}
	for _, id := range []string{fan, echo} {
		testutil.Within(t, wait, "run "+id+" to finish", func() bool { s, _ := runStatus(t, a, id); return s == "completed" || s == "failed" })
		state, p := runStatus(t, a, id)
		b.until("run "+id+" to show "+state, fmt.Sprintf(`document.querySelector(%q).textContent.includes(%q)`, runRow(id)+" .badge", state))
		if p != nil {
			want := fmt.Sprintf("%d✓ %d✗ %d▸ /%d", p.Completed, p.Failed, p.Running, p.Total)
			b.until("run "+id+" to show progress "+want, fmt.Sprintf(`document.querySelector(%q).textContent === %q`, runRow(id)+" .progress-text", want))
		}
	}
	b.shot("live")

	// A click opens the drawer with the run's tree: the group, its agents,
	// the failed item marked.
	b.click(runRow(fan))
	b.until("the drawer to show the fan run's tree", `document.querySelectorAll('#drawer-tree ul.tree li').length >= 4`)
	b.until("the failed item to be marked", `!!document.querySelector('#drawer-tree li.st-failed')`)
	if tl := b.text("#drawer-timeline"); !strings.Contains(tl, "agent_completed") {
		t.Errorf("timeline %q has no agent_completed", tl)
	}
	if res := b.text("#drawer-result"); !strings.Contains(res, `"group"`) && !strings.Contains(res, `"agent_name"`) {
		t.Errorf("result %q is not the run's result", res)
	}
	b.shot("drawer")
	b.do(chromedp.Click(chromedp.CSS("#drawer-close")))

	// Cancel ends a running run.
	slow := submit(t, a, "slow", `{"text":"wait"}`)
	b.until("the slow run to appear", fmt.Sprintf(`!!document.querySelector(%q)`, runRow(slow)))
	testutil.Within(t, wait, "the slow run to start", func() bool { s, _ := runStatus(t, a, slow); return s == "running" })
	b.click(runRow(slow))
	b.until("the drawer to show the run running", `document.querySelector('#drawer-status .badge')?.textContent === 'running' && !document.querySelector('#drawer-cancel').disabled`)
	b.do(chromedp.Click(chromedp.CSS("#drawer-cancel")))
	b.until("the drawer to show the run cancelled", `document.querySelector('#drawer-status .badge')?.textContent === 'cancelled'`)
	if s, _ := runStatus(t, a, slow); s != "cancelled" {
		t.Errorf("after Cancel the API says %s, want cancelled", s)
	}
	b.do(chromedp.Click(chromedp.CSS("#drawer-close")))

	// Run tree view, by the fan run's trace link in the feed.
	b.do(chromedp.Click(chromedp.Search(`//table[@id="feed-table"]//tr[td[3]="item"]//a`)))
	b.until("the tree view to draw the fan run", `document.querySelectorAll('#tree-out ul.tree li').length >= 6 && !!document.querySelector('#tree-out li.st-failed')`)
	b.shot("tree")

	// Usage and tools show the API's numbers.
	for range 3 {
		if st := api(t, a, "", http.MethodPost, "/agents/clock/run", `{"input":{"q":"time?"}}`, nil); st != http.StatusOK {
			t.Fatalf("run clock: %d", st)
		}
	}
	var usage struct {
		Groups map[string]struct {
			TokensUsed   int64 `json:"tokens_used"`
			CachedTokens int64 `json:"cached_tokens"`
			Invocations  int64 `json:"invocations"`
		} `json:"groups"`
	}
	testutil.Within(t, wait, "the clock runs to be stored", func() bool {
		api(t, a, "", http.MethodGet, "/usage?group_by=agent", "", &usage)
		return usage.Groups["clock"].Invocations >= 3
	})
	b.do(chromedp.Navigate(a.page("#usage")))
	for agent, u := range usage.Groups {
		want := fmt.Sprintf("%s%d%d%d", agent, u.TokensUsed, u.CachedTokens, u.Invocations)
		b.until("usage row "+want, fmt.Sprintf(`[...document.querySelectorAll('#usage-agent tbody tr')].some(r => r.textContent === %q)`, want))
	}
	if n := eval[int](b, `document.querySelectorAll('#usage-agent-chart svg rect').length`); n != len(usage.Groups) {
		t.Errorf("usage chart has %d bars, want %d agents", n, len(usage.Groups))
	}
	b.shot("usage")

	var tools struct {
		Rows []struct {
			Tool     string  `json:"tool"`
			Calls    int64   `json:"calls"`
			Failures int64   `json:"failures"`
			P95      float64 `json:"p95_ms"`
		} `json:"rows"`
	}
	// The event store writes in batches: wait for the three runs' calls.
	testutil.Within(t, wait, "the clock runs' tool calls to be stored", func() bool {
		api(t, a, "", http.MethodGet, "/tools?group_by=tool", "", &tools)
		return len(tools.Rows) > 0 && tools.Rows[0].Calls >= 3
	})
	b.do(chromedp.Navigate(a.page("#tools")))
	for _, r := range tools.Rows {
		b.until("tool row "+r.Tool, fmt.Sprintf(`[...document.querySelectorAll('#tools-table tbody tr')].some(tr => tr.cells[0].textContent === %q && tr.cells[2].textContent === %q && tr.cells[3].textContent === %q && Math.abs(parseFloat(tr.cells[5].textContent) - %f) < 0.051)`,
			r.Tool, fmt.Sprint(r.Calls), fmt.Sprint(r.Failures), r.P95))
	}
	// Sortable: a click on Tool sorts by name.
	b.do(chromedp.Click(chromedp.CSS(`#tools-table th[data-key="tool"]`)))
	b.until("the tools table to sort by tool", `document.querySelector('#tools-table th[data-key="tool"]').dataset.sort === 'asc'`)
	b.shot("tools")

	// History pages by cursor.
	for i := range 30 {
		submit(t, a, "echo", fmt.Sprintf(`{"n":%d}`, i))
	}
	b.do(chromedp.Navigate(a.page("#history")))
	b.until("history's first page", `document.querySelectorAll('#hist-table tbody tr.clickable').length === 25`)
	first := b.text("#hist-table tbody")
	b.do(chromedp.Click(chromedp.CSS("#hist-next")))
	b.until("history's second page", `document.querySelector('#hist-page').textContent.startsWith('page 2 of ')`)
	if b.text("#hist-table tbody") == first {
		t.Error("the second history page shows the first page's runs")
	}
	b.do(chromedp.SetValue(chromedp.CSS("#hist-state"), "cancelled"),
		chromedp.Evaluate[chromedp.Void](`document.querySelector('#hist-state').dispatchEvent(new Event('change'))`))
	b.until("history filtered by state", `[...document.querySelectorAll('#hist-table tbody .badge')].every(e => e.textContent === 'cancelled') && document.querySelectorAll('#hist-table tbody .badge').length === 1`)
	// Synchronous runs are history too (from the event store): the three
	// clock runs, of type run, with the total, each opening its tree.
	b.do(chromedp.SetValue(chromedp.CSS("#hist-state"), ""), chromedp.SetValue(chromedp.CSS("#hist-type"), "run"),
		chromedp.SetValue(chromedp.CSS("#hist-target"), "clock"),
		chromedp.Evaluate[chromedp.Void](`document.querySelector('#hist-target').dispatchEvent(new Event('change'))`))
	b.until("history of the synchronous clock runs", `(() => { const rows = [...document.querySelectorAll('#hist-table tbody tr.clickable')];
		return rows.length === 3 && rows.every(r => r.cells[1].textContent === 'clock' && r.cells[2].textContent === 'run' && r.cells[3].textContent === 'completed' && r.cells[7].querySelector('a'))
			&& document.querySelector('#hist-page').textContent.includes('(3 runs)'); })()`)
	b.shot("history")
	b.click(`#hist-table tbody tr.clickable`)
	b.until("a synchronous run's row to open its tree", `location.hash.startsWith('#tree/') && document.querySelectorAll('#tree-out ul.tree li').length >= 2`)
	b.do(chromedp.Navigate(a.page("#history")))
	b.until("the history view", `!document.querySelector('#view-history').hidden`)
	b.do(chromedp.Evaluate[chromedp.Void](`(() => { document.querySelector('#hist-type').value = 'submitted'; document.querySelector('#hist-target').value = '';
		document.querySelector('#hist-type').dispatchEvent(new Event('change')); })()`))
	b.until("history of submitted runs", `(() => { const rows = [...document.querySelectorAll('#hist-table tbody tr.clickable')];
		return rows.length === 25 && rows.every(r => r.cells[2].textContent === 'submitted' && r.cells[0].textContent !== '–'); })()`)

	b.do(chromedp.Navigate(a.page("#health")))
	b.until("the health meters", `document.querySelectorAll('#health-meters .meter').length >= 6`)
	b.until("the burn-rate chart", `!!document.querySelector('#burn-chart svg')`)
	// No rate limit (the test model has no learned one): no card, no empty table.
	if eval[bool](b, `!document.querySelector('#limits-card').hidden || document.querySelectorAll('#limits-table tbody tr').length > 0`) {
		t.Error("the health view shows a rate-limit card without any limit")
	}
	b.shot("health")

	b.do(chromedp.Navigate(a.page("#groups")))
	b.until("the fan group's graph", `document.querySelectorAll('[data-group="fan"] svg g.node').length === 2 && document.querySelectorAll('[data-group="fan"] svg g.edge').length === 1`)
	// The counts under each drawing are the drawing's (a team's said 0
	// nodes, 0 edges under three nodes).
	b.until("the groups' counts", `document.querySelector('[data-group="fan"] .group-counts').textContent.startsWith('2 nodes, 1 edges') && `+
		`document.querySelectorAll('[data-group="crew"] svg g.node').length === 3 && `+
		`document.querySelector('[data-group="crew"] .group-counts').textContent.startsWith('3 nodes, 2 edges; coordinator echo')`)
	b.shot("groups")

	// The dark theme.
	b.do(chromedp.Navigate(a.page("#live")), chromedp.Click(chromedp.CSS("#theme-btn")))
	b.until("the dark theme", `document.documentElement.dataset.theme === 'dark'`)
	b.shot("live-dark")

	if errs := b.errors(); len(errs) > 0 {
		t.Errorf("console errors: %q", errs)
	}
}

// TestDashboardToken: with --auth-token the page asks for the token; a
// wrong one is refused with a clear message, the right one connects, and
// the token is kept in sessionStorage, never in the address.
func TestDashboardToken(t *testing.T) {
	t.Parallel() // each has its own server and browser
	a := startApp(t, "right-token")
	b := newBrowser(t, 1000, 700)
	b.do(chromedp.Navigate(a.page("")))
	b.until("the token dialog", `document.querySelector('#token-dialog').open`)
	b.do(chromedp.SendKeys(chromedp.CSS("#token-input"), "wrong-token"), chromedp.Click(chromedp.CSS("#token-ok")))
	b.until("the wrong token to be refused", `document.querySelector('#banner').textContent.includes('token was refused') && !document.querySelector('#banner').hidden`)
	if c := b.text("#conn"); c != "wrong token" {
		t.Errorf("connection pill says %q, want %q", c, "wrong token")
	}
	b.shot("token")
	b.until("the dialog to ask again", `document.querySelector('#token-dialog').open`)
	b.do(chromedp.SendKeys(chromedp.CSS("#token-input"), "right-token"), chromedp.Click(chromedp.CSS("#token-ok")))
	b.until("the stream to connect with the right token", `document.querySelector('#conn').dataset.state === 'connected' && document.querySelector('#banner').hidden`)
	if got := eval[string](b, `sessionStorage.getItem('svc.token')`); got != "right-token" {
		t.Errorf("sessionStorage token = %q", got)
	}
	if u := eval[string](b, `location.href`); strings.Contains(u, "token") {
		t.Errorf("the token is in the address: %s", u)
	}
	id := submit2(t, a, "right-token")
	b.until("a run to appear with the token", fmt.Sprintf(`!!document.querySelector(%q)`, runRow(id)))
	// Asked once: another view and a reload of the tab use the kept token.
	b.do(chromedp.Navigate(a.page("#usage")))
	b.do(chromedp.Reload())
	b.until("the reloaded tab to connect without asking", `document.querySelector('#conn').dataset.state === 'connected'`)
	b.until("the usage view's rows with the kept token", `document.querySelectorAll('#usage-agent tbody tr').length >= 1`)
	if eval[bool](b, `document.querySelector('#token-dialog').open`) {
		t.Error("the reloaded tab asked for the token again")
	}
	for _, e := range b.errors() {
		t.Errorf("console error: %s", e)
	}
}

func submit2(t testing.TB, a *server, token string) string {
	var r struct {
		RunID string `json:"run_id"`
	}
	if st := api(t, a, token, http.MethodPost, "/submit", `{"target":"echo","task":{"input":{"x":1}}}`, &r); st != http.StatusAccepted {
		t.Fatalf("submit: %d", st)
	}
	return r.RunID
}

// TestDashboardPollParameter: `?poll=SECONDS` sets how often the page
// fetches the stats and the runs (docs/dashboard.md), from 0.5 to 60 s;
// without it, or with anything else, the page polls every 5 s.
func TestDashboardPollParameter(t *testing.T) {
	t.Parallel() // its own server and browser
	a := startApp(t, "")
	// Without the back-forward cache: a page kept in it holds its event
	// stream open, and Chromium opens at most six connections to a host.
	b := newBrowser(t, 1200, 800, chromedp.Flag("disable-features", "Translate,BlinkGenPropertyTrees,BackForwardCache"))
	for query, want := range map[string]int{
		"": 5000, "?poll=1": 1000, "?poll=0.5": 500, "?poll=60": 60000, "?poll=2.5": 2500,
		"?poll=0.1": 5000, "?poll=61": 5000, "?poll=abc": 5000, "?poll=": 5000, "?poll=-1": 5000,
	} {
		b.do(chromedp.Navigate(a.URL() + "/dashboard/" + query + "#health"))
		b.until("the page to start", `!!window.__svcPerf`)
		if got := eval[int](b, `window.__svcPerf.pollMs`); got != want {
			t.Errorf("/dashboard/%s polls every %d ms, want %d", query, got, want)
		}
	}
	if errs := b.errors(); len(errs) > 0 {
		t.Errorf("console errors: %q", errs)
	}
}

// TestDashboardPhone: at a phone's width the page fits without sideways
// scrolling, and a run's drawer covers the screen; the feed opens with the
// events stored before the page was.
func TestDashboardPhone(t *testing.T) {
	t.Parallel() // each has its own server and browser
	a := startApp(t, "")
	b := newBrowser(t, 390, 844)
	id := submit(t, a, "fan", `{"items":["x","y"]}`)
	// The page opens with the stored events of runs that ended before it
	// (GET /events), once the event store has written them.
	var stored []json.RawMessage
	testutil.Within(t, wait, "the fan run's events to be stored", func() bool {
		api(t, a, "", http.MethodGet, "/events?event_type=group_completed", "", &stored)
		return len(stored) == 1
	})
	b.do(chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile), chromedp.Navigate(a.page("")))
	b.until("the run to appear", fmt.Sprintf(`!!document.querySelector(%q)`, runRow(id)))
	b.until("the stored events in the feed", `[...document.querySelectorAll('#feed-table tbody tr')].some(r => r.cells[1] && r.cells[1].textContent === 'group_completed')`)
	if w := eval[int](b, `document.documentElement.scrollWidth - window.innerWidth`); w > 0 {
		t.Errorf("the page is %d px wider than the phone's screen", w)
	}
	b.shot("phone")
	b.click(runRow(id))
	b.until("the drawer", `!document.querySelector('#drawer').hidden`)
	if w := eval[int](b, `Math.round(document.querySelector('#drawer').getBoundingClientRect().width)`); w > 390 {
		t.Errorf("the drawer is %d px wide on a 390 px screen", w)
	}
	b.do(chromedp.Click(chromedp.CSS("#drawer-close")))
	// Every view, reached by its tab (each tab on the screen, so it can be
	// tapped), shows its content and fits the screen's width.
	for view, ready := range map[string]string{
		"tree":    `document.querySelector('#view-tree').textContent.length > 0`,
		"history": `document.querySelectorAll('#hist-table tbody tr.clickable').length >= 1`,
		"usage":   `document.querySelectorAll('#usage-agent tbody tr').length >= 1`,
		"tools":   `document.querySelectorAll('#tools-table tbody tr').length >= 1`,
		"health":  `document.querySelectorAll('#health-meters .meter').length >= 6`,
		"groups":  `document.querySelectorAll('[data-group="fan"] svg g.node').length === 2`,
	} {
		tab := fmt.Sprintf(`#tabs a[data-view=%q]`, view)
		if r := eval[[]float64](b, fmt.Sprintf(`(r => [r.left, r.right, r.width])(document.querySelector(%q).getBoundingClientRect())`, tab)); len(r) != 3 || r[2] == 0 || r[0] < 0 || r[1] > 390 {
			// Off screen: the tab bar must scroll it into reach.
			b.do(chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`document.querySelector(%q).scrollIntoView()`, tab)))
		}
		b.do(chromedp.Click(chromedp.CSS(tab)))
		b.until("the "+view+" view at phone width", fmt.Sprintf(`!document.querySelector('#view-%s').hidden && (%s)`, view, ready))
		if w := eval[int](b, `document.documentElement.scrollWidth - window.innerWidth`); w > 0 {
			t.Errorf("the %s view is %d px wider than the phone's screen", view, w)
		}
	}
	for _, e := range b.errors() {
		t.Errorf("console error: %s", e)
	}
}

// TestDashboardReconnecting: when the server dies the page says it is
// reconnecting rather than showing stale data as live; when it is back
// (the same port and data directory) the page connects again by itself and
// shows the runs submitted since, and the stored ones from before.
func TestDashboardReconnecting(t *testing.T) {
	t.Parallel() // each has its own server and browser
	a := startApp(t, "")
	b := newBrowser(t, 1000, 700)
	b.do(chromedp.Navigate(a.page("")))
	b.until("the event stream to connect", `document.querySelector('#conn').dataset.state === 'connected'`)
	before := submit(t, a, "echo", `{"text":"before the crash"}`)
	b.until("the run from before to appear", fmt.Sprintf(`!!document.querySelector(%q)`, runRow(before)))
	testutil.Within(t, wait, "the run from before to finish", func() bool { s, _ := runStatus(t, a, before); return s == "completed" })

	// SIGKILL: no goodbye on the stream, the connection just drops.
	a.proc.Kill(t)
	b.until("the page to say it is reconnecting", `document.querySelector('#conn').dataset.state === 'reconnecting' && document.querySelector('#conn').textContent === 'reconnecting…'`)
	b.shot("reconnecting")
	seen := eval[int](b, `window.__svcPerf.kept().seen`)

	a.restart()
	b.until("the page to connect again", `document.querySelector('#conn').dataset.state === 'connected' && document.querySelector('#conn').textContent === 'connected'`)
	after := submit(t, a, "echo", `{"text":"after the restart"}`)
	b.until("the run from after the restart to appear", fmt.Sprintf(`!!document.querySelector(%q)`, runRow(after)))
	testutil.Within(t, wait, "the run from after to finish", func() bool { s, _ := runStatus(t, a, after); return s == "completed" })
	b.until("the run from after the restart to show completed", fmt.Sprintf(`document.querySelector(%q).textContent.includes('completed')`, runRow(after)+" .badge"))
	// Its events came over the new stream, not only the runs list.
	b.until("the restarted server's events to arrive live", fmt.Sprintf(`window.__svcPerf.kept().seen > %d`, seen))
	b.until("the run from before, stored, to be listed", fmt.Sprintf(`!!document.querySelector(%q)`, runRow(before)))
	for _, e := range b.errors() {
		t.Errorf("console error: %s", e)
	}
}

// The run drawer shows a streaming run's answer as it is written (the
// run's deltas, /runs/{id}/stream?deltas=true), before the run has
// finished, and the result replaces it once it has (issue 27).
func TestDashboardDrawerLiveText(t *testing.T) {
	t.Parallel() // its own server and browser
	a := startApp(t, "")
	b := newBrowser(t, 1200, 800)
	b.do(chromedp.Navigate(a.page("")))
	b.until("the event stream to connect", `document.querySelector('#conn').dataset.state === 'connected'`)
	id := submit(t, a, "talk", `"hi"`)
	b.until("the run to appear live", fmt.Sprintf(`!!document.querySelector(%q)`, runRow(id)))
	b.click(runRow(id))
	// Part of the answer, while the run still runs: the drawer's result
	// is not there yet.
	// Deltas are not replayed: the drawer shows the words from when it
	// began to follow the run.
	b.until("the answer so far", `(() => { const t = (document.querySelector('#drawer-live .live-text') || {}).textContent || '';`+
		` return !document.querySelector('#drawer-live-box').hidden && t.trim().split(' ').length >= 2 && !t.includes('sixteen') &&`+
		` !document.querySelector('#drawer-result').textContent.includes('sixteen'); })()`)
	if s, _ := runStatus(t, a, id); s != "running" && s != "pending" {
		t.Errorf("the run was %s when the drawer showed part of its answer; want it still running", s)
	}
	b.shot("drawer-live")
	// Then the result, which replaces the text streamed so far.
	b.until("the result", `document.querySelector('#drawer-result').textContent.includes('one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen') && document.querySelector('#drawer-live-box').hidden`)
}

package main

import (
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/svc-dev/svc/internal/testutil"
)

// subsetSpecs: three agents and a group over two of them.
var subsetSpecs = map[string]string{
	"agents/a.yaml":      "version: 1\nmodel: test:echo\n",
	"agents/b.yaml":      "version: 1\nmodel: test:echo\n",
	"agents/c.yaml":      "version: 1\nmodel: test:echo\n",
	"groups/pipe.yaml":   "version: 1\nnodes: {x: {agent: a}, y: {agent: b}}\nedges: [{from: x, to: y}]\n",
	"groups/single.yaml": "version: 1\nnodes: {x: {agent: a}}\n",
}

// TestServeAgentsSubset: --agents and --groups pick what serve serves; a
// group needing an agent left out, or a name the specs do not define, is
// refused at start with exit 2 naming it.
func TestServeAgentsSubset(t *testing.T) {
	t.Parallel()
	specs := writeSpecs(t, subsetSpecs)
	list := func(url, what string) string {
		resp, body := get(t, url+"/"+what, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /%s: %d %s", what, resp.StatusCode, body)
		}
		return strings.TrimSpace(string(body))
	}
	for _, tc := range []struct {
		args           []string
		agents, groups string
	}{
		{[]string{"--agents", "a,b"}, `["a","b"]`, `["pipe","single"]`},
		{[]string{"--agents", "a", "--groups", "single"}, `["a"]`, `["single"]`},
		{[]string{"--agents", "c", "--groups", ""}, `["c"]`, `[]`},
		{[]string{"--groups", "pipe"}, `["a","b","c"]`, `["pipe"]`},
	} {
		s := startServe(t, nil, append([]string{"--specs", specs, "--dashboard=false"}, tc.args...)...)
		if got := list(s.url, "agents"); got != tc.agents {
			t.Errorf("%v: agents %s, want %s", tc.args, got, tc.agents)
		}
		if got := list(s.url, "groups"); got != tc.groups {
			t.Errorf("%v: groups %s, want %s", tc.args, got, tc.groups)
		}
		if resp, body := do(t, t.Context(), http.MethodPost, s.url+"/agents/b/run", `{"input":1}`, nil); strings.Contains(strings.Join(tc.args, " "), "--agents") && !strings.Contains(tc.agents, `"b"`) && resp.StatusCode != http.StatusNotFound {
			t.Errorf("%v: run of b, not served: %d %s, want 404", tc.args, resp.StatusCode, body)
		}
		s.signal(t, syscall.SIGINT)
		s.wait(t, fleetWait)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--agents", "a"}, "group pipe needs agent b, which --agents leaves out: add it to --agents, or leave the group out with --groups"},
		{[]string{"--agents", "a,nosuch"}, `--agents: no agent "nosuch" in ` + specs + " (agents: a, b, c)"},
		{[]string{"--groups", "nope"}, `--groups: no group "nope" in ` + specs + " (groups: pipe, single)"},
	} {
		r := svcExec(t, nil, "", append([]string{"serve", "--specs", specs, "--port", "0", "--data-dir", t.TempDir()}, tc.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("serve %v: exit %d, stderr:\n%s\nwant exit 2 and %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
}

// TestServeDashboardDir serves an edited copy of the dashboard, with the
// page's headers, and refuses a directory that is missing or has no
// index.html.
func TestServeDashboardDir(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "dash")
	if err := os.CopyFS(dir, os.DirFS("../../dashboard/static")); err != nil {
		t.Fatal(err)
	}
	index := filepath.Join(dir, "index.html")
	page, err := os.ReadFile(index)
	if err != nil {
		t.Fatal(err)
	}
	page = []byte(strings.Replace(string(page), "<body", "<!-- acme custom dashboard --><body", 1))
	writeFile(t, index, string(page))
	specs := writeSpecs(t, subsetSpecs)
	s := startServe(t, nil, "--specs", specs, "--dashboard-dir", dir)
	resp, body := get(t, s.url+"/dashboard/", nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "acme custom dashboard") {
		t.Errorf("GET /dashboard/: %d, want the edited page; body starts %.200q", resp.StatusCode, body)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("Content-Security-Policy %q, want the dashboard's", csp)
	}
	// Files are read at each request.
	writeFile(t, filepath.Join(dir, "style.css"), "body { color: teal }")
	if resp, body := get(t, s.url+"/dashboard/style.css", nil); resp.StatusCode != http.StatusOK || string(body) != "body { color: teal }" {
		t.Errorf("GET /dashboard/style.css after an edit: %d %q", resp.StatusCode, body)
	}

	empty := t.TempDir()
	for _, tc := range []struct{ dir, want string }{
		{filepath.Join(dir, "missing"), "--dashboard-dir: dashboard directory " + filepath.Join(dir, "missing") + ": stat"},
		{empty, "--dashboard-dir: dashboard directory " + empty + ": no index.html"},
		{index, "--dashboard-dir: dashboard directory " + index + ": not a directory"},
	} {
		r := svcExec(t, nil, "", "serve", "--specs", specs, "--port", "0", "--data-dir", t.TempDir(), "--dashboard-dir", tc.dir)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("--dashboard-dir %s: exit %d, stderr:\n%s\nwant exit 2 and %q", tc.dir, r.code, r.stderr, tc.want)
		}
	}
	r := svcExec(t, nil, "", "serve", "--specs", specs, "--port", "0", "--data-dir", t.TempDir(), "--dashboard-dir", dir, "--dashboard=false")
	if r.code != 2 || !strings.Contains(r.stderr, "--dashboard-dir needs the dashboard") {
		t.Errorf("--dashboard-dir with --dashboard=false: exit %d, stderr:\n%s", r.code, r.stderr)
	}
}

// TestWorkerReload: `svc worker start --reload` picks up a change to the
// definition of an agent it serves; a change that removes it is refused
// and the worker keeps serving the previous definition.
func TestWorkerReload(t *testing.T) {
	t.Parallel()
	echo := func(out string) string {
		return "version: 1\nmodel: test:echo\nmodel_settings: {output: " + out + "}\n"
	}
	serveSpecs := writeSpecs(t, map[string]string{"agents/echo.yaml": echo("server")})
	workerSpecs := writeSpecs(t, map[string]string{"agents/echo.yaml": echo("one"), "agents/other.yaml": echo("x")})
	addr := "127.0.0.1:" + freePort(t)
	b := fleetBroker{serveArgs: []string{"--broker", "embedded", "--nats-listen", addr}, workerURL: "nats://" + addr}
	s := startFleetServe(t, "serve", serveSpecs, filepath.Join(t.TempDir(), "serve"), b)
	w := startFleetProc(t, "worker", "worker", "start", "--broker", b.workerURL, "--specs", workerSpecs, "--agents", "echo",
		"--reload", "--log-format", "json", "--runtime-id", "w1")
	w.waitLog(t, regexp.MustCompile(`"msg":"worker_started"`))
	if got := runOutput(t, s.url, "echo"); got != `"one"` {
		t.Fatalf("before the change the worker answered %s, want \"one\"", got)
	}
	writeFile(t, filepath.Join(workerSpecs, "agents/echo.yaml"), echo("two"))
	testutil.Within(t, fleetWait, "the worker to answer with the new definition", func() bool { return runOutput(t, s.url, "echo") == `"two"` })

	if err := os.Remove(filepath.Join(workerSpecs, "agents/echo.yaml")); err != nil {
		t.Fatal(err)
	}
	w.waitLog(t, regexp.MustCompile(`specs reload refused.*the worker takes the tasks of echo, which the specs no longer define`))
	if got := runOutput(t, s.url, "echo"); got != `"two"` {
		t.Errorf("after a refused reload the worker answered %s, want the previous definition's \"two\"", got)
	}
}

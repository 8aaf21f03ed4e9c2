package bench

// Issue 30 part 6: durable runs measured as users run them, against the
// real `svc serve` binary with its default flags (SQLite run and event
// stores under --data-dir), the build that records every run's steps
// beside the one before it. See BENCHMARKS.md, "Issue 30 part 6".

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/svc-dev/svc"
)

// durableBaseRevEnv names an older commit to build as the baseline instead
// (d853901 is the parent of 1eef321, the commit that made submitted runs
// record their steps and resume; it lacks everything added since too).
const durableBaseRevEnv = "SVC_BENCH_BASE_REV"

// durableBinaries returns the two builds the durable benchmarks compare:
// on, this tree's (SVC_BENCH_BIN, else built from it), and off, without
// step recording: SVC_BENCH_BASE_BIN, else the commit SVC_BENCH_BASE_REV
// names built from `git archive` of this repository, else this same tree
// built with the tag nosteps (supervisor/steps_off.go: runs neither
// record steps nor resume), so that the two differ in step recording
// alone. A build that cannot be made skips the benchmark, saying which
// variable to set.
func durableBinaries(b *testing.B) (off, on string) {
	b.Helper()
	dir := b.TempDir()
	on = os.Getenv("SVC_BENCH_BIN")
	if on == "" {
		on = filepath.Join(dir, "svc-on")
		if out, err := exec.Command("go", "build", "-trimpath", "-o", on, "github.com/svc-dev/svc/cmd/svc").CombinedOutput(); err != nil {
			b.Skipf("cannot build ./cmd/svc (set SVC_BENCH_BIN): %v\n%s", err, out)
		}
	}
	off = os.Getenv("SVC_BENCH_BASE_BIN")
	if off != "" {
		return off, on
	}
	off = filepath.Join(dir, "svc-off")
	rev := os.Getenv(durableBaseRevEnv)
	if rev == "" {
		if out, err := exec.Command("go", "build", "-trimpath", "-tags", "nosteps", "-o", off, "github.com/svc-dev/svc/cmd/svc").CombinedOutput(); err != nil {
			b.Skipf("cannot build ./cmd/svc -tags nosteps (set SVC_BENCH_BASE_BIN): %v\n%s", err, out)
		}
		return off, on
	}
	src := filepath.Join(dir, "base")
	if err := os.Mkdir(src, 0o755); err != nil {
		b.Fatal(err)
	}
	// The module's root is the parent of bench/, the test's directory.
	archive := exec.Command("sh", "-c", `git -C .. archive "$1" | tar -x -C "$2"`, "sh", rev, src)
	if out, err := archive.CombinedOutput(); err != nil {
		b.Skipf("cannot extract the base build %s (set SVC_BENCH_BASE_BIN to a svc binary built without step recording): %v\n%s", rev, err, out)
	}
	// -trimpath: without the extracted tree's path in them, its packages
	// are the build cache's from the second build on.
	build := exec.Command("go", "build", "-trimpath", "-o", off, "./cmd/svc")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		b.Skipf("cannot build the base %s (set SVC_BENCH_BASE_BIN): %v\n%s", rev, err, out)
	}
	return off, on
}

// durableSpecs writes the benchmarks' specs into a new directory: agent
// slow (test:echo answering after 50 ms), group pipe3 (three slow nodes
// in a line: three model calls a run), and group resume2 (a node
// answering at once, then one taking slowMS), and returns the directory.
func durableSpecs(b *testing.B, slowMS int) string {
	b.Helper()
	dir := b.TempDir()
	files := map[string]string{
		"agents/slow.yaml":  "version: 1\nname: slow\nmodel: test:echo\ninstructions: Repeat the input.\nmodel_settings: {latency_ms: 50}\n",
		"agents/quick.yaml": "version: 1\nname: quick\nmodel: test:echo\ninstructions: Repeat the input.\n",
		"agents/long.yaml":  fmt.Sprintf("version: 1\nname: long\nmodel: test:echo\ninstructions: Repeat the input.\nmodel_settings: {latency_ms: %d}\n", slowMS),
		"groups/pipe3.yaml": "version: 1\nname: pipe3\nnodes:\n  one: {agent: slow}\n  two: {agent: slow}\n  three: {agent: slow}\n" +
			"edges:\n  - {from: one, to: two}\n  - {from: two, to: three}\n",
		"groups/resume2.yaml": "version: 1\nname: resume2\nnodes:\n  first: {agent: quick}\n  second: {agent: long}\nedges:\n  - {from: first, to: second}\n",
	}
	for name, text := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	return dir
}

// freePort is a loopback port nothing listens on now, so that a server
// can be started, killed and started again on the same address.
func freePort(b *testing.B) int {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startLife starts `svc serve` from bin with its default flags but for
// --specs, --data-dir and --port (and extra), its log (stderr and stdout) appended to
// logPath, and returns it once /readyz answers 200, with the time of the
// exec. The process is stopped (SIGTERM) at the end of b unless killed
// before.
func startLife(b *testing.B, bin, specs, dataDir string, port int, logPath string, extra ...string) (*proc, time.Time) {
	b.Helper()
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(bin, append([]string{"serve", "--specs", specs, "--data-dir", dataDir, "--port", strconv.Itoa(port)}, extra...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	p := &proc{url: fmt.Sprintf("http://127.0.0.1:%d", port), cmd: cmd, log: logPath, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	b.Cleanup(p.stop)
	c := &http.Client{Timeout: time.Second}
	for deadline := start.Add(120 * time.Second); time.Now().Before(deadline); {
		if resp, err := c.Get(p.url + "/readyz"); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, start
			}
		}
		select {
		case err := <-p.done:
			p.done <- err // for stop, at cleanup
			out, _ := os.ReadFile(logPath)
			b.Fatalf("svc serve exited: %v\n%s", err, out)
		case <-time.After(5 * time.Millisecond):
		}
	}
	out, _ := os.ReadFile(logPath)
	b.Fatalf("svc serve not ready within 120 s:\n%s", out)
	return nil, time.Time{}
}

// kill9 ends p with SIGKILL, as a crash would, and waits for it; stop does
// nothing after it.
func kill9(p *proc) {
	p.once.Do(func() {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
	})
}

// runsClient reads runs' status and results from one server.
type runsClient struct {
	c    *http.Client
	base string
}

func newRunsClient(base string) *runsClient {
	return &runsClient{base: base, c: &http.Client{Timeout: 30 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: 64, MaxConnsPerHost: 64}}}
}

func (rc *runsClient) close() { rc.c.CloseIdleConnections() }

// get decodes the JSON answer of GET path into v; a status other than 200
// is an error.
func (rc *runsClient) get(path string, v any) error {
	resp, err := rc.c.Get(rc.base + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("GET %s: %d %s", path, resp.StatusCode, body)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// statuses fetches the status of every id, 16 at a time.
func (rc *runsClient) statuses(ids []string) ([]svc.RunStatus, error) {
	out := make([]svc.RunStatus, len(ids))
	var next atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(ids) || failed.Load() != nil {
					return
				}
				if err := rc.get("/runs/"+ids[i]+"/status", &out[i]); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		return nil, *err
	}
	return out, nil
}

// waitStatuses polls the status of ids until every one satisfies ok,
// dropping each once it does, and returns their last statuses; it fails
// b after limit.
func (rc *runsClient) waitStatuses(b *testing.B, ids []string, every, limit time.Duration, what string, ok func(svc.RunStatus) bool) map[string]svc.RunStatus {
	b.Helper()
	last := make(map[string]svc.RunStatus, len(ids))
	pending := slices.Clone(ids)
	deadline := time.Now().Add(limit)
	for len(pending) > 0 {
		sts, err := rc.statuses(pending)
		if err != nil {
			b.Fatal(err)
		}
		var left []string
		for i, st := range sts {
			last[pending[i]] = st
			if !ok(st) {
				left = append(left, pending[i])
			}
		}
		if pending = left; len(pending) == 0 {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d runs not %s within %v; one: %+v", len(pending), len(ids), what, limit, last[pending[0]])
		}
		time.Sleep(every)
	}
	return last
}

func terminal(st svc.RunStatus) bool {
	switch st.State {
	case svc.RunCompleted, svc.RunFailed, svc.RunCancelled:
		return true
	}
	return false
}

// submitLua is the wrk script of BenchmarkDurableSubmit: POST /submit of
// the target named by its second argument, each accepted run's id written
// to a file per wrk thread under the directory named by its first, and a
// RESULT line of JSON at the end (latencies in µs).
const submitLua = `
local threads, counter = {}, 0
function setup(thread)
  thread:set("n", counter)
  table.insert(threads, thread)
  counter = counter + 1
end
function init(args)
  out = assert(io.open(args[1] .. "/ids-" .. n, "w"))
  wrk.method = "POST"
  wrk.body = '{"target":"' .. args[2] .. '","task":{"input":{"text":"hello world"}}}'
  wrk.headers["Content-Type"] = "application/json"
  bad = 0
end
function response(status, headers, body)
  local id = status == 202 and body:match('"run_id":"([^"]+)"')
  if id then out:write(id, "\n") else bad = bad + 1 end
end
function done(summary, latency, requests)
  local bad = 0
  for _, t in ipairs(threads) do bad = bad + t:get("bad") end
  local e = summary.errors
  io.write(string.format('RESULT {"requests":%d,"duration_us":%d,"p50_us":%d,"p99_us":%d,"bad":%d,"errors":%d}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99), bad,
    e.connect + e.read + e.write + e.status + e.timeout))
end
`

// wrkResult is the RESULT line of submitLua.
type wrkResult struct {
	Requests   int   `json:"requests"`
	DurationUS int64 `json:"duration_us"`
	P50US      int64 `json:"p50_us"`
	P99US      int64 `json:"p99_us"`
	Bad        int   `json:"bad"`
	Errors     int   `json:"errors"`
}

// submitPass is what one pass of BenchmarkDurableSubmit measured.
type submitPass struct {
	submitted int           // runs accepted (202) and answered within the round
	round     time.Duration // wrk's own duration
	allDone   time.Duration // from wrk's start to the last run seen terminal
	p50, p99  time.Duration // submit latency
	cpu       time.Duration // the server's CPU time from wrk's start to allDone
	rss       float64       // the server's peak RSS, bytes
	steps     int64         // steps in a completed run's log (0: not recorded)
}

// runSubmitPass starts `svc serve` from bin on a new data dir, submits
// target with wrk (conns connections, for round), then polls until every
// accepted run is terminal, checks they all completed and recorded
// their steps (wantSteps) or none, and stops the server.
func runSubmitPass(b *testing.B, bin, specs, target string, round time.Duration, conns int, wantSteps bool) submitPass {
	b.Helper()
	dir := b.TempDir()
	p, _ := startLife(b, bin, specs, filepath.Join(dir, "data"), freePort(b), filepath.Join(dir, "serve.log"))
	defer p.stop()
	script := filepath.Join(dir, "submit.lua")
	if err := os.WriteFile(script, []byte(submitLua), 0o644); err != nil {
		b.Fatal(err)
	}
	pid := p.cmd.Process.Pid
	cpu0 := procCPUTime(pid)
	start := time.Now()
	out, err := exec.Command("wrk", "-t2", "-c"+strconv.Itoa(conns), fmt.Sprintf("-d%ds", max(1, int(round.Seconds()))),
		"--timeout", "10s", "-s", script, p.url+"/submit", "--", dir, target).CombinedOutput()
	if err != nil {
		b.Fatalf("wrk: %v\n%s", err, out)
	}
	var res wrkResult
	for line := range strings.Lines(string(out)) {
		if v, ok := strings.CutPrefix(line, "RESULT "); ok {
			if err := json.Unmarshal([]byte(v), &res); err != nil {
				b.Fatalf("wrk: %v in %q", err, line)
			}
		}
	}
	if res.Requests == 0 || res.Bad > 0 || res.Errors > 0 {
		b.Fatalf("wrk: %d requests, %d not answered 202 with a run id, %d errors\n%s", res.Requests, res.Bad, res.Errors, out)
	}
	// The ids of each wrk thread, in the order it submitted them.
	var perThread [][]string
	var ids []string
	for n := 0; ; n++ {
		data, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("ids-%d", n)))
		if err != nil {
			break
		}
		t := strings.Fields(string(data))
		perThread = append(perThread, t)
		ids = append(ids, t...)
	}
	if len(ids) != res.Requests {
		b.Fatalf("wrk counted %d requests, its threads wrote %d run ids", res.Requests, len(ids))
	}
	// The time the last run ended: the last runs each thread submitted
	// end last (a run takes the same time as any other), so they are
	// polled closely; then every run is checked, and any still going is
	// waited for too.
	rc := newRunsClient(p.url)
	defer rc.close()
	var tail []string
	for _, t := range perThread {
		tail = append(tail, t[max(0, len(t)-64):]...)
	}
	rc.waitStatuses(b, tail, 10*time.Millisecond, 5*time.Minute, "terminal", terminal)
	pass := submitPass{submitted: len(ids), round: time.Duration(res.DurationUS) * time.Microsecond,
		allDone: time.Since(start), cpu: procCPUTime(pid) - cpu0,
		p50: time.Duration(res.P50US) * time.Microsecond, p99: time.Duration(res.P99US) * time.Microsecond}
	sts, err := rc.statuses(ids)
	if err != nil {
		b.Fatal(err)
	}
	var going []string
	for i, st := range sts {
		if !terminal(st) {
			going = append(going, ids[i])
		}
	}
	if len(going) > 0 {
		rc.waitStatuses(b, going, 10*time.Millisecond, 5*time.Minute, "terminal", terminal)
		pass.allDone, pass.cpu = time.Since(start), procCPUTime(pid)-cpu0
		if sts, err = rc.statuses(ids); err != nil {
			b.Fatal(err)
		}
	}
	pass.rss = procPeakRSS(pid)
	for i, st := range sts {
		if st.State != svc.RunCompleted {
			b.Fatalf("run %s of %s ended %s (%s)", ids[i], target, st.State, st.Reason)
		}
		if wantSteps != (st.Steps > 0) {
			b.Fatalf("run %s of %s (%s) recorded %d steps; want them recorded: %v", ids[i], target, bin, st.Steps, wantSteps)
		}
		pass.steps = st.Steps
	}
	return pass
}

// BenchmarkDurableSubmit is issue 30 part 6's cost of step recording on
// the HTTP submit path: POST /submit from wrk (a process of its own, 64
// connections, closed loop, for SVC_BENCH_ROUND, default 10 s) to the
// `svc serve` binary with its default flags, for agent slow (one test:echo
// model call taking 50 ms) and group pipe3 (three of them in a line: six
// steps a run), then polling every run's status until it ends. Each pass
// is a new server on a new data dir; the build without step recording
// ("off", see durableBinaries) and this one ("on") alternate, in the order
// off-on, on-off, ..., SVC_BENCH_PASSES times each (default 3). It
// reports, per build, the median pass's runs submitted a second (wrk's
// count over its duration), runs completed a second (over the time from
// wrk's start to the last run's end), p50/p99 submit latency and the
// server's CPU per run, the largest peak RSS, and on/off ratios; target: on at most 10 % slower. Every accepted run must
// complete, with its steps recorded by the on build and none by the off.
func BenchmarkDurableSubmit(b *testing.B) {
	if _, err := exec.LookPath("wrk"); err != nil {
		b.Skip("wrk not installed (apt-get install wrk): it is the load generator")
	}
	off, on := durableBinaries(b)
	round := envDuration(b, "SVC_BENCH_ROUND", 10*time.Second)
	passes := 3
	if v := os.Getenv("SVC_BENCH_PASSES"); v != "" {
		var err error
		if passes, err = strconv.Atoi(v); err != nil || passes < 1 {
			b.Fatalf("SVC_BENCH_PASSES %q: want a positive number", v)
		}
	}
	specs := durableSpecs(b, 30000)
	for _, target := range []string{"slow", "pipe3"} {
		b.Run(target, func(b *testing.B) {
			for range b.N {
				got := map[string][]submitPass{}
				for i := range passes {
					order := []string{"off", "on"}
					if i%2 == 1 {
						order = []string{"on", "off"}
					}
					for _, build := range order {
						bin := off
						if build == "on" {
							bin = on
						}
						ps := runSubmitPass(b, bin, specs, target, round, 64, build == "on")
						b.Logf("pass %d %s %s: %d runs, %.0f submitted/s, %.0f completed/s (last ended %.2f s after the start), p50 %.1f ms, p99 %.1f ms, %.0f µs CPU/run, peak RSS %.0f MiB, %d steps/run; load %s",
							i+1, target, build, ps.submitted, float64(ps.submitted)/ps.round.Seconds(), float64(ps.submitted)/ps.allDone.Seconds(),
							ps.allDone.Seconds(), ms(ps.p50), ms(ps.p99), float64(ps.cpu.Microseconds())/float64(ps.submitted), ps.rss/(1<<20), ps.steps, loadAvg())
						got[build] = append(got[build], ps)
					}
				}
				sum := map[string]submitSummary{}
				for _, build := range []string{"off", "on"} {
					s := summarize(got[build])
					sum[build] = s
					b.ReportMetric(s.submitted, build+"_submitted/s")
					b.ReportMetric(s.completed, build+"_completed/s")
					b.ReportMetric(s.p50, build+"_p50_ms")
					b.ReportMetric(s.p99, build+"_p99_ms")
					b.ReportMetric(s.cpuPerRun, build+"_cpu_us/run")
					b.ReportMetric(s.rss, build+"_peak_rss_MiB")
				}
				b.ReportMetric(sum["on"].submitted/sum["off"].submitted, "on/off_submitted")
				b.ReportMetric(sum["on"].completed/sum["off"].completed, "on/off_completed")
				b.ReportMetric(sum["on"].cpuPerRun/sum["off"].cpuPerRun, "on/off_cpu")
			}
		})
	}
}

// submitSummary is one build's passes together: the median pass's
// figure of each (a pass that another process's burst slowed does not
// move it), and the largest peak RSS.
type submitSummary struct {
	submitted, completed float64 // runs a second
	p50, p99             float64 // ms
	cpuPerRun            float64 // µs
	rss                  float64 // MiB
}

func summarize(ps []submitPass) submitSummary {
	median := func(f func(submitPass) float64) float64 {
		v := make([]float64, len(ps))
		for i, p := range ps {
			v[i] = f(p)
		}
		slices.Sort(v)
		if len(v)%2 == 0 {
			return (v[len(v)/2-1] + v[len(v)/2]) / 2
		}
		return v[len(v)/2]
	}
	s := submitSummary{
		submitted: median(func(p submitPass) float64 { return float64(p.submitted) / p.round.Seconds() }),
		completed: median(func(p submitPass) float64 { return float64(p.submitted) / p.allDone.Seconds() }),
		p50:       median(func(p submitPass) float64 { return ms(p.p50) }),
		p99:       median(func(p submitPass) float64 { return ms(p.p99) }),
		cpuPerRun: median(func(p submitPass) float64 { return float64(p.cpu.Microseconds()) / float64(p.submitted) }),
	}
	for _, p := range ps {
		s.rss = max(s.rss, p.rss/(1<<20))
	}
	return s
}

// loadAvg is the machine's 1-minute load average, from /proc/loadavg.
func loadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}

// submitRuns submits n runs of target to base, 32 at a time, run i with
// input {"n": i}, and returns their ids in that order.
func submitRuns(b *testing.B, base, target string, n int) []string {
	b.Helper()
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 32}}
	defer c.CloseIdleConnections()
	ids := make([]string, n)
	var next atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || failed.Load() != nil {
					return
				}
				body := fmt.Sprintf(`{"target":%q,"task":{"input":{"n":%d}}}`, target, i)
				resp, err := c.Post(base+"/submit", "application/json", strings.NewReader(body))
				if err == nil {
					var v struct {
						RunID string `json:"run_id"`
					}
					data, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					switch {
					case resp.StatusCode != http.StatusAccepted:
						err = fmt.Errorf("POST /submit: %d %s", resp.StatusCode, data)
					default:
						if err = json.Unmarshal(data, &v); err == nil && v.RunID == "" {
							err = fmt.Errorf("POST /submit: no run_id in %s", data)
						}
					}
					ids[i] = v.RunID
				}
				if err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
	return ids
}

// countLines counts the lines of the file at path containing s.
func countLines(b *testing.B, path, s string) int {
	b.Helper()
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if bytes.Contains(sc.Bytes(), []byte(s)) {
			n++
		}
	}
	return n
}

// BenchmarkDurableResume is issue 30 part 6's resume at scale:
// SVC_BENCH_RESUME_RUNS (default 1,000) runs of group resume2 (node first
// answers at once, node second after SVC_BENCH_RESUME_SLOW, default 30 s)
// submitted to `svc serve` with its default flags, all running with their
// first node done, the server killed with SIGKILL and started again on the same
// --data-dir and port. It measures the time from the restart's exec to
// /readyz answering 200 and to every run's status showing "resumed": 1,
// and the restarted server's peak RSS; then it waits for every run to end
// and checks that each completed with its own input as its output, the
// first node not run again (the run's step log: each step once). The same
// scenario with the build without step recording ("off") is the baseline:
// its restart marks the runs failed with reason interrupted, which is
// checked too.
func BenchmarkDurableResume(b *testing.B) {
	off, on := durableBinaries(b)
	n := 1000
	if v := os.Getenv("SVC_BENCH_RESUME_RUNS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			b.Fatalf("SVC_BENCH_RESUME_RUNS %q: want a positive number", v)
		}
	}
	slow := envDuration(b, "SVC_BENCH_RESUME_SLOW", 30*time.Second)
	specs := durableSpecs(b, int(slow.Milliseconds()))
	for range b.N {
		for _, build := range []string{"off", "on"} {
			bin := off
			if build == "on" {
				bin = on
			}
			b.Run(build, func(b *testing.B) { resumePass(b, bin, specs, n, slow, build == "on") })
		}
	}
}

// resumePass is one build's scenario of BenchmarkDurableResume.
func resumePass(b *testing.B, bin, specs string, n int, slow time.Duration, resumes bool) {
	dir := b.TempDir()
	data, logPath, port := filepath.Join(dir, "data"), filepath.Join(dir, "serve.log"), freePort(b)
	p, _ := startLife(b, bin, specs, data, port, logPath)
	rc := newRunsClient(p.url)
	defer rc.close()
	t0 := time.Now()
	ids := submitRuns(b, p.url, "resume2", n)
	submitted := time.Since(t0)
	// Running, the first node's answer in (recorded, when the build
	// records steps), the second node waiting on its model.
	rc.waitStatuses(b, ids, 100*time.Millisecond, 5*time.Minute, "running with their first node done", func(st svc.RunStatus) bool {
		return st.State == svc.RunRunning && st.Progress != nil && st.Progress.Completed >= 1 && (!resumes || st.Steps >= 1)
	})
	inFlight := time.Since(t0)
	if inFlight > slow/2 {
		b.Fatalf("%d runs took %v to be in flight: SVC_BENCH_RESUME_SLOW (%v) must be much longer", n, inFlight, slow)
	}
	rss1 := procPeakRSS(p.cmd.Process.Pid)
	kill9(p)

	p, restart := startLife(b, bin, specs, data, port, logPath)
	ready := time.Since(restart)
	rc2 := newRunsClient(p.url)
	defer rc2.close()
	// A run's status shows resumed 1 from the restart's claim on, and an
	// unresumable run's failed interrupted.
	last := rc2.waitStatuses(b, ids, 10*time.Millisecond, 5*time.Minute, "resumed", func(st svc.RunStatus) bool {
		if resumes {
			return st.Resumed >= 1
		}
		return terminal(st)
	})
	allResumed := time.Since(restart)
	rss2 := procPeakRSS(p.cmd.Process.Pid)
	var ended map[string]svc.RunStatus
	if resumes {
		ended = rc2.waitStatuses(b, ids, time.Second, slow+5*time.Minute, "ended", terminal)
	} else {
		ended = last
	}
	finished := time.Since(restart)
	var steps int64
	for i, id := range ids {
		st := ended[id]
		if !resumes {
			if st.State != svc.RunFailed || st.Reason != svc.ReasonInterrupted {
				b.Fatalf("run %s after the restart of the build without resume: %s (%s); want failed (interrupted)", id, st.State, st.Reason)
			}
			continue
		}
		if st.State != svc.RunCompleted || st.Resumed != 1 {
			b.Fatalf("run %s after the restart: %s (%s), resumed %d; want completed, resumed 1", id, st.State, st.Reason, st.Resumed)
		}
		var res svc.AgentResult
		if err := rc2.get("/runs/"+id+"/result", &res); err != nil {
			b.Fatal(err)
		}
		var out struct{ N *int }
		if err := json.Unmarshal(res.Output, &out); err != nil || out.N == nil || *out.N != i {
			b.Fatalf("run %s (input {\"n\": %d}) ended with output %s", id, i, res.Output)
		}
		steps = st.Steps
	}
	if resumes {
		// Both nodes' steps (a model call and the node's outcome each)
		// once: the first node was replayed, not run again.
		if steps != 4 {
			b.Fatalf("a resumed run's step log holds %d steps, want 4", steps)
		}
		if got := countLines(b, logPath, "run_resumed"); got < n {
			b.Fatalf("%d run_resumed events logged, want %d", got, n)
		}
	}
	rss3 := procPeakRSS(p.cmd.Process.Pid)
	b.Logf("%d runs in flight %.2f s after the first submit (submitted in %.2f s), peak RSS %.0f MiB; killed; restart to /readyz %.0f ms, to every run resumed (or failed) %.0f ms, RSS %.0f MiB; every run ended %.1f s after the restart, peak RSS %.0f MiB; load %s",
		n, inFlight.Seconds(), submitted.Seconds(), rss1/(1<<20), ms(ready), ms(allResumed), rss2/(1<<20), finished.Seconds(), rss3/(1<<20), loadAvg())
	b.ReportMetric(ms(ready), "restart_to_ready_ms")
	b.ReportMetric(ms(allResumed), "restart_to_all_resumed_ms")
	b.ReportMetric(rss1/(1<<20), "before_kill_peak_rss_MiB")
	b.ReportMetric(rss2/(1<<20), "resumed_peak_rss_MiB")
	b.ReportMetric(rss3/(1<<20), "end_peak_rss_MiB")
	if resumes {
		b.ReportMetric(finished.Seconds(), "restart_to_all_completed_s")
	}
}

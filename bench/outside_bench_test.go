package bench

// Issue 36 part 5: `make bench-outside`, the figures of issue 36 measured
// as users measure them: the real binaries with their defaults, driven
// from another process (wrk where it is installed, otherwise this test
// process's own HTTP clients), each figure printed beside its baseline
// from the same run, with the processes' RSS. See BENCHMARKS.md, "Issue 36
// part 5".

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// outsideShortEnv makes BenchmarkOutside short (make bench-outside
// SHORT=1): seconds instead of minutes, for CI; its figures are not the
// issue's.
const outsideShortEnv = "SVC_BENCH_OUTSIDE_SHORT"

// outsideSpecs writes the agents of the outside benchmark: echo
// (test:echo), echo50 (test:echo answering after 50 ms) and parked
// (answering after an hour: a run in flight).
func outsideSpecs(b *testing.B) string {
	b.Helper()
	dir := b.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "agents"), 0o755); err != nil {
		b.Fatal(err)
	}
	for name, settings := range map[string]string{"echo": "{}", "echo50": `{"latency_ms": 50}`, "parked": `{"latency_ms": 3600000}`} {
		spec := fmt.Sprintf("version: 1\nname: %s\nmodel: test:echo\nmodel_settings: %s\n", name, settings)
		if err := os.WriteFile(filepath.Join(dir, "agents", name+".yaml"), []byte(spec), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	return dir
}

// rssMiB is process pid's resident set (VmRSS) in MiB; 0 where /proc is
// not readable.
func rssMiB(pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

var wrkRate = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)

// loadRun is one round of POST /agents/echo/run at url from 64
// connections for d: wrk (2 threads, -c64) when installed, else this
// process's clients (drive). It returns requests/s.
func loadRun(b *testing.B, wrk, url string, d time.Duration) float64 {
	b.Helper()
	if wrk == "" {
		return drive(b, url, d, 64).rate()
	}
	script := filepath.Join(b.TempDir(), "post.lua")
	lua := `wrk.method = "POST"
wrk.body = '{"input":{"text":"hello world"},"request_id":"bench"}'
wrk.headers["Content-Type"] = "application/json"
local bad = 0
response = function(status, headers, body) if status ~= 200 then bad = bad + 1 end end
done = function(summary, latency, requests) if bad > 0 then io.stderr:write("non-200 answers: " .. bad .. "\n") end end
`
	if err := os.WriteFile(script, []byte(lua), 0o644); err != nil {
		b.Fatal(err)
	}
	out, err := exec.Command(wrk, "-t2", "-c64", fmt.Sprintf("-d%ds", int(d.Seconds())), "-s", script, url).CombinedOutput()
	if err != nil {
		b.Fatalf("wrk: %v\n%s", err, out)
	}
	m := wrkRate.FindSubmatch(out)
	if m == nil || bytes.Contains(out, []byte("non-200")) || bytes.Contains(out, []byte("Non-2xx")) {
		b.Fatalf("wrk against %s:\n%s", url, out)
	}
	rate, _ := strconv.ParseFloat(string(m[1]), 64)
	return rate
}

// outsideClient is the HTTP client of the load generator's own rounds.
func outsideClient(conns int) *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns}, Timeout: 60 * time.Second}
}

func postJSON(c *http.Client, url string, body []byte, want int) ([]byte, error) {
	resp, err := c.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != want {
		err = fmt.Errorf("POST %s: %d %s", url, resp.StatusCode, data)
	}
	return data, err
}

// submitAndPoll is issue 36's shape of background runs: n submits of
// agent from clients concurrent clients, each submitting its share and
// then polling the status of each of its runs until done. It returns runs
// done per second (first submit to last done) and the submits' latencies.
func submitAndPoll(b *testing.B, base, agent string, n, clients int) (float64, []time.Duration) {
	b.Helper()
	c := outsideClient(clients)
	defer c.CloseIdleConnections()
	var (
		mu    sync.Mutex
		lats  []time.Duration
		fail  atomic.Pointer[error]
		wg    sync.WaitGroup
		start = time.Now()
	)
	for k := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var ids []string
			for i := k; i < n; i += clients {
				body := fmt.Sprintf(`{"target":%q,"task":{"input":{"n":%d}}}`, agent, i)
				t0 := time.Now()
				data, err := postJSON(c, base+"/submit", []byte(body), http.StatusAccepted)
				var out struct {
					RunID string `json:"run_id"`
				}
				if err == nil {
					err = json.Unmarshal(data, &out)
				}
				if err != nil {
					fail.CompareAndSwap(nil, &err)
					return
				}
				mu.Lock()
				lats = append(lats, time.Since(t0))
				mu.Unlock()
				ids = append(ids, out.RunID)
			}
			for _, id := range ids {
				for {
					resp, err := c.Get(base + "/runs/" + id + "/status")
					if err != nil {
						fail.CompareAndSwap(nil, &err)
						return
					}
					var st struct {
						State string `json:"state"`
					}
					err = json.NewDecoder(resp.Body).Decode(&st)
					resp.Body.Close()
					if err != nil {
						fail.CompareAndSwap(nil, &err)
						return
					}
					if st.State == "completed" {
						break
					}
					if st.State == "failed" || st.State == "cancelled" {
						err := fmt.Errorf("run %s %s", id, st.State)
						fail.CompareAndSwap(nil, &err)
						return
					}
					time.Sleep(5 * time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	if err := fail.Load(); err != nil {
		b.Fatal(*err)
	}
	return float64(n) / time.Since(start).Seconds(), lats
}

// syncRuns runs n POST /agents/{agent}/run from clients clients: the
// baseline of submitAndPoll, the same work waited for on the connection.
func syncRuns(b *testing.B, base, agent string, n, clients int) float64 {
	b.Helper()
	c := outsideClient(clients)
	defer c.CloseIdleConnections()
	var fail atomic.Pointer[error]
	var wg sync.WaitGroup
	start := time.Now()
	for k := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := k; i < n; i += clients {
				if _, err := postJSON(c, base+"/agents/"+agent+"/run", []byte(fmt.Sprintf(`{"input":{"n":%d}}`, i)), http.StatusOK); err != nil {
					fail.CompareAndSwap(nil, &err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := fail.Load(); err != nil {
		b.Fatal(*err)
	}
	return float64(n) / time.Since(start).Seconds()
}

// parkRuns submits n runs of agent parked, from 64 connections, and
// waits until the server counts them all running; it returns how long the
// submits took.
func parkRuns(b *testing.B, base string, n int) time.Duration {
	b.Helper()
	const clients = 64
	c := outsideClient(clients)
	defer c.CloseIdleConnections()
	var fail atomic.Pointer[error]
	var wg sync.WaitGroup
	start := time.Now()
	for k := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := k; i < n; i += clients {
				if _, err := postJSON(c, base+"/submit", []byte(fmt.Sprintf(`{"target":"parked","task":{"input":{"n":%d}}}`, i)), http.StatusAccepted); err != nil {
					fail.CompareAndSwap(nil, &err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := fail.Load(); err != nil {
		b.Fatal(*err)
	}
	return time.Since(start)
}

// ndjsonTasks streams n tasks, one a line, task i with id "i" and input
// {"n": i, "text": "hello world"}.
func ndjsonTasks(n int) io.Reader {
	pr, pw := io.Pipe()
	go func() {
		w := bufio.NewWriterSize(pw, 64<<10)
		for i := range n {
			fmt.Fprintf(w, `{"id":"%d","input":{"n":%d,"text":"hello world"}}`+"\n", i, i)
		}
		_ = w.Flush()
		_ = pw.Close()
	}()
	return pr
}

// gatherNDJSON posts n echo tasks to /agents/echo/gather as a stream
// (one TaskSpec a line, max_concurrency conc) and reads the results as
// they finish; it returns tasks/s, request to summary.
func gatherNDJSON(b *testing.B, base string, n, conc int) float64 {
	b.Helper()
	req, err := http.NewRequest(http.MethodPost, fmt.Sprintf("%s/agents/echo/gather?max_concurrency=%d", base, conc), ndjsonTasks(n))
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-ndjson")
	req.Header.Set("Accept", "application/x-ndjson")
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(resp.Body)
		b.Fatalf("gather: %d %s", resp.StatusCode, data)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	results, failed := 0, 0
	for sc.Scan() {
		line := sc.Bytes()
		switch {
		case len(line) == 0:
		case bytes.HasPrefix(line, []byte(`{"summary"`)):
			var s struct {
				Summary struct {
					Success int `json:"success_count"`
					Failure int `json:"failure_count"`
				} `json:"summary"`
			}
			if err := json.Unmarshal(line, &s); err != nil || s.Summary.Success != n || results != n {
				b.Fatalf("gather summary %s after %d results (%d failed): %v", line, results, failed, err)
			}
			return float64(n) / time.Since(start).Seconds()
		default:
			results++
			if !bytes.Contains(line, []byte(`"success":true`)) && failed < 3 {
				failed++
				b.Logf("failed: %s", line)
			}
		}
	}
	b.Fatalf("gather ended after %d results without a summary: %v", results, sc.Err())
	return 0
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

// BenchmarkOutside is `make bench-outside`: issue 36's table, each figure
// from outside the server's process beside its baseline from the same run:
//
//  1. POST /agents/echo/run on `svc serve` (default flags) against a bare
//     chi handler doing the same JSON work, wrk -c64 (or 64 Go clients),
//     alternating rounds, the median ratio;
//  2. the RSS of both servers after that load;
//  3. 1,000 submits of a 50 ms test:echo agent from 16 clients, each
//     polling its runs' status until done: runs/s and submit p50, beside
//     the same 1,000 runs as synchronous POST /run from 16 clients;
//  4. 100,000 runs in flight through a fresh `svc serve` over HTTP: RSS
//     per run (its growth from idle over the runs);
//  5. 100,000 test:echo tasks as one streamed gather through `svc serve
//     --broker embedded` to one `svc worker start` process, beside the
//     same gather run in the first server's process.
//
// SVC_BENCH_OUTSIDE_SHORT=1 shrinks every count and duration (a smoke run
// for CI, not the figures).
func BenchmarkOutside(b *testing.B) {
	short := os.Getenv(outsideShortEnv) != ""
	rounds, roundDur, submits, parked, tasks := 3, 10*time.Second, 1000, 100_000, 100_000
	if short {
		rounds, roundDur, submits, parked, tasks = 1, 2*time.Second, 200, 2000, 5000
	}
	wrk, _ := exec.LookPath("wrk")
	specs := outsideSpecs(b)
	bin := svcBinary(b)
	b.ResetTimer()
	row := func(what, fig, base string) {
		fmt.Printf("%-58s  %-34s  %s\n", what, fig, base)
	}
	gen := "wrk -t2 -c64"
	if wrk == "" {
		gen = "64 Go clients (wrk not installed)"
	}
	fmt.Printf("svc outside benchmark (%s), load generator: %s\n", map[bool]string{true: "short", false: "full"}[short], gen)

	// 1 and 2: the sync run against bare chi.
	serve := startServeWith(b, []string{"--specs", specs})
	bare := startBare(b)
	loadRun(b, wrk, serve.url+"/agents/echo/run", roundDur/2) // warm up both
	loadRun(b, wrk, bare.url+"/agents/echo/run", roundDur/2)
	var svcRates, bareRates, ratios []float64
	for range rounds {
		s := loadRun(b, wrk, serve.url+"/agents/echo/run", roundDur)
		c := loadRun(b, wrk, bare.url+"/agents/echo/run", roundDur)
		svcRates, bareRates, ratios = append(svcRates, s), append(bareRates, c), append(ratios, s/c)
	}
	row("sync run vs bare chi (POST /agents/echo/run, -c64)", fmt.Sprintf("%.0f req/s (ratio %.3f)", median(svcRates), median(ratios)),
		fmt.Sprintf("bare chi %.0f req/s; goal ratio >= 0.5", median(bareRates)))
	row("RSS after that load", fmt.Sprintf("svc serve %.0f MiB", rssMiB(serve.cmd.Process.Pid)),
		fmt.Sprintf("bare chi %.0f MiB; goal <= 400 MB", rssMiB(bare.cmd.Process.Pid)))
	bare.stop()

	// 3: background runs.
	rate, lats := submitAndPoll(b, serve.url, "echo50", submits, 16)
	base := syncRuns(b, serve.url, "echo50", submits, 16)
	row(fmt.Sprintf("%d submits of a 50 ms agent, 16 clients polling to done", submits),
		fmt.Sprintf("%.0f runs/s, submit p50 %.1f ms", rate, quantile(lats, 0.5)),
		fmt.Sprintf("the same as sync runs: %.0f runs/s; goal >= 2,200", base))

	// 5 (baseline): the gather in the first server's process.
	inproc := gatherNDJSON(b, serve.url, tasks, 2000)
	row("", fmt.Sprintf("svc serve RSS now %.0f MiB", rssMiB(serve.cmd.Process.Pid)), "")
	serve.stop()

	// 4: runs in flight on a fresh server.
	parkedSrv := startServeWith(b, []string{"--specs", specs})
	idle := rssMiB(parkedSrv.cmd.Process.Pid)
	took := parkRuns(b, parkedSrv.url, parked)
	time.Sleep(2 * time.Second) // the last submits' runs start
	held := rssMiB(parkedSrv.cmd.Process.Pid)
	row(fmt.Sprintf("%d runs in flight over HTTP (submitted in %.1f s)", parked, took.Seconds()),
		fmt.Sprintf("%.2f KiB RSS per run", (held-idle)*1024/float64(parked)),
		fmt.Sprintf("idle server %.0f MiB, with the runs %.0f MiB; goal <= 8 KiB", idle, held))
	parkedSrv.stop()

	// 5: the fleet.
	port := freePort(b)
	fleetSrv := startServeWith(b, []string{"--specs", specs, "--broker", "embedded", "--nats-listen", fmt.Sprintf("127.0.0.1:%d", port)})
	wp := startWorkerOutside(b, bin, fmt.Sprintf("nats://127.0.0.1:%d", port), specs, fleetSrv.url)
	gatherNDJSON(b, fleetSrv.url, min(tasks, 10_000), 2000) // warm up: streams, consumers
	cpu0, wcpu0 := procCPUTime(fleetSrv.cmd.Process.Pid), procCPUTime(wp.cmd.Process.Pid)
	fleetRate := gatherNDJSON(b, fleetSrv.url, tasks, 2000)
	cpu := procCPUTime(fleetSrv.cmd.Process.Pid) - cpu0 + procCPUTime(wp.cmd.Process.Pid) - wcpu0
	row(fmt.Sprintf("%d tasks through embedded NATS to one worker", tasks),
		fmt.Sprintf("%.0f tasks/s, %.0f µs CPU a task", fleetRate, float64(cpu.Microseconds())/float64(tasks)),
		fmt.Sprintf("in process: %.0f tasks/s; goal >= 20,000", inproc))
	row("", fmt.Sprintf("RSS: svc serve %.0f MiB, worker %.0f MiB", rssMiB(fleetSrv.cmd.Process.Pid), rssMiB(wp.cmd.Process.Pid)), "")
	b.StopTimer()
	b.ReportMetric(median(ratios), "sync_vs_chi")
	b.ReportMetric(rate, "submit_runs/s")
	b.ReportMetric(fleetRate, "fleet_tasks/s")
}

// startWorkerOutside starts `svc worker start` (default flags) on url,
// serving echo, and waits until the serve node at base lists it.
func startWorkerOutside(b *testing.B, bin, url, specs, base string) *workerProc {
	b.Helper()
	return startWorkerNamed(b, bin, url, specs, base, "outside-worker")
}

// startWorkerNamed is startWorkerOutside with the worker's runtime id.
func startWorkerNamed(b *testing.B, bin, url, specs, base, id string) *workerProc {
	b.Helper()
	p := &workerProc{id: id, out: &lockedBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, "worker", "start", "--broker", url, "--specs", specs, "--agents", "echo", "--runtime-id", p.id,
		"--log-level", "warn")
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	b.Cleanup(p.stop)
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(base + "/runtime/stats")
		if err == nil {
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if bytes.Contains(data, []byte(p.id)) {
				return p
			}
		}
		select {
		case <-p.done:
			b.Fatalf("worker exited at start:\n%s", p.out)
		default:
		}
		if time.Now().After(deadline) {
			b.Fatalf("the serve node did not list the worker within 60 s:\n%s", p.out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

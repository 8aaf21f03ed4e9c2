package bench

// Issue 29 part 7, the fleet half: BenchmarkGatherRateLimited's gather
// through a fleet as users run one. The real `svc serve --broker …`
// publisher and four real `svc worker start` processes (default flags but
// the broker and the specs) share one declared limit of 6,000 requests a
// minute on one llmsim key, through a real redis-server or the serve
// node's embedded nats-server. See BENCHMARKS.md, "Issue 29 part 7".

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/servertest"
)

// simSample is llmsim's count of the bench key's calls and 429s at one
// moment.
type simSample struct {
	at               time.Time
	calls, throttled int
}

// sampleSim reads llmsim's counts every interval until stop is closed,
// and returns them (the last one read after stop) on done.
func sampleSim(b *testing.B, simURL string, interval time.Duration, stop <-chan struct{}) <-chan []simSample {
	done := make(chan []simSample, 1)
	go func() {
		var out []simSample
		read := func() bool {
			c, t, err := simCountsErr(simURL)
			if err != nil {
				b.Errorf("llmsim stats: %v", err)
				return false
			}
			out = append(out, simSample{time.Now(), c, t})
			return true
		}
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				read()
				done <- out
				return
			case <-tick.C:
				if !read() {
					done <- out
					return
				}
			}
		}
	}()
	return done
}

// simCountsErr is simCounts for a goroutine other than the benchmark's:
// it returns its error instead of failing b.
func simCountsErr(simURL string) (calls, throttled int, err error) {
	get := func(path string) (int, error) {
		resp, err := http.Get(simURL + path)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		var m map[string]int
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
			return 0, fmt.Errorf("GET %s: %w", path, err)
		}
		return m["sk-bench/gpt-4o-mini"], nil
	}
	if calls, err = get("/stats"); err != nil {
		return 0, 0, err
	}
	throttled, err = get("/stats/throttled")
	return calls, throttled, err
}

// steadyRate is the rate, a minute, of the calls llmsim answered (not
// 429) between the samples where a tenth and nine tenths of want had
// been answered: the steady part, without the start (the buckets' first
// half second's worth, the workers' first draws) or the tail (the last
// tasks on fewer workers). 0 when the samples do not span it.
func steadyRate(samples []simSample, want int) (rate float64, span time.Duration) {
	var from, to *simSample
	for i := range samples {
		ok := samples[i].calls - samples[i].throttled
		if from == nil && ok >= want/10 {
			from = &samples[i]
		}
		if to == nil && ok >= want*9/10 {
			to = &samples[i]
		}
	}
	if from == nil || to == nil || !to.at.After(from.at) {
		return 0, 0
	}
	span = to.at.Sub(from.at)
	n := (to.calls - to.throttled) - (from.calls - from.throttled)
	return float64(n) / span.Minutes(), span
}

// startWorkerServe starts `svc worker start --broker url --specs specs`,
// its log (stderr, default level and format) to a file, stopped at the
// end of b.
func startWorkerServe(b *testing.B, bin, url, specs string) *proc {
	b.Helper()
	logPath := filepath.Join(b.TempDir(), "worker.log")
	logf, err := os.Create(logPath)
	if err != nil {
		b.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(bin, "worker", "start", "--broker", url, "--specs", specs)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	p := &proc{cmd: cmd, log: logPath, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	b.Cleanup(p.stop)
	return p
}

// waitWorkers waits until the serve node at url lists n live workers in
// GET /runtime/stats (it heard their worker_started), failing b if one
// of procs exits first or 60 s pass.
func waitWorkers(b *testing.B, url string, n int, procs []*proc) {
	b.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(url + "/runtime/stats")
		if err != nil {
			b.Fatal(err)
		}
		var st struct {
			Workers []struct {
				Status  string `json:"status"`
				Stopped bool   `json:"worker_stopped"`
			} `json:"workers"`
		}
		err = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if err != nil {
			b.Fatalf("GET /runtime/stats: %v", err)
		}
		live := 0
		for _, w := range st.Workers {
			if w.Status == "healthy" && !w.Stopped {
				live++
			}
		}
		if live >= n {
			return
		}
		for _, p := range procs {
			select {
			case err := <-p.done:
				p.done <- err
				out, _ := os.ReadFile(p.log)
				b.Fatalf("a worker exited at start: %v\n%s", err, out)
			default:
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("the serve node lists %d live workers after 60 s, want %d", live, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// freeLoopback is a free 127.0.0.1 address, for a listener of a process
// the benchmark starts.
func freeLoopback(b *testing.B) string {
	b.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// BenchmarkFleetGatherRateLimited: a gather of SVC_BENCH_RL_TASKS (10,000)
// tasks at max_concurrency 1,000, sent from outside to a `svc serve`
// publisher, run by four `svc worker start` processes whose agent draws
// from one declared limit of 6,000 requests a minute, the key's limit at
// llmsim (over one-second windows). redis: the broker, and so the limit's
// store, is a redis-server; nats: the serve node's embedded nats-server
// (--broker embedded), the workers connected to it. Reported: the
// gather's time against the time the limit allows (time_ratio), the
// calls llmsim refused (pct_429), failed tasks, the combined rate llmsim
// answered over the steady part (rate_rpm, rate_vs_limit), and the peak
// RSS of the serve node and of the workers.
func BenchmarkFleetGatherRateLimited(b *testing.B) {
	const rpm, conc, workers = 6000, 1000, 4
	tasks := 10_000
	if v, err := strconv.Atoi(os.Getenv("SVC_BENCH_RL_TASKS")); err == nil && v > 0 {
		tasks = v
	}
	allowed := time.Duration(float64(tasks) / rpm * float64(time.Minute))
	for _, c := range []struct {
		name string
		// broker gives the serve node's flags and the workers' --broker.
		broker func(b *testing.B) (serveArgs []string, workerURL string)
	}{
		{"redis", func(b *testing.B) ([]string, string) {
			if _, err := exec.LookPath("redis-server"); err != nil && os.Getenv("SVC_REQUIRE_REDIS") != "1" {
				b.Skipf("redis-server not found (%v): install redis-server to measure the fleet's limit shared over Redis", err)
			}
			url := servertest.Redis(b) // fails without redis-server when SVC_REQUIRE_REDIS=1, as in CI
			return []string{"--broker", url}, url
		}},
		{"nats", func(b *testing.B) ([]string, string) {
			addr := freeLoopback(b)
			return []string{"--broker", "embedded", "--nats-listen", addr}, "nats://" + addr
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				serveArgs, workerURL := c.broker(b)
				bin := svcBinary(b)
				sim := startLLMSim(b, "--rpm", strconv.Itoa(rpm), "--window", "1s")
				specs := rlSpecs(b, sim.url, rpm)
				srv := startServeWith(b, append([]string{"--specs", specs}, serveArgs...))
				var procs []*proc
				for range workers {
					procs = append(procs, startWorkerServe(b, bin, workerURL, specs))
				}
				waitWorkers(b, srv.url, workers, procs)

				var body bytes.Buffer
				body.WriteString(`{"max_concurrency":` + strconv.Itoa(conc) + `,"tasks":[`)
				for i := range tasks {
					if i > 0 {
						body.WriteByte(',')
					}
					fmt.Fprintf(&body, `{"input":"task %d"}`, i)
				}
				body.WriteString("]}")
				client := &http.Client{Timeout: 30 * time.Minute}

				stop := make(chan struct{})
				samples := sampleSim(b, sim.url, 200*time.Millisecond, stop)
				start := time.Now()
				resp, err := client.Post(srv.url+"/agents/sim/gather", "application/json", &body)
				if err != nil {
					close(stop)
					<-samples
					b.Fatal(err)
				}
				var results []struct {
					Success bool `json:"success"`
					Error   *struct {
						Type    string `json:"type"`
						Message string `json:"message"`
					} `json:"error"`
				}
				err = json.NewDecoder(resp.Body).Decode(&results)
				resp.Body.Close()
				took := time.Since(start)
				close(stop)
				ss := <-samples
				if err != nil || resp.StatusCode != http.StatusOK || len(results) != tasks {
					b.Fatalf("gather: %d, %d results, %v", resp.StatusCode, len(results), err)
				}
				failed := 0
				var firstErr string
				for _, r := range results {
					if !r.Success {
						failed++
						if firstErr == "" && r.Error != nil {
							firstErr = r.Error.Type + ": " + r.Error.Message
						}
					}
				}
				calls, throttled := simCounts(b, sim.url)
				rate, span := steadyRate(ss, tasks)

				// Peak RSS before the processes stop.
				serveRSS := procPeakRSS(srv.cmd.Process.Pid) / (1 << 20)
				var maxWorker, sumWorker float64
				var workerRSS []string
				for _, p := range procs {
					r := procPeakRSS(p.cmd.Process.Pid) / (1 << 20)
					maxWorker, sumWorker = max(maxWorker, r), sumWorker+r
					workerRSS = append(workerRSS, strconv.FormatFloat(r, 'f', 0, 64))
				}

				b.ReportMetric(took.Seconds(), "s/gather")
				b.ReportMetric(took.Seconds()/allowed.Seconds(), "time_ratio")
				b.ReportMetric(100*float64(throttled)/float64(max(calls, 1)), "pct_429")
				b.ReportMetric(float64(throttled), "429s")
				b.ReportMetric(float64(calls), "calls")
				b.ReportMetric(float64(failed), "failed_tasks")
				b.ReportMetric(rate, "rate_rpm")
				b.ReportMetric(rate/rpm, "rate_vs_limit")
				b.ReportMetric(serveRSS, "serve_peak_rss_MiB")
				b.ReportMetric(maxWorker, "worker_max_peak_rss_MiB")
				b.ReportMetric(sumWorker, "workers_sum_peak_rss_MiB")
				b.Logf("%s: %d tasks in %v (the limit allows %v): %d ok, %d failed%s; %d calls at llmsim, %d refused (429); "+
					"%.0f a minute answered over the steady %v (limit %d); peak RSS: serve %.0f MiB, workers %v MiB",
					c.name, tasks, took.Round(100*time.Millisecond), allowed, tasks-failed, failed, firstOf(firstErr),
					calls, throttled, rate, span.Round(100*time.Millisecond), rpm, serveRSS, workerRSS)
			}
		})
	}
}

// firstOf formats a failed task's error for the log, if any.
func firstOf(e string) string {
	if e == "" {
		return ""
	}
	return " (the first: " + e + ")"
}

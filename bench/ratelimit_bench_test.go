package bench

// Issue 29 part 7: flow control measured as users run it. The real `svc
// serve` binary with its default flags, an agent on the openai provider
// pointed at the real `llmsim` binary limiting its key to 6,000 requests a
// minute over one-second windows (as hosted APIs enforce per-minute
// limits), a gather of 10,000 tasks at max_concurrency 1,000 sent from
// outside, and a sync run at priority high submitted during the flood.
// Each case beside the others in the same run; SVC_BENCH_BIN names another
// build (the one before flow control, as the baseline). See BENCHMARKS.md,
// "Issue 29".

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// rlSpecs writes a specs directory with the agent "sim" on the openai
// provider pointed at simURL; with limit > 0, a runtime.yaml declaring the
// limit "sim" of limit requests a minute that the agent draws from.
func rlSpecs(b *testing.B, simURL string, limit int) string {
	b.Helper()
	dir := b.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "agents"), 0o755); err != nil {
		b.Fatal(err)
	}
	spec := fmt.Sprintf("version: 1\nname: sim\nmodel: openai:gpt-4o-mini\nmodel_settings:\n  base_url: %s/v1\n  api_key: sk-bench\n", simURL)
	if limit > 0 {
		spec += "  rate_limit: sim\n"
		rt := fmt.Sprintf("version: 1\nrate_limits:\n  sim:\n    requests_per_minute: %d\n", limit)
		if err := os.WriteFile(filepath.Join(dir, "runtime.yaml"), []byte(rt), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "agents", "sim.yaml"), []byte(spec), 0o644); err != nil {
		b.Fatal(err)
	}
	return dir
}

// simCounts reads llmsim's calls and 429s of the bench's key and model.
func simCounts(b *testing.B, simURL string) (calls, throttled int) {
	b.Helper()
	get := func(path string) int {
		resp, err := http.Get(simURL + path)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]int
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
			b.Fatalf("GET %s: %v", path, err)
		}
		return m["sk-bench/gpt-4o-mini"]
	}
	return get("/stats"), get("/stats/throttled")
}

// BenchmarkGatherRateLimited: a gather of SVC_BENCH_RL_TASKS (10,000) tasks
// at max_concurrency 1,000 against a key limited to 6,000 requests a
// minute. declared: runtime.yaml names the limit; learned: nothing is
// declared and the key's limit is learned from the provider's answers.
// Reported: the gather's time against the time the limit allows
// (time_ratio), the calls llmsim refused (pct_429), the tasks that failed,
// the sync run at priority high sent 10 s into the flood (high_sync_ms),
// and the server's peak RSS.
func BenchmarkGatherRateLimited(b *testing.B) {
	const rpm, conc = 6000, 1000
	tasks := 10_000
	if v, err := strconv.Atoi(os.Getenv("SVC_BENCH_RL_TASKS")); err == nil && v > 0 {
		tasks = v
	}
	allowed := time.Duration(float64(tasks) / rpm * float64(time.Minute))
	for _, c := range []struct {
		name  string
		limit int
	}{{"declared", rpm}, {"learned", 0}} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				sim := startLLMSim(b, "--rpm", strconv.Itoa(rpm), "--window", "1s")
				srv := startServeWith(b, []string{"--specs", rlSpecs(b, sim.url, c.limit)})
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

				// The sync run at priority high, 10 s into the flood (or
				// when a fifth of the allowed time has passed, for a small
				// SVC_BENCH_RL_TASKS).
				high := make(chan time.Duration, 1)
				go func() {
					time.Sleep(min(10*time.Second, allowed/5))
					start := time.Now()
					resp, err := client.Post(srv.url+"/agents/sim/run", "application/json",
						strings.NewReader(`{"input":"now","priority":"high"}`))
					if err != nil {
						high <- -1
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						high <- -1
						return
					}
					high <- time.Since(start)
				}()

				start := time.Now()
				resp, err := client.Post(srv.url+"/agents/sim/gather", "application/json", &body)
				if err != nil {
					b.Fatal(err)
				}
				var results []struct {
					Success bool `json:"success"`
				}
				err = json.NewDecoder(resp.Body).Decode(&results)
				resp.Body.Close()
				took := time.Since(start)
				if err != nil || resp.StatusCode != http.StatusOK || len(results) != tasks {
					b.Fatalf("gather: %d, %d results, %v", resp.StatusCode, len(results), err)
				}
				failed := 0
				for _, r := range results {
					if !r.Success {
						failed++
					}
				}
				hi := <-high
				calls, throttled := simCounts(b, sim.url)
				b.ReportMetric(took.Seconds(), "s/gather")
				b.ReportMetric(took.Seconds()/allowed.Seconds(), "time_ratio")
				b.ReportMetric(100*float64(throttled)/float64(max(calls, 1)), "pct_429")
				b.ReportMetric(float64(throttled), "429s")
				b.ReportMetric(float64(failed), "failed_tasks")
				b.ReportMetric(float64(hi.Milliseconds()), "high_sync_ms")
				b.ReportMetric(procPeakRSS(srv.cmd.Process.Pid)/(1<<20), "svc_peak_rss_MiB")
				b.Logf("%s: %d tasks in %v (the limit allows %v): %d calls at llmsim, %d refused (429), %d tasks failed; the high-priority sync run answered in %v",
					c.name, tasks, took.Round(100*time.Millisecond), allowed, calls, throttled, failed, hi.Round(time.Millisecond))
			}
		})
	}
}

package bench

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/svc-dev/svc"
)

// BenchmarkWaitingRuns (issue 31 part 7): 100,000 submitted runs waiting
// at once for a person's approval in one `svc serve` with its default
// flags (the SQLite run store under the data directory), submitted over
// HTTP. A waiting run holds no actor or goroutine: its cost is its store
// rows, on disk. Printed: the server's RSS per waiting run (RSS once all
// wait, 10 s after the last submit, less the RSS of the same server warmed
// by 1,000 runs that completed: the baseline of the same run), the peak
// RSS, the submit and park rates, runs in flight (0) and the time to
// approve 1,000 of them and see them complete. Target: at most 1 KiB of
// memory per waiting run. SVC_BENCH_WAITING sets the count.
func BenchmarkWaitingRuns(b *testing.B) {
	n := 100_000
	if v := os.Getenv("SVC_BENCH_WAITING"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1000 {
			b.Fatalf("SVC_BENCH_WAITING %q: want a number from 1000", v)
		}
	}
	dir := b.TempDir()
	files := map[string]string{
		"agents/gate.yaml": "version: 1\nname: gate\nmodel: test:echo\ninstructions: Tell the time.\ntools: [current_time]\n" +
			"trust_level: low\napproval: [current_time]\nmodel_settings: {call_tools: all}\n",
		"agents/quick.yaml": "version: 1\nname: quick\nmodel: test:echo\ninstructions: Repeat the input.\n",
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
	for range b.N {
		p := startServeWith(b, []string{"--specs", dir})
		pid := p.cmd.Process.Pid
		rc := newRunsClient(p.url)
		// The baseline: the same server after 1,000 runs that completed.
		warm := submitRuns(b, p.url, "quick", 1000)
		rc.waitStatuses(b, warm, 100*time.Millisecond, 5*time.Minute, "ended", terminal)
		time.Sleep(5 * time.Second)
		base := procRSS(pid)

		t0 := time.Now()
		ids := submitRuns(b, p.url, "gate", n)
		submitted := time.Since(t0)
		// Every run parked: none in flight, n listed as waiting.
		for deadline := time.Now().Add(30 * time.Minute); ; {
			var st svc.RuntimeStats
			if err := rc.get("/runtime/stats", &st); err != nil {
				b.Fatal(err)
			}
			if st.Header.RunsInFlight == 0 {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("%d runs still in flight after 30 min", st.Header.RunsInFlight)
			}
			time.Sleep(200 * time.Millisecond)
		}
		parked := time.Since(t0)
		waiting := 0
		for cursor := ""; ; {
			var page svc.RunPage
			if err := rc.get("/runs?state=waiting&limit=1000&cursor="+cursor, &page); err != nil {
				b.Fatal(err)
			}
			waiting += len(page.Runs)
			if cursor = page.NextCursor; cursor == "" {
				break
			}
		}
		if waiting != n {
			b.Fatalf("%d runs waiting, want %d", waiting, n)
		}
		time.Sleep(10 * time.Second)
		rss, peak := procRSS(pid), procPeakRSS(pid)
		perRun := (rss - base) / float64(n)

		// Approve 1,000 of them: each resumes by replay and completes.
		some := ids[:1000]
		sts, err := rc.statuses(some)
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		for i, st := range sts {
			if len(st.Waiting) != 1 {
				b.Fatalf("run %s: status %+v, want one open request", some[i], st)
			}
			body, _ := json.Marshal(map[string]any{"request_id": st.Waiting[0].ID, "approve": true})
			resp, err := rc.c.Post(p.url+"/runs/"+some[i]+"/resume", "application/json", bytes.NewReader(body))
			if err != nil {
				b.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusAccepted {
				b.Fatalf("resume %s: %d", some[i], resp.StatusCode)
			}
		}
		done := rc.waitStatuses(b, some, 100*time.Millisecond, 5*time.Minute, "ended", terminal)
		approved := time.Since(t1)
		for id, st := range done {
			if st.State != svc.RunCompleted {
				b.Fatalf("approved run %s ended %s (%s)", id, st.State, st.Reason)
			}
		}
		rc.close()
		b.Logf("%d runs waiting at once: RSS %.0f MiB (baseline after 1,000 completed runs %.0f MiB, peak %.0f MiB): %.0f bytes of RSS per waiting run; "+
			"submitted in %.1f s (%.0f/s), all parked %.1f s after the first submit, 0 runs in flight; 1,000 approved and completed in %.2f s; load %s",
			n, rss/(1<<20), base/(1<<20), peak/(1<<20), perRun, submitted.Seconds(), float64(n)/submitted.Seconds(), parked.Seconds(), approved.Seconds(), loadAvg())
		b.ReportMetric(perRun, "rss_bytes/waiting_run")
		b.ReportMetric(peak/(1<<20), "peak_rss_MiB")
		b.ReportMetric(float64(n)/parked.Seconds(), "parked/s")
		b.ReportMetric(approved.Seconds(), "approve_1000_s")
	}
}

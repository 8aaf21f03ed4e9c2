package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/http/client"
)

// streamServer is an `svc serve` process with a test:echo agent named
// echo, in memory (no run or event store), for the streamed gather's
// benchmark: its own process, so that its peak RSS (VmHWM) is the
// server's alone.
type streamServer struct {
	cmd *exec.Cmd
	url string
}

func startStreamServer(b *testing.B) *streamServer {
	b.Helper()
	bin := svcBinary(b)
	specs := writeSpecs(b, "echo", map[string]any{})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	cmd := exec.Command(bin, "serve", "--specs", specs, "--port", strconv.Itoa(port), "--store", "memory",
		"--events", "none", "--log-level", "warn", "--data-dir", b.TempDir())
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	s := &streamServer{cmd: cmd, url: fmt.Sprintf("http://127.0.0.1:%d", port)}
	b.Cleanup(s.stop)
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(s.url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return s
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("svc serve on %s not ready after 60 s: %v", s.url, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *streamServer) stop() {
	if s.cmd.ProcessState != nil {
		return
	}
	_ = s.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
}

// peakRSS is the process's peak resident set (VmHWM), in MB.
func (s *streamServer) peakRSS(b *testing.B) float64 {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb / 1024
		}
	}
	b.Fatal("no VmHWM in /proc/PID/status")
	return 0
}

// echoTasks yields n tasks, made as they are read.
func echoTasks(n int) iter.Seq[svc.TaskSpec] {
	return func(yield func(svc.TaskSpec) bool) {
		for i := range n {
			if !yield(svc.TaskSpec{Input: json.RawMessage(`{"n":` + strconv.Itoa(i) + `,"text":"hello world"}`)}) {
				return
			}
		}
	}
}

// streamGather runs n tasks through one streamed gather and returns how
// long it took and how long until the first result.
func streamGather(b *testing.B, c *client.Client, n, conc int) (total, first time.Duration) {
	b.Helper()
	start := time.Now()
	got, failed := 0, 0
	tenth, last := max(n/10, 1), start
	var splits []string
	for item, err := range c.GatherStream(context.Background(), "echo", echoTasks(n), conc) {
		if err != nil {
			b.Fatalf("GatherStream: %v", err)
		}
		if got == 0 {
			first = time.Since(start)
		}
		got++
		if got%tenth == 0 && n >= 100_000 {
			// The rate of each tenth: a rate that falls as the batch goes
			// would be a cost that grows with it.
			now := time.Now()
			splits = append(splits, strconv.Itoa(int(float64(tenth)/now.Sub(last).Seconds())))
			last = now
		}
		if !item.Result.Success {
			failed++
		}
	}
	total = time.Since(start)
	if got != n || failed > 0 {
		b.Fatalf("%d results for %d tasks, %d failed", got, n, failed)
	}
	if len(splits) > 0 {
		b.Logf("%d tasks streamed: tasks/s of each tenth: %s", n, strings.Join(splits, " "))
	}
	return total, first
}

// BenchmarkGatherStream is issue 19's benchmark, over real HTTP to an
// `svc serve` process: SVC_BENCH_STREAM_TASKS (default 1,000,000)
// test:echo tasks through one streamed gather (NDJSON both ways) against
// the same tasks as plain JSON gathers of 10,000 each (the baseline), each
// on a fresh server so that each peak RSS is its own; then the time to
// the first result of a 100,000-task batch, streamed and plain.
// max_concurrency is 1000 throughout.
func BenchmarkGatherStream(b *testing.B) {
	n := 1_000_000
	if v := os.Getenv("SVC_BENCH_STREAM_TASKS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 10_000 || n%10_000 != 0 {
			b.Fatalf("SVC_BENCH_STREAM_TASKS=%q: want a multiple of 10,000", v)
		}
	}
	const conc, chunk, firstN = 1000, 10_000, 100_000
	newClient := func(s *streamServer) *client.Client {
		c, err := client.New(s.url, client.WithTimeout(0))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = c.Close() })
		return c
	}
	var streamRate, plainRate, streamRSS, plainRSS float64
	var streamFirst, plainFirst time.Duration
	for i := 0; i < b.N; i++ {
		// Streamed: one request.
		s := startStreamServer(b)
		c := newClient(s)
		streamGather(b, c, 10_000, conc) // warm up
		d, _ := streamGather(b, c, n, conc)
		streamRate = float64(n) / d.Seconds()
		_, streamFirst = streamGather(b, c, firstN, conc)
		streamRSS = s.peakRSS(b)
		s.stop()

		// Baseline: the same tasks as plain gathers of 10,000.
		s = startStreamServer(b)
		c = newClient(s)
		batch := make([]svc.TaskSpec, 0, chunk)
		for t := range echoTasks(chunk) {
			batch = append(batch, t)
		}
		if _, err := c.Gather(context.Background(), "echo", batch, conc); err != nil { // warm up
			b.Fatal(err)
		}
		var done atomic.Int64
		start := time.Now()
		for range n / chunk {
			res, err := c.Gather(context.Background(), "echo", batch, conc)
			if err != nil || len(res) != chunk {
				b.Fatalf("Gather: %d results, %v", len(res), err)
			}
			done.Add(int64(len(res)))
		}
		plainRate = float64(done.Load()) / time.Since(start).Seconds()
		big := make([]svc.TaskSpec, 0, firstN)
		for t := range echoTasks(firstN) {
			big = append(big, t)
		}
		start = time.Now()
		if _, err := c.Gather(context.Background(), "echo", big, conc); err != nil {
			// The plain body of 100,000 tasks exceeds the default body
			// limit: the baseline's first result is then not measured.
			plainFirst = -1
		} else {
			plainFirst = time.Since(start)
		}
		plainRSS = s.peakRSS(b)
		s.stop()
	}
	b.ReportMetric(streamRate, "stream_tasks/s")
	b.ReportMetric(plainRate, "plain_tasks/s")
	b.ReportMetric(streamRate/plainRate, "ratio")
	b.ReportMetric(streamRSS, "stream_peak_rss_MB")
	b.ReportMetric(plainRSS, "plain_peak_rss_MB")
	b.ReportMetric(float64(streamFirst.Microseconds())/1000, "stream_first_ms_100k")
	if plainFirst >= 0 {
		b.ReportMetric(float64(plainFirst.Microseconds())/1000, "plain_first_ms_100k")
	}
}

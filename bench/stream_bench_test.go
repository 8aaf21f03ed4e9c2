package bench

// Issue 27 part 6: token streaming measured as users see it. The real
// `svc serve` binary with its default flags, an agent on the openai
// provider pointed at the real `llmsim` binary (the provider simulator),
// driven from outside over HTTP; each figure beside its baseline in the
// same run, llmsim answered directly. See BENCHMARKS.md, "Issue 27".

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var (
	simOnce sync.Once
	simPath string
	simErr  error
)

// llmsimBinary builds ./cmd/llmsim into the benchmarks' temporary
// directory, once (SVC_BENCH_LLMSIM_BIN names another).
func llmsimBinary(b *testing.B) string {
	b.Helper()
	if p := os.Getenv("SVC_BENCH_LLMSIM_BIN"); p != "" {
		return p
	}
	simOnce.Do(func() {
		dir, err := os.MkdirTemp("", "svc-llmsim-bench-")
		if err != nil {
			simErr = err
			return
		}
		p := filepath.Join(dir, "llmsim")
		out, err := exec.Command("go", "build", "-o", p, "github.com/svc-dev/svc/cmd/llmsim").CombinedOutput()
		if err != nil {
			simErr = fmt.Errorf("go build ./cmd/llmsim: %v\n%s", err, out)
			return
		}
		simPath = p
	})
	if simErr != nil {
		b.Fatal(simErr)
	}
	return simPath
}

// startLLMSim starts the llmsim binary on a free loopback port with args
// and returns it once it listens; it is stopped at the end of b.
func startLLMSim(b *testing.B, args ...string) *proc {
	b.Helper()
	cmd := exec.Command(llmsimBinary(b), append([]string{"--addr", "127.0.0.1:0", "--seed", "1"}, args...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	p := &proc{cmd: cmd, done: make(chan error, 1)}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	go func() { p.done <- cmd.Wait() }()
	b.Cleanup(p.stop)
	if err != nil || !strings.HasPrefix(line, "llmsim listening on ") {
		b.Fatalf("llmsim: %q, %v", line, err)
	}
	p.url = strings.TrimSpace(strings.TrimPrefix(line, "llmsim listening on "))
	return p
}

// simSpecs writes a specs directory with one agent, "sim", on the openai
// provider pointed at llmsim, streaming.
func simSpecs(b *testing.B, simURL string) string {
	b.Helper()
	dir := b.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "agents"), 0o755); err != nil {
		b.Fatal(err)
	}
	spec := fmt.Sprintf("version: 1\nname: sim\nmodel: openai:gpt-4o-mini\nmodel_settings:\n  base_url: %s/v1\n  api_key: sk-bench\n  stream: true\n", simURL)
	if err := os.WriteFile(filepath.Join(dir, "agents", "sim.yaml"), []byte(spec), 0o644); err != nil {
		b.Fatal(err)
	}
	return dir
}

// streamTiming is what one streamed answer took, from the request sent:
// to its first fragment of text, to its end, and how many frames of text
// arrived.
type streamTiming struct {
	first, end time.Duration
	frames     int
}

// directStream asks llmsim for a streamed chat completion of prompt and
// times it: the first chunk with content, the end ([DONE]).
func directStream(c *http.Client, simURL, prompt string) (streamTiming, error) {
	body, _ := json.Marshal(map[string]any{
		"model": "gpt-4o-mini", "stream": true,
		"messages": []map[string]string{{"role": "user", "content": prompt}},
	})
	req, _ := http.NewRequest("POST", simURL+"/v1/chat/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-bench")
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return streamTiming{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return streamTiming{}, fmt.Errorf("llmsim: status %d", resp.StatusCode)
	}
	var t streamTiming
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if line == "[DONE]" {
			t.end = time.Since(start)
			return t, nil
		}
		if strings.Contains(line, `"content":"`) && !strings.Contains(line, `"content":""`) {
			if t.frames == 0 {
				t.first = time.Since(start)
			}
			t.frames++
		}
	}
	return t, fmt.Errorf("llmsim: the stream ended without [DONE]: %v", sc.Err())
}

// svcStream runs agent on svc with prompt as a sync run answered as an
// event stream and times it: the first delta frame, the result frame.
func svcStream(c *http.Client, svcURL, prompt string) (streamTiming, error) {
	body, _ := json.Marshal(map[string]any{"input": prompt})
	req, _ := http.NewRequest("POST", svcURL+"/agents/sim/run", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return streamTiming{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return streamTiming{}, fmt.Errorf("svc: status %d", resp.StatusCode)
	}
	var t streamTiming
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		switch sc.Text() {
		case "event: delta":
			if t.frames == 0 {
				t.first = time.Since(start)
			}
			t.frames++
		case "event: result":
			t.end = time.Since(start)
			if !sc.Scan() || !strings.Contains(sc.Text(), `"success":true`) {
				return t, fmt.Errorf("svc: the run failed: %s", sc.Text())
			}
			return t, nil
		case "event: error":
			sc.Scan()
			return t, fmt.Errorf("svc: %s", sc.Text())
		}
	}
	return t, fmt.Errorf("svc: the stream ended without a result: %v", sc.Err())
}

// words is a prompt of n words, which llmsim echoes back (one token per 4
// bytes: a word of "word " is 5 bytes).
func words(n int) string { return strings.TrimSpace(strings.Repeat("word ", n)) }

// BenchmarkStreamTTFD: the time to the first delta of a streamed answer
// through `svc serve` (a sync run with Accept: text/event-stream, the
// openai provider streaming from llmsim) against the time to llmsim's
// first content chunk asked directly, one request at a time, the two
// alternated; llmsim answers its first token after a fixed 20 ms. The
// difference is what svc adds: the target is at most 2 ms at p99.
func BenchmarkStreamTTFD(b *testing.B) {
	n := 300
	if v, err := strconv.Atoi(os.Getenv("SVC_BENCH_TTFD_REQUESTS")); err == nil && v > 0 {
		n = v
	}
	sim := startLLMSim(b, "--latency", "fixed", "--latency-mean", "20ms", "--tps", "200")
	srv := startServeWith(b, []string{"--specs", simSpecs(b, sim.url)})
	c := &http.Client{Timeout: 30 * time.Second}
	prompt := words(20)
	for range 20 { // warm both paths' connections
		if _, err := directStream(c, sim.url, prompt); err != nil {
			b.Fatal(err)
		}
		if _, err := svcStream(c, srv.url, prompt); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	var direct, via, added []time.Duration
	for range b.N {
		direct, via, added = direct[:0], via[:0], added[:0]
		for range n {
			d, err := directStream(c, sim.url, prompt)
			if err != nil {
				b.Fatal(err)
			}
			s, err := svcStream(c, srv.url, prompt)
			if err != nil {
				b.Fatal(err)
			}
			if s.frames == 0 {
				b.Fatal("svc answered without a delta: the provider did not stream")
			}
			direct, via = append(direct, d.first), append(via, s.first)
			added = append(added, s.first-d.first)
		}
	}
	b.StopTimer()
	b.ReportMetric(quantile(direct, 0.5), "direct_p50_ms")
	b.ReportMetric(quantile(direct, 0.99), "direct_p99_ms")
	b.ReportMetric(quantile(via, 0.5), "svc_p50_ms")
	b.ReportMetric(quantile(via, 0.99), "svc_p99_ms")
	b.ReportMetric(quantile(via, 0.99)-quantile(direct, 0.99), "added_p99_ms")
	b.ReportMetric(quantile(via, 0.5)-quantile(direct, 0.5), "added_p50_ms")
	b.ReportMetric(procPeakRSS(srv.cmd.Process.Pid)/(1<<20), "svc_peak_rss_MiB")
}

// BenchmarkStreamMany: 1,000 streamed answers at once at 50 tokens/s each
// (llmsim: 100 ms to the first token, 50 tokens/s after; an answer of
// about 125 tokens, 2.5 s), through `svc serve` as sync runs answered as
// event streams, with the default coalescing (50 ms or 256 bytes) and
// with none (--delta-interval-ms 0: each chunk its own delta), beside the
// same 1,000 streams asked of llmsim directly. Reported: each answer's
// end past its start (p50, p99), so what svc adds to it; the delta frames
// the clients got; svc's CPU time per delta frame and its peak RSS.
func BenchmarkStreamMany(b *testing.B) {
	const streams = 1000
	sim := startLLMSim(b, "--latency", "fixed", "--latency-mean", "100ms", "--tps", "50")
	prompt := words(100) // 500 bytes: 125 tokens
	specs := simSpecs(b, sim.url)
	tr := &http.Transport{MaxIdleConnsPerHost: streams, MaxConnsPerHost: 0}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 2 * time.Minute}
	// all runs f streams times at once and returns their timings.
	all := func(f func() (streamTiming, error)) []streamTiming {
		out := make([]streamTiming, streams)
		var wg sync.WaitGroup
		var failed atomic.Pointer[error]
		for i := range out {
			wg.Go(func() {
				t, err := f()
				if err != nil {
					failed.CompareAndSwap(nil, &err)
				}
				out[i] = t
			})
		}
		wg.Wait()
		if err := failed.Load(); err != nil {
			b.Fatal(*err)
		}
		return out
	}
	ends := func(ts []streamTiming) (ds []time.Duration, frames int) {
		for _, t := range ts {
			ds = append(ds, t.end)
			frames += t.frames
		}
		return ds, frames
	}
	for _, mode := range []struct {
		name string
		args []string
	}{{"coalesced", nil}, {"uncoalesced", []string{"--delta-interval-ms", "0"}}} {
		b.Run(mode.name, func(b *testing.B) {
			srv := startServeWith(b, append([]string{"--specs", specs}, mode.args...))
			pid := srv.cmd.Process.Pid
			if _, err := svcStream(c, srv.url, prompt); err != nil { // warm
				b.Fatal(err)
			}
			var direct, via []time.Duration
			var frames, chunks int
			var cpu time.Duration
			b.ResetTimer()
			for range b.N {
				d, n := ends(all(func() (streamTiming, error) { return directStream(c, sim.url, prompt) }))
				direct, chunks = append(direct, d...), chunks+n
				before := procCPUTime(pid)
				v, m := ends(all(func() (streamTiming, error) { return svcStream(c, srv.url, prompt) }))
				cpu += procCPUTime(pid) - before
				via, frames = append(via, v...), frames+m
			}
			b.StopTimer()
			if frames == 0 {
				b.Fatal("no delta frame: the provider did not stream")
			}
			b.ReportMetric(quantile(direct, 0.5), "direct_end_p50_ms")
			b.ReportMetric(quantile(direct, 0.99), "direct_end_p99_ms")
			b.ReportMetric(quantile(via, 0.5), "svc_end_p50_ms")
			b.ReportMetric(quantile(via, 0.99), "svc_end_p99_ms")
			b.ReportMetric(float64(chunks)/float64(b.N*streams), "chunks/stream")
			b.ReportMetric(float64(frames)/float64(b.N*streams), "deltas/stream")
			b.ReportMetric(float64(cpu.Microseconds())/float64(frames), "svc_cpu_us/delta")
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N*streams), "svc_cpu_us/run")
			b.ReportMetric(procPeakRSS(pid)/(1<<20), "svc_peak_rss_MiB")
		})
	}
}

package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/http/client"
)

// goClientEnv makes the bench binary, re-executed, one measurement of the
// Go client (TestMain): "stream" or "runs", against $SVC_PYBENCH_URL. The
// Go client runs in a process of its own, as the Python one does, so that
// each peak RSS is that client's alone.
const goClientEnv = "SVC_PYBENCH_GO_CLIENT"

// clientFigures is what one client measurement prints, as one JSON line.
type clientFigures struct {
	PerS    float64 `json:"per_s"`
	Seconds float64 `json:"seconds"`
	RSSMB   float64 `json:"rss_mb"`
}

// BenchmarkPythonClient (issue 35 part 5): the Python client
// (clients/python) beside the Go client, each in a process of its own,
// against one svc serve (a test:echo agent, no stores): a streamed gather
// of $SVC_PYBENCH_TASKS (100,000) tasks made as they are read, at
// max_concurrency 256 (tasks/s, client peak RSS); then $SVC_PYBENCH_RUNS
// (20,000) sync runs, 64 in flight (runs/s; Python: AsyncClient). The
// Python is $SVC_PYTHON, else the first of python3 and /usr/bin/python3
// that has httpx; without one, the benchmark skips, saying so.
func BenchmarkPythonClient(b *testing.B) {
	py := pythonWithHTTPX(b)
	srv := startStreamServer(b)
	tasks := envInt(b, "SVC_PYBENCH_TASKS", 100_000)
	runs := envInt(b, "SVC_PYBENCH_RUNS", 20_000)
	script := filepath.Join("..", "clients", "python", "bench", "bench_client.py")
	for range b.N {
		for _, m := range []struct {
			mode     string
			n, conc  int
			unit     string
			pyClient string
		}{
			{"stream", tasks, 256, "tasks/s", "Client.gather_stream"},
			{"runs", runs, 64, "runs/s", "AsyncClient.run"},
		} {
			goF := measure(b, exec.Command(os.Args[0], "-test.run=^$"), map[string]string{
				goClientEnv: m.mode, "SVC_PYBENCH_URL": srv.url,
				"SVC_PYBENCH_N": strconv.Itoa(m.n), "SVC_PYBENCH_CONC": strconv.Itoa(m.conc)})
			pyF := measure(b, exec.Command(py, script, "--url", srv.url, "--mode", m.mode,
				"--tasks", strconv.Itoa(m.n), "--concurrency", strconv.Itoa(m.conc)), nil)
			b.Logf("%s of %d at %d: Go client %.0f %s (peak RSS %.1f MB), Python %s %.0f %s (peak RSS %.1f MB)",
				m.mode, m.n, m.conc, goF.PerS, m.unit, goF.RSSMB, m.pyClient, pyF.PerS, m.unit, pyF.RSSMB)
			b.ReportMetric(goF.PerS, "go-"+m.mode+"-"+m.unit)
			b.ReportMetric(pyF.PerS, "py-"+m.mode+"-"+m.unit)
			b.ReportMetric(goF.RSSMB, "go-"+m.mode+"-MB")
			b.ReportMetric(pyF.RSSMB, "py-"+m.mode+"-MB")
		}
	}
	b.ReportMetric(0, "ns/op")
}

func pythonWithHTTPX(b *testing.B) string {
	b.Helper()
	cands := []string{"python3", "/usr/bin/python3"}
	if p := os.Getenv("SVC_PYTHON"); p != "" {
		cands = []string{p}
	}
	for _, p := range cands {
		if exec.Command(p, "-c", "import httpx").Run() == nil {
			return p
		}
	}
	b.Skipf("no python3 with httpx among %q: apt-get install python3-httpx", cands)
	return ""
}

// measure runs cmd and decodes the JSON line it prints last.
func measure(b *testing.B, cmd *exec.Cmd, env map[string]string) clientFigures {
	b.Helper()
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("%s: %v\n%s", cmd, err, out)
	}
	var f clientFigures
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	var last string
	for sc.Scan() {
		if t := strings.TrimSpace(sc.Text()); strings.HasPrefix(t, "{") {
			last = t
		}
	}
	if err := json.Unmarshal([]byte(last), &f); err != nil || f.PerS <= 0 {
		b.Fatalf("%s printed %q: %v", cmd, out, err)
	}
	return f
}

// goClientBench is the re-executed bench binary's measurement of the Go
// client; it prints clientFigures and exits.
func goClientBench(mode string) {
	url := os.Getenv("SVC_PYBENCH_URL")
	n, _ := strconv.Atoi(os.Getenv("SVC_PYBENCH_N"))
	conc, _ := strconv.Atoi(os.Getenv("SVC_PYBENCH_CONC"))
	c, err := client.New(url, client.WithTimeout(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	defer c.Close()
	ctx := context.Background()
	var failed atomic.Int64
	start := time.Now()
	switch mode {
	case "stream":
		got := 0
		for item, err := range c.GatherStream(ctx, "echo", echoTasks(n), conc) {
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			got++
			if !item.Result.Success {
				failed.Add(1)
			}
		}
		if got != n {
			fmt.Fprintf(os.Stderr, "%d results for %d tasks\n", got, n)
			os.Exit(1)
		}
	case "runs":
		if _, err := c.Run(ctx, "echo", svc.TaskSpec{Input: json.RawMessage(`0`)}); err != nil { // a warm connection
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		start = time.Now()
		var left atomic.Int64
		left.Store(int64(n))
		var wg sync.WaitGroup
		for range conc {
			wg.Go(func() {
				for left.Add(-1) >= 0 {
					in := `{"n":` + strconv.FormatInt(left.Load(), 10) + `,"text":"hello world"}`
					res, err := c.Run(ctx, "echo", svc.TaskSpec{Input: json.RawMessage(in)})
					if err != nil || !res.Success {
						failed.Add(1)
					}
				}
			})
		}
		wg.Wait()
	default:
		fmt.Fprintf(os.Stderr, "%s=%q: want stream or runs\n", goClientEnv, mode)
		os.Exit(2)
	}
	took := time.Since(start)
	if failed.Load() > 0 {
		fmt.Fprintf(os.Stderr, "%d failed\n", failed.Load())
		os.Exit(1)
	}
	out, _ := json.Marshal(clientFigures{PerS: float64(n) / took.Seconds(), Seconds: took.Seconds(), RSSMB: selfPeakRSS()})
	fmt.Println(string(out))
}

// selfPeakRSS is this process's VmHWM, in MB.
func selfPeakRSS() float64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

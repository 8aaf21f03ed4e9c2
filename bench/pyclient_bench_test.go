package bench

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// clientFigures is what one client measurement prints, as one JSON line.
type clientFigures struct {
	PerS    float64 `json:"per_s"`
	Seconds float64 `json:"seconds"`
	RSSMB   float64 `json:"rss_mb"`
}

// BenchmarkPythonClient (issue 35 part 5): the Python client
// (clients/python) beside the Go client (http/client), each in a process
// of its own,
// against one svc serve (a test:echo agent, no stores): a streamed gather
// of $SVC_PYBENCH_TASKS (100,000) tasks made as they are read, at
// max_concurrency 256 (tasks/s, client peak RSS); then $SVC_PYBENCH_RUNS
// (20,000) sync runs, 64 in flight (runs/s; Python: AsyncClient). The
// Python is $SVC_PYTHON, else the first of python3 and /usr/bin/python3
// that has httpx; without one, the benchmark skips, saying so.
func BenchmarkPythonClient(b *testing.B) {
	py := pythonWithHTTPX(b)
	// The Go client is a small program of its own (testdata/goclient),
	// so that its peak RSS is the client's, not the bench binary's.
	goClient := filepath.Join(b.TempDir(), "goclient")
	if out, err := exec.Command("go", "build", "-o", goClient, "./testdata/goclient").CombinedOutput(); err != nil {
		b.Fatalf("go build ./bench/testdata/goclient: %v\n%s", err, out)
	}
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
			goF := measure(b, exec.Command(goClient, "-url", srv.url, "-mode", m.mode,
				"-tasks", strconv.Itoa(m.n), "-concurrency", strconv.Itoa(m.conc)), nil)
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

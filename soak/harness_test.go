//go:build soak

package soak

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// svcBin is the svc binary under test, built once in TestMain; SOAK_RACE=1
// builds it with the race detector (slower, several times the memory), and
// SOAK_SVC_BIN names a binary to test instead (one built with a profiler,
// to find what a growth check found).
var svcBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "svc-soak-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	svcBin = os.Getenv("SOAK_SVC_BIN")
	if svcBin == "" {
		svcBin = filepath.Join(dir, "svc")
		args := []string{"build", "-o", svcBin}
		if os.Getenv("SOAK_RACE") == "1" {
			args = append(args, "-race")
		}
		build := exec.Command("go", append(args, "../cmd/svc")...)
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "go build:", err)
			_ = os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// envDuration reads a duration from the environment, def when unset.
func envDuration(t *testing.T, key string, def time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive duration such as 10m", key, v)
	}
	return d
}

// envInt reads a positive integer from the environment, def when unset.
func envInt(t *testing.T, key string, def int) int {
	t.Helper()
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", key, v)
	}
	return n
}

// writeSpecs writes the specs the soak tests serve: a fast agent, a slow
// one (so that runs are in flight when the server is killed or a run
// cancelled), a failing input ("bad"), a three-step pipeline of slow steps
// and a fan-out.
func writeSpecs(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"runtime.yaml":     "version: 1\ntimeout_seconds: 60\nretry_max_attempts: 1\n",
		"agents/echo.yaml": "version: 1\nname: echo\nmodel: test:echo\ninstructions: Repeat the input back.\n",
		"agents/slow.yaml": "version: 1\nname: slow\nmodel: test:echo\ninstructions: Repeat slowly.\n" +
			"model_settings: {latency_ms: 150, fail_on: bad}\n",
		"agents/worker.yaml": "version: 1\nname: worker\nmodel: test:echo\ninstructions: Process one item.\n" +
			"model_settings: {latency_ms: 10, fail_on: bad}\n",
		"groups/chain.yaml": "version: 1\nname: chain\nnodes:\n  a: {agent: slow}\n  b: {agent: slow}\n  c: {agent: slow}\n" +
			"edges:\n  - {from: a, to: b}\n  - {from: b, to: c}\n",
		"groups/fanout.yaml": "version: 1\nname: fanout\nnodes:\n  split: {agent: echo}\n  work: {agent: worker}\n" +
			"edges:\n  - {from: split, to: work, fan_out: output.items, max_concurrency: 10}\n",
	}
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// headTail keeps the first and the last 64 KiB of a process's stderr: a
// server logs every event, so ten minutes of it does not belong in memory.
type headTail struct {
	mu         sync.Mutex
	head, tail []byte
	races      int
	panics     int
}

const logKeep = 64 << 10

func (b *headTail) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.races += bytes.Count(p, []byte("WARNING: DATA RACE"))
	b.panics += bytes.Count(p, []byte("panic: "))
	if n := min(logKeep-len(b.head), len(p)); n > 0 {
		b.head = append(b.head, p[:n]...)
	}
	b.tail = append(b.tail, p...)
	if len(b.tail) > 2*logKeep {
		b.tail = append(b.tail[:0:0], b.tail[len(b.tail)-logKeep:]...)
	}
	return len(p), nil
}

func (b *headTail) Head() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.head)
}

func (b *headTail) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.tail) == len(b.head) {
		return string(b.head)
	}
	return string(b.head) + "\n…\n" + string(b.tail)
}

// server is a running `svc serve`.
type server struct {
	cmd  *exec.Cmd
	log  *headTail
	done chan struct{} // closed once the process has exited
	url  string
}

var servingURL = regexp.MustCompile(`svc serving.*?"url": ?"(http://127\.0\.0\.1:[0-9]+)"`)

// startServer starts `svc serve` on a free port with dataDir and the extra
// flags, and waits for it to serve. When the test ends it is killed if still
// running, and its log is checked for data races and panics.
func startServer(t *testing.T, dataDir, specs string, extra ...string) *server {
	t.Helper()
	args := append([]string{"serve", "--host", "127.0.0.1", "--port", "0", "--specs", specs,
		"--data-dir", dataDir}, extra...)
	cmd := exec.Command(svcBin, args...)
	var env []string
	for _, kv := range os.Environ() {
		// SVC_PPROF_ADDR reaches a SOAK_SVC_BIN built with -tags pprof.
		if !strings.HasPrefix(kv, "SVC_") || strings.HasPrefix(kv, "SVC_PPROF_ADDR=") {
			env = append(env, kv)
		}
	}
	cmd.Env = env
	s := &server{cmd: cmd, log: &headTail{}, done: make(chan struct{})}
	cmd.Stderr = s.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(func() {
		s.kill()
		s.log.mu.Lock()
		races, panics := s.log.races, s.log.panics
		s.log.mu.Unlock()
		if races > 0 || panics > 0 {
			t.Errorf("svc serve reported %d data races and %d panics:\n%s", races, panics, s.log.String())
		} else if t.Failed() {
			t.Logf("svc serve stderr (head and tail):\n%s", s.log.String())
		}
	})
	deadline := time.Now().Add(60 * time.Second) // a nice'd build on a busy VM starts slowly
	for {
		if m := servingURL.FindStringSubmatch(s.log.Head()); m != nil {
			s.url = m[1]
			return s
		}
		select {
		case <-s.done:
			t.Fatalf("svc serve exited before serving:\n%s", s.log.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("svc serve did not serve within 60s:\n%s", s.log.String())
		}
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (s *server) kill() {
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.done
}

// stop asks the server to shut down (SIGTERM) and waits up to limit.
func (s *server) stop(t *testing.T, limit time.Duration) {
	t.Helper()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(limit):
		t.Errorf("svc serve still running %v after SIGTERM", limit)
		s.kill()
	}
}

func (s *server) pid() int { return s.cmd.Process.Pid }

// do sends one request with a JSON body (nil: none) and returns the status
// and the body read in full.
func do(ctx context.Context, c *http.Client, method, url string, body any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// frame is one server-sent event.
type frame struct {
	id, event, data string
}

// readSSE reads frames from an open event stream and calls fn for each
// until fn returns false or the stream ends. It returns nil at the end of
// the stream, and the read error otherwise.
func readSSE(r io.Reader, fn func(frame) bool) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var f frame
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if f.event != "" || f.data != "" {
				if !fn(f) {
					return nil
				}
			}
			f = frame{}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "id:"):
			f.id = strings.TrimSpace(line[3:])
		case strings.HasPrefix(line, "event:"):
			f.event = strings.TrimSpace(line[6:])
		case strings.HasPrefix(line, "data:"):
			f.data += strings.TrimPrefix(line[5:], " ")
		}
	}
	return sc.Err()
}

// sample is one reading of the server process.
type sample struct {
	at         time.Duration
	rssKiB     int64
	heapKiB    int64 // go_memstats_heap_inuse_bytes: the Go heap's part of rssKiB
	fds        int
	goroutines int
}

// takeSample reads RSS and open files from /proc, and the goroutine count
// and Go heap in use from the Go collector of GET /metrics (svc serve
// --metrics).
func takeSample(ctx context.Context, c *http.Client, s *server, at time.Duration) (sample, error) {
	out := sample{at: at}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.pid()))
	if err != nil {
		return out, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				out.rssKiB, _ = strconv.ParseInt(f[0], 10, 64)
			}
		}
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", s.pid()))
	if err != nil {
		return out, err
	}
	out.fds = len(fds)
	code, body, err := do(ctx, c, http.MethodGet, s.url+"/metrics", nil)
	if err != nil || code != http.StatusOK {
		return out, fmt.Errorf("GET /metrics: %d %v", code, err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if rest, ok := strings.CutPrefix(line, "go_memstats_heap_inuse_bytes "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				return out, fmt.Errorf("go_memstats_heap_inuse_bytes %q: %w", rest, err)
			}
			out.heapKiB = int64(f) >> 10
		}
		if rest, ok := strings.CutPrefix(line, "go_goroutines "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				return out, fmt.Errorf("go_goroutines %q: %w", rest, err)
			}
			out.goroutines = int(f)
		}
	}
	if out.goroutines == 0 {
		return out, errors.New("GET /metrics has no go_goroutines")
	}
	return out, nil
}

// median of xs (not modified).
func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// growth compares the median of the last third of xs with that of the
// second third (the first third is warm-up): a leak keeps growing, so the
// last third sits above the second. It reports the two medians and whether
// the last exceeds the second by more than ratio and slack together.
func growth(xs []float64, ratio, slack float64) (second, last float64, grew bool) {
	n := len(xs) / 3
	if n == 0 {
		return 0, 0, false
	}
	second, last = median(xs[n:2*n]), median(xs[len(xs)-n:])
	return second, last, last > second*ratio+slack
}

func envString(key string) string { return os.Getenv(key) }

// fdTargets lists what the process's open files point at, to name the
// files that a growth check finds too many of.
func fdTargets(pid int) map[string]int {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	entries, _ := os.ReadDir(dir)
	out := map[string]int{}
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		if strings.HasPrefix(target, "socket:") {
			target = "socket"
		}
		out[target]++
	}
	return out
}

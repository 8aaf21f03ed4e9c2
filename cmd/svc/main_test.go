package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/svcproc"

	"go.uber.org/goleak"
)

// The tests run the real binary, built once here, as a user would: flags,
// exit codes, stdout and stderr are the interface under test.
var svcBin string

// exampleSpecs is the examples directory, relative to this package.
const exampleSpecs = "../../examples/specs"

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "svc-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if svcBin, err = svcproc.Build(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		_ = os.RemoveAll(dir)
		os.Exit(1)
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

// result is what one finished svc process left behind.
type result struct {
	stdout, stderr string
	code           int
}

// svcExec runs svc to completion (at most 30 s) with args, the given extra
// environment and stdin.
func svcExec(t *testing.T, env []string, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, svcBin, args...)
	cmd.Env = append(svcproc.Env(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	code := 0
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("svc %s: %v", strings.Join(args, " "), err)
	}
	if ctx.Err() != nil {
		t.Fatalf("svc %s did not finish within 30s; stderr:\n%s", strings.Join(args, " "), stderr.String())
	}
	r := result{stdout: stdout.String(), stderr: stderr.String(), code: code}
	checkNoRace(t, r.stderr)
	return r
}

func checkNoRace(t *testing.T, stderr string) {
	t.Helper()
	if strings.Contains(stderr, "WARNING: DATA RACE") {
		t.Errorf("svc reported a data race:\n%s", stderr)
	}
}

// syncBuffer collects a process's stderr while tests read it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// serveProc is a running `svc serve`.
type serveProc struct {
	*proc
	url string
}

// proc is a running svc process.
type proc struct {
	name   string
	cmd    *exec.Cmd
	stderr *syncBuffer
	done   chan struct{} // closed once the process has exited
	code   int           // the exit code, valid once done is closed
}

// startProc starts svc with args and the given extra environment; when the
// test ends it is SIGKILLed if still running, checked for data races, and
// its stderr logged if the test failed.
func startProc(t *testing.T, name string, env []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(svcBin, args...)
	cmd.Env = append(svcproc.Env(), env...)
	p := &proc{name: name, cmd: cmd, stderr: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		err := cmd.Wait()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			p.code = ee.ExitCode()
		} else if err != nil {
			p.code = -1
		}
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill()
			<-p.done
		}
		checkNoRace(t, p.stderr.String())
		if t.Failed() {
			t.Logf("%s stderr (last 8 KiB):\n%s", p.name, tail(p.stderr.String(), 8<<10))
		}
	})
	return p
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// servingURL finds the address in the "svc serving" log line, in either
// log format (console: "url": "...", json: "url":"...").
var servingURL = regexp.MustCompile(`svc serving.*?"url": ?"(http://127\.0\.0\.1:[0-9]+)"`)

// startServe starts `svc serve` on a free port of 127.0.0.1 and waits for
// it to log its address. The process is killed when the test ends.
func startServe(t *testing.T, env []string, args ...string) *serveProc {
	t.Helper()
	s := &serveProc{proc: startProc(t, "svc serve", env,
		append([]string{"serve", "--host", "127.0.0.1", "--port", "0", "--data-dir", t.TempDir()}, args...)...)}
	s.waitLog(t, servingURL, 20*time.Second)
	s.url = servingURL.FindStringSubmatch(s.stderr.String())[1]
	return s
}

// waitLog polls stderr until re matches, failing the test if the process
// exits first or nothing matches within limit.
func (s *serveProc) waitLog(t *testing.T, re *regexp.Regexp, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !re.MatchString(s.stderr.String()) {
		select {
		case <-s.done:
			if re.MatchString(s.stderr.String()) {
				return
			}
			t.Fatalf("svc serve exited with %d before logging %s; stderr:\n%s", s.code, re, s.stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("svc serve logged no %s within %v; stderr:\n%s", re, limit, s.stderr.String())
		}
	}
}

// signal sends sig to the server process.
func (s *serveProc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := s.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// wait waits at most limit for the process to exit and returns its code.
func (s *serveProc) wait(t *testing.T, limit time.Duration) int {
	t.Helper()
	select {
	case <-s.done:
		return s.code
	case <-time.After(limit):
		t.Fatalf("svc serve still running %v later; stderr:\n%s", limit, s.stderr.String())
		return 0
	}
}

// httpClient keeps no idle connections, so no transport goroutine outlives
// a test (goleak).
var httpClient = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// writeSpecs creates a specs directory from file name → content (paths
// relative to it, such as "agents/x.yaml").
func writeSpecs(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
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

func TestExitCode(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want int
	}{
		{"nil", nil, 0},
		{"cobra usage", errors.New(`unknown flag: --x`), 2},
		{"command failure", &runError{err: errors.New("listen: in use")}, 1},
		{"exit error", &exitError{code: 2, err: errors.New("bad specs")}, 2},
		{"exit error in run error", &runError{err: &exitError{code: 1}}, 1},
		{"usage exit in run error", &runError{err: fmt.Errorf("x: %w", &exitError{code: 2})}, 2},
	}
	for _, tt := range tests {
		if got := exitCode(tt.err); got != tt.want {
			t.Errorf("%s: exitCode = %d, want %d", tt.name, got, tt.want)
		}
	}
}

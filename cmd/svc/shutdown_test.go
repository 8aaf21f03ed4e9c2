package main

import (
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// stuckSpecs is a specs directory with one agent whose model takes ten
// minutes to answer (honouring cancellation): a run that is still in
// flight whenever a test shuts the server down.
func stuckSpecs(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "agents"), 0o755); err != nil {
		t.Fatal(err)
	}
	yaml := "version: 1\nname: slow\nmodel: test:echo\nmodel_settings: {latency_ms: 600000}\n"
	if err := os.WriteFile(filepath.Join(dir, "agents", "slow.yaml"), []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// startSlowRun posts a run of the slow agent and waits until the server
// has started it; the channel gets the status the request ends with (-1:
// no answer, the connection closed).
func startSlowRun(t *testing.T, s *serveProc) <-chan int {
	t.Helper()
	status := make(chan int, 1)
	go func() {
		resp, err := http.Post(s.url+"/agents/slow/run", "application/json", strings.NewReader(`{"input":"x"}`))
		if err != nil {
			status <- -1
			return
		}
		resp.Body.Close()
		status <- resp.StatusCode
	}()
	s.waitLog(t, regexp.MustCompile(`agent_spawned`), 20*time.Second)
	return status
}

// On SIGTERM with a run in flight, serve says every second what it waits
// for and how long is left, cancels the run when --shutdown-grace is over,
// and exits non-zero saying so, within the grace and some slack.
func TestServeShutdownCountsDown(t *testing.T) {
	t.Parallel()
	s := startServe(t, nil, "--specs", stuckSpecs(t), "--events", "memory", "--shutdown-grace", "2s")
	status := startSlowRun(t, s)
	s.signal(t, syscall.SIGTERM)
	s.waitLog(t, regexp.MustCompile(`shutting down: 1 requests, 1 runs in flight, 1s left`), 20*time.Second)
	// Grace (2 s) plus generous slack for a loaded machine.
	code := s.wait(t, 30*time.Second)
	out := s.stderr.String()
	if code != 1 || !strings.Contains(out, "shutdown within --shutdown-grace 2s") || !strings.Contains(out, "runs cancelled") {
		t.Errorf("exit %d; want 1 with a message that the shutdown cancelled runs", code)
	}
	if got := <-status; got != http.StatusServiceUnavailable && got != -1 {
		t.Errorf("the run in flight was answered %d; want 503 (or a closed connection)", got)
	}
}

// A second SIGINT during the grace stops the server at once, saying what
// it abandons.
func TestServeSecondSignalStopsAtOnce(t *testing.T) {
	t.Parallel()
	s := startServe(t, nil, "--specs", stuckSpecs(t), "--events", "memory", "--shutdown-grace", "10m")
	startSlowRun(t, s)
	s.signal(t, syscall.SIGINT)
	s.waitLog(t, regexp.MustCompile(`received interrupt; shutting down`), 20*time.Second)
	s.signal(t, syscall.SIGINT)
	// Far less than the ten-minute grace.
	code := s.wait(t, 30*time.Second)
	if out := s.stderr.String(); code != 130 ||
		!strings.Contains(out, "second interrupt during the shutdown: stopped at once, abandoning 1 requests and 1 runs in flight") {
		t.Errorf("exit %d; want 130 saying what the second signal abandoned", code)
	}
}

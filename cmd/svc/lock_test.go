package main

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A second `svc serve` on a data directory in use exits 1 at once, naming
// the first one's PID and the directory; the first keeps serving, and its
// submitted run is still running, not marked failed ("interrupted").
func TestServeDataDirLock(t *testing.T) {
	t.Parallel()
	dir := writeSpecs(t, map[string]string{
		"agents/slow.yaml": "version: 1\nname: slow\nmodel: test:echo\nmodel_settings: {latency_ms: 60000}\n",
	})
	dataDir := t.TempDir()
	first := startServe(t, nil, "--specs", dir, "--data-dir", dataDir, "--shutdown-grace", "200ms")
	resp, body := do(t, t.Context(), http.MethodPost, first.url+"/submit", `{"target":"slow","task":{"input":1}}`, nil)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("submit: %d %s", resp.StatusCode, body)
	}
	var sub struct {
		RunID string `json:"run_id"`
	}
	if err := json.Unmarshal(body, &sub); err != nil {
		t.Fatal(err)
	}
	state := func() string {
		resp, body := get(t, first.url+"/runs/"+sub.RunID+"/status", nil)
		var st struct {
			State string `json:"state"`
		}
		if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &st) != nil {
			t.Fatalf("status: %d %s", resp.StatusCode, body)
		}
		return st.State
	}
	for deadline := time.Now().Add(20 * time.Second); state() != "running"; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the run never started: %s", state())
		}
	}

	r := svcExec(t, nil, "", "serve", "--host", "127.0.0.1", "--port", "0", "--specs", dir, "--data-dir", dataDir)
	pid := "PID " + strconv.Itoa(first.cmd.Process.Pid)
	if r.code != 1 || !strings.Contains(r.stderr, pid) || !strings.Contains(r.stderr, dataDir) ||
		strings.Contains(r.stderr, "svc serving") {
		t.Errorf("second serve: exit %d, want 1 with %q and %s, not serving; stderr:\n%s", r.code, pid, dataDir, r.stderr)
	}
	if got := state(); got != "running" {
		t.Errorf("the first server's run after the second's attempt: %s, want running", got)
	}

	// Once the first has stopped, the directory is free.
	first.signal(t, syscall.SIGTERM)
	first.wait(t, 20*time.Second)
	// (It resumes the run the first one's shutdown cut; its own shutdown
	// cuts it again, so it may exit 1 saying so.)
	again := startServe(t, nil, "--specs", dir, "--data-dir", dataDir, "--shutdown-grace", "200ms")
	again.signal(t, syscall.SIGTERM)
	if code := again.wait(t, 20*time.Second); code != 0 && code != 1 {
		t.Errorf("serve after the first stopped: exit %d", code)
	}
}

// Two servers with their own data directories but one sqlite: run store:
// the store path's lock (PATH.lock) keeps the second out.
func TestServeStorePathLock(t *testing.T) {
	t.Parallel()
	store := filepath.Join(t.TempDir(), "runs.db")
	first := startServe(t, nil, "--specs", exampleSpecs, "--store", "sqlite:"+store, "--events", "memory")
	r := svcExec(t, nil, "", "serve", "--host", "127.0.0.1", "--port", "0", "--data-dir", t.TempDir(),
		"--specs", exampleSpecs, "--store", "sqlite:"+store, "--events", "memory")
	pid := "PID " + strconv.Itoa(first.cmd.Process.Pid)
	if r.code != 1 || !strings.Contains(r.stderr, pid) || !strings.Contains(r.stderr, store+".lock") {
		t.Errorf("second serve: exit %d, want 1 naming %q and %s.lock; stderr:\n%s", r.code, pid, store, r.stderr)
	}
}

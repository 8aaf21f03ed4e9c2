package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/testutil"
)

// A finished run is served unchanged by the next process on the same store.
func TestServeRunsSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	s := startServe(t, nil, "--specs", exampleSpecs, "--data-dir", dir)
	resp, err := http.Post(s.url+"/submit", "application/json", strings.NewReader(`{"target":"echo","task":{"input":{"n":1}}}`))
	if err != nil {
		t.Fatal(err)
	}
	var sub struct {
		RunID string `json:"run_id"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&sub)
	resp.Body.Close()
	if resp.StatusCode != 202 || sub.RunID == "" {
		t.Fatalf("submit: %d", resp.StatusCode)
	}
	get := func(base, path string) (int, string) {
		r, err := http.Get(base + "/runs/" + sub.RunID + path)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return r.StatusCode, string(b)
	}
	deadline := time.Now().Add(10 * time.Second)
	var first string
	for {
		code, body := get(s.url, "/result")
		if code == 200 {
			first = body
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no result: %d %s", code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.signal(t, syscall.SIGTERM)
	if code := s.wait(t, 15*time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	s2 := startServe(t, nil, "--specs", exampleSpecs, "--data-dir", dir)
	if code, body := get(s2.url, "/result"); code != 200 || body != first {
		t.Fatalf("after restart: %d %s, want %s", code, body, first)
	}
	if code, body := get(s2.url, "/status"); code != 200 || !strings.Contains(body, `"completed"`) {
		t.Fatalf("status after restart: %d %s", code, body)
	}
}

// A run the process died in the middle of is failed at the next start,
// never stuck running.
func TestServeInterruptedRunFails(t *testing.T) {
	specs := t.TempDir()
	if err := os.MkdirAll(filepath.Join(specs, "agents"), 0o755); err != nil {
		t.Fatal(err)
	}
	slow := "version: 1\nname: slow\nmodel: test:echo\nmodel_settings: {latency_ms: 60000}\n"
	if err := os.WriteFile(filepath.Join(specs, "agents", "slow.yaml"), []byte(slow), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	s := startServe(t, nil, "--specs", specs, "--data-dir", dir)
	resp, err := http.Post(s.url+"/submit", "application/json", strings.NewReader(`{"target":"slow","task":{"input":1}}`))
	if err != nil {
		t.Fatal(err)
	}
	var sub struct {
		RunID string `json:"run_id"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&sub)
	resp.Body.Close()
	status := func(base string) string {
		r, err := http.Get(base + "/runs/" + sub.RunID + "/status")
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		var st struct{ State string }
		_ = json.NewDecoder(r.Body).Decode(&st)
		return st.State
	}
	testutil.Eventually(t, "the run to start", func() bool { return status(s.url) == "running" })
	s.signal(t, syscall.SIGKILL)
	s.wait(t, 10*time.Second)
	s2 := startServe(t, nil, "--specs", specs, "--data-dir", dir)
	if st := status(s2.url); st != "failed" {
		t.Fatalf("after a crash the run is %q, want failed", st)
	}
}

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

// A run the process died in the middle of is resumed at the next start
// (never stuck running, never paid for again), and failed (interrupted,
// saying why) only when it cannot be: its agent is gone from the specs.
func TestServeInterruptedRunResumes(t *testing.T) {
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
	type status struct {
		State, Reason string
		Resumed       int
	}
	get := func(base, path string) (status, string) {
		r, err := http.Get(base + "/runs/" + sub.RunID + path)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		var st status
		_ = json.Unmarshal(b, &st)
		return st, string(b)
	}
	testutil.Eventually(t, "the run to start", func() bool { st, _ := get(s.url, "/status"); return st.State == "running" })
	s.signal(t, syscall.SIGKILL)
	s.wait(t, 10*time.Second)

	// The restarted server resumes it (issue 30).
	s2 := startServe(t, nil, "--specs", specs, "--data-dir", dir)
	if st, body := get(s2.url, "/status"); st.State != "running" || st.Resumed != 1 {
		t.Fatalf("after a crash the run is %s, want running, resumed 1", body)
	}
	s2.signal(t, syscall.SIGKILL)
	s2.wait(t, 10*time.Second)

	// A server whose specs no longer have the agent cannot resume it: the
	// run fails, interrupted, and its result names the agent.
	if err := os.Rename(filepath.Join(specs, "agents", "slow.yaml"), filepath.Join(specs, "agents", "slow.yaml.off")); err != nil {
		t.Fatal(err)
	}
	echo := "version: 1\nname: echo\nmodel: test:echo\n"
	if err := os.WriteFile(filepath.Join(specs, "agents", "echo.yaml"), []byte(echo), 0o644); err != nil {
		t.Fatal(err)
	}
	s3 := startServe(t, nil, "--specs", specs, "--data-dir", dir)
	if st, body := get(s3.url, "/status"); st.State != "failed" || st.Reason != "interrupted" {
		t.Fatalf("with the agent gone the run is %s, want failed, interrupted", body)
	}
	if _, body := get(s3.url, "/result"); !strings.Contains(body, `not resumed`) || !strings.Contains(body, `slow`) {
		t.Errorf("result %s: want it to say the run was not resumed and name the agent", body)
	}
}

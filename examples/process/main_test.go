package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestProcess runs the example as main does, on a free port: the Go agent
// and the specs' agents answer over HTTP, /metrics serves, and cancelling
// the context (the signal) shuts everything down.
func TestProcess(t *testing.T) {
	a, err := newApp("../specs", filepath.Join(t.TempDir(), "data"), 0, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, a) }()
	for a.URL() == "" {
		select {
		case err := <-done:
			t.Fatalf("run returned before serving: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	post := func(path, body string) string {
		t.Helper()
		resp, err := hc.Post(a.URL()+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("POST %s: %d %s", path, resp.StatusCode, b)
		}
		return string(b)
	}
	var res struct {
		Success bool
		Output  struct {
			Tools map[string]string `json:"tools"`
		}
	}
	if err := json.Unmarshal([]byte(post("/agents/greeter/run", `{"input":{"name":"Ada"}}`)), &res); err != nil || !res.Success ||
		!strings.HasPrefix(res.Output.Tools["greet"], "hello, ") {
		t.Fatalf("greeter: %+v %v", res, err)
	}
	if body := post("/agents/echo/run", `{"input":"hi"}`); !strings.Contains(body, `"output":"hi"`) {
		t.Fatalf("echo from the specs: %s", body)
	}
	resp, err := hc.Get(a.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `http_route="/agents/{name}/run"`) {
		t.Errorf("/metrics lacks the run route:\n%.2000s", b)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("run did not return after the signal")
	}
}

package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestHost drives the example host over real HTTP: the host's auth guards
// the mounted router, the specs' and the Go agents and groups run, host handlers map errors with svc's table,
// and the runtime shuts down with the server.
func TestHost(t *testing.T) {
	rt, host, err := newHost("../specs", "k", zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(host)
	do := func(method, path, key, body string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if key != "" {
			req.Header.Set("X-API-Key", key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	if resp, _ := do("GET", "/svc/agents", "", ""); resp.StatusCode != 401 {
		t.Fatalf("no key: %d", resp.StatusCode)
	}
	resp, body := do("GET", "/svc/agents", "k", "")
	if resp.StatusCode != 200 || !strings.Contains(body, `"greeter"`) || !strings.Contains(body, `"clock"`) {
		t.Fatalf("agents: %d %q", resp.StatusCode, body)
	}
	resp, body = do("POST", "/svc/agents/greeter/run", "k", `{"input":"hi"}`)
	var res struct {
		Success bool
		Output  struct {
			Tools map[string]string `json:"tools"`
		}
	}
	if err := json.Unmarshal([]byte(body), &res); err != nil || resp.StatusCode != 200 || !res.Success {
		t.Fatalf("greeter: %d %s", resp.StatusCode, body)
	}
	if !strings.HasPrefix(res.Output.Tools["greet"], "hello, ") {
		t.Fatalf("greet tool result: %s", body)
	}
	// A spec agent with a built-in tool, and a spec group.
	if resp, body = do("POST", "/svc/agents/clock/run", "k", `{"input":"time?"}`); resp.StatusCode != 200 || !strings.Contains(body, `"current_time"`) {
		t.Fatalf("clock: %d %s", resp.StatusCode, body)
	}
	if resp, body = do("POST", "/svc/groups/pipeline/run", "k", `{"input":{"text":"hi"}}`); resp.StatusCode != 200 || !strings.Contains(body, `"success":true`) {
		t.Fatalf("pipeline: %d %s", resp.StatusCode, body)
	}
	resp, body = do("GET", "/teapot", "", "")
	if resp.StatusCode != 404 || resp.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(body, `"RegistryError"`) {
		t.Fatalf("teapot: %d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rt.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

// The example finds its specs wherever it is run from (issue 28: go run
// from anywhere but the repository root failed on examples/specs).
func TestDefaultSpecsFromAnotherDirectory(t *testing.T) {
	t.Chdir(t.TempDir())
	rt, _, err := newHost(defaultSpecs(), "k", zap.NewNop())
	if err != nil {
		t.Fatalf("from another directory: %v", err)
	}
	if err := rt.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

package app

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/http/server"
	"github.com/svc-dev/svc/supervisor"
)

func closeRuntime(t *testing.T, rt *supervisor.Runtime) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := rt.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

// TestNewRuntimeServesExampleSpecs is what an embedder does: one call
// loads examples/specs, the router is mounted under /svc in the host's
// server, and the specs' agents (one calling the built-in current_time
// tool) and groups run through it; the events reach the host's log
// without any emitter configured.
func TestNewRuntimeServesExampleSpecs(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	rt, err := NewRuntime(RuntimeConfig{SpecsDir: exampleSpecs, Runtime: supervisor.Config{Logger: zap.New(core)}})
	if err != nil {
		t.Fatal(err)
	}
	defer closeRuntime(t, rt)
	if got := rt.Options().MaxSpawnDepth; got != 4 {
		t.Errorf("max_spawn_depth = %d, want runtime.yaml's 4", got)
	}
	router, err := server.NewRouter(rt)
	if err != nil {
		t.Fatal(err)
	}
	host := chi.NewRouter()
	host.Mount("/svc", router)
	srv := httptest.NewServer(host)
	defer srv.Close()
	post := func(path, body string) map[string]any {
		t.Helper()
		resp, err := httpClient.Post(srv.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var out map[string]any
		if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &out) != nil || out["success"] != true {
			t.Fatalf("POST %s: %d %s", path, resp.StatusCode, b)
		}
		return out
	}
	clock := post("/svc/agents/clock/run", `{"input":"what time?"}`)
	tools, _ := clock["output"].(map[string]any)["tools"].(map[string]any)
	if ct, _ := tools["current_time"].(map[string]any); ct["time"] == nil {
		t.Errorf("clock did not call current_time: %v", clock)
	}
	support := post("/svc/groups/support/run", `{"input":{"text":"I was charged twice"}}`)
	if support["agent_name"] != "billing_expert" {
		t.Errorf("support routed to %v, want billing_expert", support["agent_name"])
	}
	post("/svc/groups/panel/run", `{"input":"new pricing plan"}`)
	resp, err := httpClient.Get(srv.URL + "/svc/groups")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `"pipeline"`) {
		t.Errorf("GET /svc/groups = %s", b)
	}
	closeRuntime(t, rt) // writes out the log's queue
	if n := logs.FilterMessage(string(svc.EventAgentCompleted)).FilterField(zap.String("agent", "clock")).Len(); n != 1 {
		t.Errorf("%d agent_completed log lines for clock, want 1 (the LogEventEmitter is on by default)", n)
	}
}

// spawn_agents and the agents registered from Go come with the same call:
// a spec's agent spawns a Go agent.
func TestNewRuntimeSpawnAgents(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "agents"), 0o755); err != nil {
		t.Fatal(err)
	}
	spawner := "version: 1\nname: boss\nmodel: test:echo\nbuiltin_tools: [spawn_agents]\ntrust_level: low\nmodel_settings: {call_tools: [spawn_agents]}\n"
	if err := os.WriteFile(filepath.Join(dir, "agents", "boss.yaml"), []byte(spawner), 0o644); err != nil {
		t.Fatal(err)
	}
	// The test model spawns one agent named "a".
	a := svc.Agent{Name: "a", Model: "test:echo", TrustLevel: svc.TrustLow}
	rt, err := NewRuntime(RuntimeConfig{SpecsDir: dir, Agents: []svc.Agent{a}})
	if err != nil {
		t.Fatal(err)
	}
	defer closeRuntime(t, rt)
	res, err := rt.Run(context.Background(), "boss", svc.TaskSpec{Input: json.RawMessage(`"go"`)})
	if err != nil || !res.Success {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	var out struct {
		Tools map[string][]struct {
			Name    string `json:"name"`
			Success bool   `json:"success"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(res.Output, &out); err != nil {
		t.Fatal(err)
	}
	if rs := out.Tools["spawn_agents"]; len(rs) != 1 || rs[0].Name != "a" || !rs[0].Success {
		t.Fatalf("output = %s", res.Output)
	}
}

// A bad specs directory and options that runtime.yaml owns are refused,
// naming the field.
func TestNewRuntimeErrors(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "agents"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "agents", "x.yaml"), []byte("version: 1\nname: x\nmodel: nope:nothing\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		cfg    RuntimeConfig
		option string
		msg    string
	}{
		{"no dir", RuntimeConfig{}, "SpecsDir", "empty"},
		{"bad spec", RuntimeConfig{SpecsDir: dir}, "SpecsDir", "x.yaml"},
		{"options set", RuntimeConfig{SpecsDir: exampleSpecs, Runtime: supervisor.Config{Options: svc.DefaultOptions()}}, "Runtime.Options", "runtime.yaml"},
		{"bad override", RuntimeConfig{SpecsDir: exampleSpecs, RuntimeOptions: func(o svc.Options) svc.Options { o.MaxSpawnDepth = -1; return o }}, "RuntimeOptions", "max_spawn_depth"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt, err := NewRuntime(tc.cfg)
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Option != tc.option || !strings.Contains(err.Error(), tc.msg) {
				if rt != nil {
					closeRuntime(t, rt)
				}
				t.Fatalf("err = %v, want a ConfigError on %s mentioning %q", err, tc.option, tc.msg)
			}
		})
	}
}

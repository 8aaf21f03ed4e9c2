package mcpservers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/emitters/emittertest"
	"github.com/svc-dev/svc/internal/testutil"
	"github.com/svc-dev/svc/model"
	"github.com/svc-dev/svc/supervisor"
	"github.com/svc-dev/svc/tools/mcp/mcptest"
)

// An agent with an MCP server calls the server's tool through the agent
// loop: the real reference server over stdio, started on first use, its
// tool prefixed, with the usual tool events, in the catalog once started.
func TestAgentCallsMCPTool(t *testing.T) {
	entry := mcptest.Everything(t)
	rec := &emittertest.Recorder{}
	a := svc.Agent{Name: "mcpuser", Model: "test:echo", TrustLevel: svc.TrustMedium,
		ModelSettings: map[string]any{"call_tools": []any{"ev_get-sum"}},
		MCPServers: []svc.MCPServer{{Name: "everything", Transport: "stdio", Command: "node",
			Args: []string{entry, "stdio"}, Prefix: "ev_"}}}
	rt := newRuntime(t, svc.DefaultOptions(), rec, nil, a)

	servers, err := rt.ToolServers(t.Context())
	if err != nil || len(servers) != 1 || servers[0].State != "stopped" {
		t.Fatalf("before the first run: servers %+v, %v; want one, not started (lazy)", servers, err)
	}
	res, err := rt.Run(t.Context(), "mcpuser", svc.TaskSpec{Input: json.RawMessage(`"add"`)})
	if err != nil || !res.Success {
		t.Fatalf("run: %+v, %v", res, err)
	}
	var out struct {
		Tools map[string]any `json:"tools"`
	}
	if err := json.Unmarshal(res.Output, &out); err != nil {
		t.Fatal(err)
	}
	sum, _ := out.Tools["ev_get-sum"].(string)
	if sum == "" {
		t.Fatalf("output %s lacks the MCP tool's result", res.Output)
	}
	var started, completed bool
	for _, ev := range rec.Events() {
		if ev.Payload["tool_name"] != "ev_get-sum" {
			continue
		}
		switch ev.EventType {
		case svc.EventToolCallStarted:
			started = true
		case svc.EventToolCallCompleted:
			_, hasDur := ev.Payload["duration_ms"]
			completed = hasDur
		}
	}
	if !started || !completed {
		t.Errorf("tool events for ev_get-sum: started %v, completed with duration_ms %v", started, completed)
	}

	servers, _ = rt.ToolServers(t.Context())
	if servers[0].State != "ready" || !slices.Contains(servers[0].Tools, "ev_echo") {
		t.Errorf("after the run: %+v, want ready with ev_echo among its tools", servers[0])
	}
	ds, err := rt.Tools(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(ds, func(d svc.ToolDescriptor) bool { return d.Name == "ev_echo" })
	if i < 0 || ds[i].Source != "mcp" || ds[i].Server != "everything" || !slices.Equal(ds[i].Agents, []string{"mcpuser"}) {
		t.Errorf("catalog entry of ev_echo = %+v", ds)
	}
}

// A bad MCP configuration is refused at registration, naming the field.
func TestBadMCPServerRefused(t *testing.T) {
	rt := newRuntime(t, svc.DefaultOptions(), nil, nil)
	err := rt.Register(svc.Agent{Name: "bad", Model: "test:echo",
		MCPServers: []svc.MCPServer{{Name: "x", Transport: "stdio"}}})
	if svc.KindOf(err) != svc.KindSpecValidation {
		t.Fatalf("stdio server without a command: %v, want a SpecValidationError", err)
	}
}

// The same through streamable HTTP, started eagerly (mcp_eager_start).
func TestAgentCallsMCPToolOverHTTP(t *testing.T) {
	url := "http://127.0.0.1:" + strconv.Itoa(mcptest.StartHTTP(t, mcptest.Everything(t), "streamableHttp")) + "/mcp"
	o := svc.DefaultOptions()
	o.MCPEagerStart = true
	a := svc.Agent{Name: "httpuser", Model: "test:echo", TrustLevel: svc.TrustMedium,
		ModelSettings: map[string]any{"call_tools": []any{"echo"}},
		MCPServers:    []svc.MCPServer{{Name: "everything", Transport: "http", URL: url}}}
	rt := newRuntime(t, o, nil, nil, a)
	res, err := rt.Run(t.Context(), "httpuser", svc.TaskSpec{Input: json.RawMessage(`"hi"`)})
	if err != nil || !res.Success {
		t.Fatalf("run: %+v, %v", res, err)
	}
	var out struct {
		Tools map[string]string `json:"tools"`
	}
	if err := json.Unmarshal(res.Output, &out); err != nil || !strings.HasPrefix(out.Tools["echo"], "Echo: ") {
		t.Fatalf("output %s: want the echo tool's answer", res.Output)
	}
	servers, _ := rt.ToolServers(t.Context())
	if len(servers) != 1 || servers[0].Transport != "http" || servers[0].State != "ready" {
		t.Errorf("servers = %+v", servers)
	}
}

// waitGone polls until process pid no longer exists.
func waitGone(t *testing.T, pid int, after string) {
	t.Helper()
	testutil.Within(t, 15*time.Second, fmt.Sprintf("MCP server process %d to be gone %s", pid, after),
		func() bool { return syscall.Kill(pid, 0) != nil })
}

func everythingAgent(name, entry string) svc.Agent {
	return svc.Agent{Name: name, Model: "test:echo", TrustLevel: svc.TrustMedium,
		ModelSettings: map[string]any{"call_tools": []any{"echo"}},
		MCPServers:    []svc.MCPServer{{Name: "everything", Transport: "stdio", Command: "node", Args: []string{entry, "stdio"}}}}
}

// A hot reload that drops an agent stops its MCP server; the runtime's
// Shutdown stops the rest: no subprocess outlives either.
func TestMCPServersStopWithReloadAndShutdown(t *testing.T) {
	entry := mcptest.Everything(t)
	rt, err := supervisor.New(supervisor.Config{})
	if err != nil {
		t.Fatal(err)
	}
	shut := false
	t.Cleanup(func() {
		if !shut {
			_ = rt.Shutdown(context.Background())
		}
	})
	if err := rt.Register(everythingAgent("a", entry), everythingAgent("b", entry)); err != nil {
		t.Fatal(err)
	}
	pids := map[string]int{}
	for _, name := range []string{"a", "b"} {
		if res, err := rt.Run(t.Context(), name, svc.TaskSpec{Input: json.RawMessage(`"x"`)}); err != nil || !res.Success {
			t.Fatalf("run %s: %+v, %v", name, res, err)
		}
	}
	servers, _ := rt.ToolServers(t.Context())
	for _, st := range servers {
		pids[st.Agent] = st.PID
	}
	if pids["a"] <= 0 || pids["b"] <= 0 || pids["a"] == pids["b"] {
		t.Fatalf("server PIDs %v, want one process per agent", pids)
	}

	// Reload without agent a: its server stops, b's keeps running.
	if err := rt.Replace([]svc.Agent{everythingAgent("b", entry)}, nil); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pids["a"], "after its agent was removed")
	if syscall.Kill(pids["b"], 0) != nil {
		t.Fatal("b's unchanged server was stopped by the reload")
	}
	if servers, _ := rt.ToolServers(t.Context()); len(servers) != 1 || servers[0].Agent != "b" {
		t.Errorf("servers after the reload = %+v, want b's only", servers)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	shut = true
	if err := rt.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	// Shutdown returns once its subprocesses are gone: no polling here.
	if err := syscall.Kill(pids["b"], 0); err == nil {
		t.Errorf("MCP server process %d alive after Shutdown returned", pids["b"])
	}
}

// newRuntime starts a runtime with opts and agents, and shuts it down
// when the test ends.
func newRuntime(t *testing.T, opts svc.Options, rec svc.Emitter, models *model.Registry, agents ...svc.Agent) *supervisor.Runtime {
	t.Helper()
	rt, err := supervisor.New(supervisor.Config{Options: opts, Emitter: rec, Models: models})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := rt.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	if err := rt.Register(agents...); err != nil {
		t.Fatal(err)
	}
	return rt
}

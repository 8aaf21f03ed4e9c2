package supervisor_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/emitters/emittertest"
)

// everything returns the entry point of the reference MCP server
// @modelcontextprotocol/server-everything that .ci/run installs; the test
// skips without it, except under CI.
func everything(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("SVC_MCP_EVERYTHING")
	if dir == "" {
		dir = filepath.Join("..", ".cache", "mcp")
	}
	entry, err := filepath.Abs(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js"))
	if err != nil {
		t.Fatal(err)
	}
	_, statErr := os.Stat(entry)
	_, nodeErr := exec.LookPath("node")
	if statErr != nil || nodeErr != nil {
		msg := "server-everything or node missing; run: npm install --prefix .cache/mcp @modelcontextprotocol/server-everything@2026.8.31"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return entry
}

// An agent with an MCP server calls the server's tool through the agent
// loop: the real reference server over stdio, started on first use, its
// tool prefixed, with the usual tool events, in the catalog once started.
func TestAgentCallsMCPTool(t *testing.T) {
	entry := everything(t)
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

package mcp_test

import (
	"errors"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/internal/testutil"
	"github.com/svc-dev/svc/tools/mcp"
	"github.com/svc-dev/svc/tools/mcp/mcptest"
)

func TestEverythingStdio(t *testing.T) {
	entry := mcptest.Everything(t)
	m := newManager(t, mcp.Config{})
	src := m.Source("agent", svc.MCPServer{Name: "everything", Transport: "stdio", Command: "node",
		Args: []string{entry, "stdio"}, Env: map[string]string{"SVC_MCP_PROBE": "marker-42"}, Prefix: "ev_"})
	// A second copy under another prefix: same-named tools coexist.
	other := m.Source("agent", svc.MCPServer{Name: "everything2", Transport: "stdio", Command: "node",
		Args: []string{entry, "stdio"}, Prefix: "ev2_"})

	echo := mustTool(t, src, "ev_echo")
	mustTool(t, other, "ev2_echo")
	if echo.Access() != svc.AccessNetwork {
		t.Errorf("echo (readOnlyHint) access = %v, want network", echo.Access())
	}
	if got := call(t, echo, `{"message":"hello"}`); got != "Echo: hello" {
		t.Errorf("echo = %#v", got)
	}
	if got := call(t, mustTool(t, src, "ev_get-sum"), `{"a":2,"b":3}`); got != "The sum of 2 and 3 is 5." {
		t.Errorf("get-sum = %#v", got)
	}
	weather, ok := call(t, mustTool(t, src, "ev_get-structured-content"), `{"location":"Chicago"}`).(map[string]any)
	if !ok || weather["conditions"] != "Light rain / drizzle" {
		t.Errorf("get-structured-content = %#v, want its structured content", weather)
	}
	if env, _ := call(t, mustTool(t, src, "ev_get-env"), `{}`).(string); !strings.Contains(env, "marker-42") {
		t.Errorf("the server's environment lacks the configured Env: %.200s", env)
	}

	// Kill the subprocess under the actor: it restarts it.
	pid := mcp.PID(src)
	if pid == 0 {
		t.Fatal("no pid")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testutil.Within(t, mcpWait, "the restart", func() bool {
		s := status(t, m, "agent", "everything")
		return s.State == mcp.StateReady && s.Restarts >= 1
	})
	if got := call(t, echo, `{"message":"again"}`); got != "Echo: again" {
		t.Errorf("echo after restart = %#v", got)
	}
	pid2, pid3 := mcp.PID(src), mcp.PID(other)
	if pid2 == pid || pid2 == 0 || alive(pid) {
		t.Errorf("after restart: pid %d (killed %d, alive %v)", pid2, pid, alive(pid))
	}

	if err := m.Shutdown(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	for _, p := range []int{pid2, pid3} {
		if err := syscall.Kill(p, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("server %d after Shutdown: kill(0) = %v, want ESRCH", p, err)
		}
	}
}

func TestEverythingStreamableHTTP(t *testing.T) {
	entry := mcptest.Everything(t)
	port := mcptest.StartHTTP(t, entry, "streamableHttp")
	m := newManager(t, mcp.Config{})
	src := m.Source("agent", svc.MCPServer{Name: "everything", Transport: "http",
		URL: "http://127.0.0.1:" + strconv.Itoa(port) + "/mcp"})
	if got := call(t, mustTool(t, src, "echo"), `{"message":"over http"}`); got != "Echo: over http" {
		t.Errorf("echo = %#v", got)
	}
	if got := call(t, mustTool(t, src, "get-sum"), `{"a":1,"b":1}`); got != "The sum of 1 and 1 is 2." {
		t.Errorf("get-sum = %#v", got)
	}
	if s := status(t, m, "agent", "everything"); s.State != mcp.StateReady || s.Transport != "http" {
		t.Errorf("status %+v", s)
	}
}

func TestEverythingSSE(t *testing.T) {
	entry := mcptest.Everything(t)
	port := mcptest.StartHTTP(t, entry, "sse")
	m := newManager(t, mcp.Config{})
	src := m.Source("agent", svc.MCPServer{Name: "everything", Transport: "sse",
		URL: "http://127.0.0.1:" + strconv.Itoa(port) + "/sse"})
	if got := call(t, mustTool(t, src, "echo"), `{"message":"over sse"}`); got != "Echo: over sse" {
		t.Errorf("echo = %#v", got)
	}
}

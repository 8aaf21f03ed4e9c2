package mcp_test

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/internal/testutil"
	"github.com/svc-dev/svc/tools/mcp"
)

// serveHTTP serves testServer over streamable HTTP (or SSE) on 127.0.0.1
// until the test ends.
func serveHTTP(t *testing.T, sse bool) string {
	t.Helper()
	srv := testServer()
	var h http.Handler = sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil)
	if sse {
		h = sdk.NewSSEHandler(func(*http.Request) *sdk.Server { return srv }, nil)
	}
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return ts.URL
}

func TestStreamableHTTPToolsAndResults(t *testing.T) {
	url := serveHTTP(t, false)
	m := newManager(t, mcp.Config{})
	src := m.Source("agent", svc.MCPServer{Name: "go", Transport: "http", URL: url, Prefix: "go_"})

	if s := status(t, m, "agent", "go"); s.State != mcp.StateStopped {
		t.Fatalf("before first use: state %q, want stopped (lazy start)", s.State)
	}
	all := tools(t, src)
	for _, n := range []string{"go_echo", "go_fail", "go_multi", "go_structured", "go_sleep"} {
		if _, ok := all[n]; !ok {
			t.Fatalf("tool %s missing from %v", n, all)
		}
	}
	echo := all["go_echo"]
	if echo.Access() != svc.AccessNetwork {
		t.Errorf("read-only tool access = %v, want network", echo.Access())
	}
	if all["go_fail"].Access() != svc.AccessWrite {
		t.Errorf("unannotated tool access = %v, want write", all["go_fail"].Access())
	}
	if echo.Description() != "echoes text" {
		t.Errorf("description %q", echo.Description())
	}
	if got := call(t, echo, `{"text":"hi"}`); got != "echo: hi" {
		t.Errorf("echo = %#v, want the lone text block as a JSON string", got)
	}
	if got := call(t, all["go_multi"], `{}`); !reflect.DeepEqual(got, []any{"a", "b"}) {
		t.Errorf("multi = %#v, want a list of the text blocks", got)
	}
	if got := call(t, all["go_structured"], `null`); !reflect.DeepEqual(got, map[string]any{"n": 1.0}) {
		t.Errorf("structured = %#v, want the structured content", got)
	}
	_, err := all["go_fail"].Call(ctxFor(t), []byte(`{}`))
	wantToolError(t, err, "it broke")
	// Arguments the server rejects come back as the server's words.
	_, err = echo.Call(ctxFor(t), []byte(`{"text":5}`))
	wantToolError(t, err, "text")

	s := status(t, m, "agent", "go")
	if s.State != mcp.StateReady || s.Transport != "http" || s.Restarts != 0 || len(s.Tools) != len(all) {
		t.Errorf("status %+v", s)
	}
}

func TestSSEInProcess(t *testing.T) {
	url := serveHTTP(t, true)
	m := newManager(t, mcp.Config{})
	src := m.Source("agent", svc.MCPServer{Name: "go", Transport: "sse", URL: url})
	if got := call(t, mustTool(t, src, "echo"), `{"text":"over sse"}`); got != "echo: over sse" {
		t.Errorf("echo = %#v", got)
	}
}

func TestSourcesSharedPerAgentAndReplaced(t *testing.T) {
	url := serveHTTP(t, false)
	m := newManager(t, mcp.Config{})
	cfg := svc.MCPServer{Name: "go", Transport: "http", URL: url}
	a := m.Source("a", cfg)
	if b := m.Source("a", cfg); b != a {
		t.Error("same agent and config: want the same source")
	}
	other := m.Source("b", cfg)
	if other == a {
		t.Error("another agent: want a server of its own")
	}
	mustTool(t, a, "echo")
	mustTool(t, other, "echo")

	cfg.Prefix = "x_"
	repl := m.Sources("a", []svc.MCPServer{cfg})[0]
	mustTool(t, repl, "x_echo")
	if _, err := a.Tools(ctxFor(t)); !errors.Is(err, svc.ErrShuttingDown) {
		t.Errorf("replaced source: Tools error %v, want ShuttingDownError", err)
	}
	m.Sources("b", nil)
	if _, err := other.Tools(ctxFor(t)); !errors.Is(err, svc.ErrShuttingDown) {
		t.Errorf("forgotten source: Tools error %v, want ShuttingDownError", err)
	}
	st := m.Status()
	if len(st) != 1 || st[0].Agent != "a" || st[0].Tools[0] != "x_echo" {
		t.Errorf("status after replace: %+v", st)
	}
}

func TestEagerAndStartAll(t *testing.T) {
	url := serveHTTP(t, false)
	m := newManager(t, mcp.Config{Eager: true})
	m.Source("agent", svc.MCPServer{Name: "go", Transport: "http", URL: url})
	testutil.Within(t, mcpWait, "eager start", func() bool { return status(t, m, "agent", "go").State == mcp.StateReady })

	// A port nothing listens on.
	down := httptest.NewServer(http.NotFoundHandler())
	downURL := down.URL
	down.Close()
	m2 := newManager(t, mcp.Config{})
	m2.Source("agent", svc.MCPServer{Name: "up", Transport: "http", URL: url})
	m2.Source("agent", svc.MCPServer{Name: "down", Transport: "http", URL: downURL})
	err := m2.StartAll(ctxFor(t))
	wantToolError(t, err, "down")
	if s := status(t, m2, "agent", "up"); s.State != mcp.StateReady {
		t.Errorf("up: %+v", s)
	}
	if s := status(t, m2, "agent", "down"); s.State != mcp.StateRestarting || s.LastError == "" {
		t.Errorf("down: %+v, want restarting with the error", s)
	}
}

func TestValidate(t *testing.T) {
	for _, s := range []svc.MCPServer{
		{Name: "", Transport: "stdio", Command: "x"},
		{Name: "a", Transport: "stdio"},
		{Name: "a", Transport: "http"},
		{Name: "a", Transport: "sse", URL: "ftp://x"},
		{Name: "a", Transport: "carrier-pigeon", URL: "http://x"},
		{Name: "a", Transport: "http", URL: "http://x", Prefix: "bad prefix"},
	} {
		if err := mcp.Validate(s); !errors.Is(err, svc.ErrSpecValidation) {
			t.Errorf("Validate(%+v) = %v, want SpecValidationError", s, err)
		}
	}
	m := newManager(t, mcp.Config{})
	_, err := m.Source("a", svc.MCPServer{Name: "a", Transport: "http"}).Tools(ctxFor(t))
	if !errors.Is(err, svc.ErrSpecValidation) {
		t.Errorf("invalid source: %v", err)
	}
}

// helperServer configures the test binary as a stdio server.
func helperServer(env map[string]string) svc.MCPServer {
	e := map[string]string{"SVC_MCP_HELPER": "1"}
	for k, v := range env {
		e[k] = v
	}
	return svc.MCPServer{Name: "helper", Transport: "stdio", Command: os.Args[0], Env: e}
}

func TestStdioRestartAndCallTimeoutWhileRestarting(t *testing.T) {
	gate := filepath.Join(t.TempDir(), "gate")
	m := newManager(t, mcp.Config{CallTimeout: 500 * time.Millisecond})
	src := m.Source("agent", helperServer(map[string]string{"SVC_MCP_HELPER_GATE": gate}))
	echo := mustTool(t, src, "echo")
	if got := call(t, echo, `{"text":"one"}`); got != "echo: one" {
		t.Fatalf("echo = %#v", got)
	}
	pid := mcp.PID(src)
	if got := call(t, mustTool(t, src, "pid"), `{}`); got != strconv.Itoa(pid) {
		t.Fatalf("server pid %v, PID() %d", got, pid)
	}

	// Close the gate and crash the server: every restart now fails.
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := mustTool(t, src, "crash").Call(ctxFor(t), []byte(`{}`)); err == nil {
		t.Fatal("crash returned no error")
	}
	testutil.Within(t, mcpWait, "a failed restart", func() bool {
		s := status(t, m, "agent", "helper")
		return s.State == mcp.StateRestarting && s.Restarts >= 1 && strings.Contains(s.LastError, "gate closed")
	})
	if alive(pid) {
		t.Errorf("crashed server %d still exists", pid)
	}
	// The known tools stay listed while the server restarts; a call waits
	// for it, up to the call timeout.
	if _, err := src.Tools(ctxFor(t)); err != nil {
		t.Fatalf("Tools while restarting: %v", err)
	}
	_, err := echo.Call(ctxFor(t), []byte(`{"text":"two"}`))
	wantToolError(t, err, "not ready")

	// Open the gate: the next restart succeeds and calls work again.
	if err := os.Remove(gate); err != nil {
		t.Fatal(err)
	}
	testutil.Within(t, mcpWait, "recovery", func() bool { return status(t, m, "agent", "helper").State == mcp.StateReady })
	if got := call(t, echo, `{"text":"three"}`); got != "echo: three" {
		t.Fatalf("echo after restart = %#v", got)
	}
	pid2 := mcp.PID(src)
	if pid2 == 0 || pid2 == pid {
		t.Fatalf("restarted server pid %d (was %d)", pid2, pid)
	}
	if err := m.Shutdown(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid2, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("server %d after Shutdown: kill(0) = %v, want ESRCH", pid2, err)
	}
	if _, err := echo.Call(ctxFor(t), []byte(`{"text":"four"}`)); !errors.Is(err, svc.ErrShuttingDown) {
		t.Errorf("call after Shutdown: %v, want ShuttingDownError", err)
	}
}

func TestStdioCallTimeout(t *testing.T) {
	m := newManager(t, mcp.Config{CallTimeout: 300 * time.Millisecond})
	src := m.Source("agent", helperServer(nil))
	_, err := mustTool(t, src, "sleep").Call(ctxFor(t), []byte(`{"ms":60000}`))
	wantToolError(t, err, "no answer within")
	// The session survives a call that timed out.
	if got := call(t, mustTool(t, src, "echo"), `{"text":"still here"}`); got != "echo: still here" {
		t.Fatalf("echo = %#v", got)
	}
}

// A server's own timeout_seconds wins over the manager's CallTimeout.
func TestStdioServerTimeoutSeconds(t *testing.T) {
	m := newManager(t, mcp.Config{CallTimeout: time.Hour})
	cfg := helperServer(nil)
	cfg.TimeoutSeconds = 0.3
	src := m.Source("agent", cfg)
	_, err := mustTool(t, src, "sleep").Call(ctxFor(t), []byte(`{"ms":60000}`))
	wantToolError(t, err, "no answer within 300ms")
	cfg.TimeoutSeconds = -1
	if err := mcp.Validate(cfg); svc.KindOf(err) != svc.KindSpecValidation {
		t.Errorf("Validate(timeout_seconds -1) = %v, want a SpecValidationError", err)
	}
}

func TestShutdownKillsStubbornServerAndItsChildren(t *testing.T) {
	m := newManager(t, mcp.Config{StopGrace: 100 * time.Millisecond})
	src := m.Source("agent", helperServer(map[string]string{"SVC_MCP_HELPER_STUBBORN": "1"}))
	child, err := strconv.Atoi(call(t, mustTool(t, src, "spawn"), `{}`).(string))
	if err != nil {
		t.Fatal(err)
	}
	pid := mcp.PID(src)
	if !alive(pid) || !alive(child) {
		t.Fatalf("server %d or its child %d not running", pid, child)
	}
	if err := m.Shutdown(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("server %d after Shutdown: kill(0) = %v, want ESRCH", pid, err)
	}
	testutil.Within(t, mcpWait, "the orphaned child to be reaped", func() bool { return !alive(child) })
}

func TestArgumentsMustBeAnObject(t *testing.T) {
	url := serveHTTP(t, false)
	m := newManager(t, mcp.Config{})
	echo := mustTool(t, m.Source("agent", svc.MCPServer{Name: "go", Transport: "http", URL: url}), "echo")
	for _, args := range []string{`[1]`, `"x"`, `{"text":`} {
		_, err := echo.Call(ctxFor(t), []byte(args))
		wantToolError(t, err, "JSON object")
	}
}

// An HTTP server that restarts forgets its sessions: the actor notices the
// broken session and opens a new one.
func TestStreamableHTTPServerRestart(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	// serve runs testServer on l; stop closes the HTTP server and the MCP
	// sessions the handler would otherwise keep for clients that never
	// come back.
	serve := func(l net.Listener) (stop func()) {
		srv := testServer()
		hs := &http.Server{Handler: sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil)}
		done := make(chan struct{})
		go func() { _ = hs.Serve(l); close(done) }()
		return func() {
			_ = hs.Close()
			<-done
			for ss := range srv.Sessions() {
				_ = ss.Close()
			}
		}
	}
	stopFirst := serve(l)
	t.Cleanup(stopFirst)
	m := newManager(t, mcp.Config{})
	src := m.Source("agent", svc.MCPServer{Name: "go", Transport: "http", URL: "http://" + addr})
	echo := mustTool(t, src, "echo")
	if got := call(t, echo, `{"text":"before"}`); got != "echo: before" {
		t.Fatalf("echo = %#v", got)
	}

	stopFirst()
	l2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(serve(l2))

	// The first call after the restart may fail (its session is gone); the
	// actor reconnects and later calls succeed.
	testutil.Within(t, mcpWait, "a new session", func() bool {
		_, _ = echo.Call(ctxFor(t), []byte(`{"text":"probe"}`))
		s := status(t, m, "agent", "go")
		return s.State == mcp.StateReady && s.Restarts >= 1
	})
	if got := call(t, echo, `{"text":"after"}`); got != "echo: after" {
		t.Fatalf("echo after the server restarted = %#v", got)
	}
}

// Many invocations starting at once share the one lazy start, and their
// calls run concurrently on the one session.
func TestConcurrentFirstUse(t *testing.T) {
	m := newManager(t, mcp.Config{})
	src := m.Source("agent", helperServer(nil))
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			list, err := src.Tools(ctxFor(t))
			if err != nil {
				errs <- err
				return
			}
			for _, tl := range list {
				if tl.Name() != "echo" {
					continue
				}
				want := "echo: " + strconv.Itoa(i)
				out, err := tl.Call(ctxFor(t), []byte(`{"text":"`+strconv.Itoa(i)+`"}`))
				if err != nil {
					errs <- err
				} else if string(out) != strconv.Quote(want) {
					errs <- fmt.Errorf("call %d: got %s, want %q", i, out, want)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if s := status(t, m, "agent", "helper"); s.Restarts != 0 || s.State != mcp.StateReady {
		t.Errorf("one start expected: %+v", s)
	}
}

// A server declared idempotent: false has tools a resumed run does not call
// again (svc.ToolIdempotent); by default they are idempotent.
func TestIdempotentSetting(t *testing.T) {
	url := serveHTTP(t, false)
	m := newManager(t, mcp.Config{})
	no := false
	for _, tc := range []struct {
		agent string
		cfg   svc.MCPServer
		want  bool
	}{
		{"plain", svc.MCPServer{Name: "go", Transport: "http", URL: url}, true},
		{"risky", svc.MCPServer{Name: "go", Transport: "http", URL: url, Idempotent: &no}, false},
	} {
		all := tools(t, m.Source(tc.agent, tc.cfg))
		if got := svc.ToolIdempotent(all["echo"]); got != tc.want {
			t.Errorf("%s: echo idempotent = %v, want %v", tc.agent, got, tc.want)
		}
	}
}

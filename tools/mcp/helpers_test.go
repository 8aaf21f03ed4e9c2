package mcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/tools/mcp"
)

// newManager returns a manager on an actor system of its own; both are
// stopped when the test ends (the manager first, as the runtime does).
func newManager(t *testing.T, cfg mcp.Config) *mcp.Manager {
	t.Helper()
	system := actor.NewActorSystem(
		actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }),
		actor.WithDeadLetterThrottleInterval(10*time.Millisecond),
		actor.WithDeadLetterRequestLogging(false),
	)
	if cfg.RestartBackoff == (mcp.Backoff{}) {
		cfg.RestartBackoff = mcp.Backoff{Base: 20 * time.Millisecond, Max: 200 * time.Millisecond}
	}
	if cfg.StopGrace == 0 {
		cfg.StopGrace = 500 * time.Millisecond
	}
	m := mcp.NewManager(system, cfg)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := m.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		system.Shutdown()
	})
	return m
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// tools lists a source's tools by name.
func tools(t *testing.T, src svc.ToolSource) map[string]svc.Tool {
	t.Helper()
	list, err := src.Tools(ctxFor(t))
	if err != nil {
		t.Fatalf("Tools: %v", err)
	}
	out := map[string]svc.Tool{}
	for _, tl := range list {
		out[tl.Name()] = tl
	}
	return out
}

func mustTool(t *testing.T, src svc.ToolSource, name string) svc.Tool {
	t.Helper()
	all := tools(t, src)
	tl, ok := all[name]
	if !ok {
		names := make([]string, 0, len(all))
		for n := range all {
			names = append(names, n)
		}
		t.Fatalf("no tool %q among %v", name, names)
	}
	return tl
}

// call calls a tool and decodes its JSON result into a Go value.
func call(t *testing.T, tl svc.Tool, args string) any {
	t.Helper()
	out, err := tl.Call(ctxFor(t), json.RawMessage(args))
	if err != nil {
		t.Fatalf("%s(%s): %v", tl.Name(), args, err)
	}
	var v any
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("%s: result %s is not JSON: %v", tl.Name(), out, err)
	}
	return v
}

// status returns the manager's status of one server.
func status(t *testing.T, m *mcp.Manager, agent, name string) svc.ToolServerStatus {
	t.Helper()
	for _, s := range m.Status() {
		if s.Agent == agent && s.Name == name {
			return s
		}
	}
	t.Fatalf("no status for %s/%s in %+v", agent, name, m.Status())
	return svc.ToolServerStatus{}
}

// mcpWait bounds waits on server processes (starts, restarts with
// backoff, reaping): it only stops a broken test from hanging.
const mcpWait = 30 * time.Second

// alive reports whether a process exists and is not a zombie (an orphaned
// grandchild may wait for an init that reaps slowly).
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return !os.IsNotExist(err)
	}
	// The state follows the parenthesised command name.
	s := string(stat)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

func wantToolError(t *testing.T, err error, contains string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want a ToolExecutionError containing %q", contains)
	}
	if !errors.Is(err, svc.ErrToolExecution) {
		t.Fatalf("error %v (kind %s) is not a ToolExecutionError", err, svc.KindOf(err))
	}
	if !strings.Contains(err.Error(), contains) {
		t.Fatalf("error %q does not contain %q", err, contains)
	}
}

// A manager without servers shuts down cleanly even past its deadline (a
// process whose shutdown grace ran out): nothing was killed, so nothing is
// reported (it used to say "servers killed" about none, at random).
func TestShutdownWithoutServersPastDeadline(t *testing.T) {
	m := newManager(t, mcp.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range 50 {
		if err := m.Shutdown(ctx); err != nil {
			t.Fatalf("Shutdown with no server and an ended context: %v", err)
		}
	}
}

package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/agent"
)

// source is a fake svc.ToolSource: it returns its tools, or err, and counts
// the calls.
type source struct {
	name  string
	tools func() []svc.Tool
	err   error
	calls atomic.Int32
}

func (s *source) Name() string { return s.name }
func (s *source) Tools(ctx context.Context) ([]svc.Tool, error) {
	s.calls.Add(1)
	if s.err != nil {
		return nil, s.err
	}
	return s.tools(), nil
}

// toolCaller calls the named tools one per turn, then answers with what
// the last tool returned.
func toolCaller(names ...string) *recorder {
	return &recorder{fn: func(n int, req svc.ModelRequest) (svc.ModelResponse, error) {
		if n < len(names) {
			return callTool(names[n], `{}`), nil
		}
		last := req.Messages[len(req.Messages)-1]
		return svc.ModelResponse{Output: last.Content}, nil
	}}
}

func TestToolSources(t *testing.T) {
	remote := constTool("remote", svc.AccessNetwork, `"from the source"`)
	writer := constTool("writer", svc.AccessWrite, `"wrote"`)
	src := &source{name: "srv", tools: func() []svc.Tool { return []svc.Tool{writer, remote} }}
	m := toolCaller("remote", "writer", "local")
	c, err := agent.Compile(svc.Agent{Name: "tooled", Model: "fake:m", TrustLevel: svc.TrustMedium,
		Tools: []svc.Tool{constTool("local", svc.AccessRead, `"local"`)}},
		registry(map[string]svc.Model{"m": m}), agent.WithToolSources(src))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.ToolSpecs) != 1 {
		t.Fatalf("compiled specs = %+v: source tools belong to invocations, not to the compiled agent", c.ToolSpecs)
	}
	ev := &events{}
	inv := invocation(c, `1`)
	inv.Emitter = ev
	out, err := agent.Run(context.Background(), inv)
	if err != nil || string(out.Output) != `"local"` {
		t.Fatalf("Run = %s, %v", out.Output, err)
	}
	// The model was offered the static and the source's tools, sorted.
	var names []string
	for _, s := range m.requests()[0].Tools {
		names = append(names, s.Name)
	}
	if !slices.Equal(names, []string{"local", "remote", "writer"}) {
		t.Errorf("tools offered %q", names)
	}
	// Source tools run like the others: events, and the trust gate by the
	// tool's access (medium may not write).
	if remote.calls.Load() != 1 || writer.calls.Load() != 0 {
		t.Errorf("calls: remote %d writer %d", remote.calls.Load(), writer.calls.Load())
	}
	want := []svc.EventType{svc.EventToolCallStarted, svc.EventToolCallCompleted,
		svc.EventToolCallStarted, svc.EventToolCallFailed, svc.EventToolCallStarted, svc.EventToolCallCompleted}
	if got := ev.types(); !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	evs := ev.get()
	checkEvent(t, evs[1], svc.EventToolCallCompleted, "remote")
	if msg, _ := evs[3].Payload["error"].(string); !strings.Contains(msg, "trust") {
		t.Errorf("writer failure = %q, want a trust violation", msg)
	}

	// Sources are asked at the start of every invocation: what they offer
	// may change between runs.
	if _, err := agent.Run(context.Background(), invocation(c, `1`)); err != nil {
		t.Fatal(err)
	}
	if n := src.calls.Load(); n != 2 {
		t.Errorf("source asked %d times over 2 invocations", n)
	}
}

func TestToolSourceFailures(t *testing.T) {
	boom := errors.New("server exited")
	tests := []struct {
		name string
		src  *source
		want string
	}{
		{"source error", &source{name: "fs", err: boom}, `agent a: tool source "fs" failed: server exited`},
		{"clash with a static tool", &source{name: "fs", tools: func() []svc.Tool { return []svc.Tool{constTool("local", svc.AccessRead, `1`)} }},
			`tool source "fs": tool "local" has the name of another tool`},
		{"clash between sources", &source{tools: func() []svc.Tool {
			return []svc.Tool{constTool("x", svc.AccessRead, `1`), constTool("x", svc.AccessRead, `1`)}
		}},
			`tool source 0: tool "x" has the name of another tool`},
		{"bad name", &source{tools: func() []svc.Tool { return []svc.Tool{constTool("no spaces", svc.AccessRead, `1`)} }},
			`tool name "no spaces"`},
		{"bad schema", &source{tools: func() []svc.Tool {
			return []svc.Tool{&tool{name: "t", access: svc.AccessRead, schema: json.RawMessage(`{`)}}
		}}, `input schema is not valid JSON`},
		{"nil tool", &source{tools: func() []svc.Tool { return []svc.Tool{nil} }}, `gave a nil tool`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := &recorder{fn: answer(`1`)}
			c, err := agent.Compile(svc.Agent{Name: "a", Model: "fake:m", Tools: []svc.Tool{constTool("local", svc.AccessRead, `1`)}},
				registry(map[string]svc.Model{"m": m}), agent.WithToolSources(tt.src))
			if err != nil {
				t.Fatal(err)
			}
			_, err = agent.Run(context.Background(), invocation(c, `1`))
			kindAndReason(t, err, svc.KindToolExecution, agent.ReasonToolSource)
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
			if tt.src.err != nil && !errors.Is(err, boom) {
				t.Errorf("the source's error is not in the chain of %v", err)
			}
			if len(m.requests()) != 0 {
				t.Error("the model was called although the tools could not be gathered")
			}
		})
	}

	// A source that gives up because the run was cancelled makes a
	// cancelled run, not a tool failure.
	ctx, cancel := context.WithCancel(context.Background())
	c, err := agent.Compile(svc.Agent{Name: "a", Model: "test:echo"}, nil, agent.WithToolSources(sourceFunc(func(ctx context.Context) ([]svc.Tool, error) {
		cancel()
		return nil, ctx.Err()
	})))
	if err != nil {
		t.Fatal(err)
	}
	_, err = agent.Run(ctx, invocation(c, `1`))
	if !errors.Is(err, svc.ErrCancelled) || !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled during the source: %v", err)
	}
}

type sourceFunc func(ctx context.Context) ([]svc.Tool, error)

func (f sourceFunc) Tools(ctx context.Context) ([]svc.Tool, error) { return f(ctx) }

// An agent with mcp_servers compiles once its caller provides the sources
// that serve them.
func TestMCPServersNeedSources(t *testing.T) {
	a := svc.Agent{Name: "a", Model: "test:echo", MCPServers: []svc.MCPServer{{Name: "fs", Transport: "stdio", Command: "x"}}}
	if _, err := agent.Compile(a, nil); !errors.Is(err, svc.ErrSpecValidation) {
		t.Fatalf("without sources: %v", err)
	}
	if _, err := agent.Compile(a, nil, agent.WithToolSources(&source{tools: func() []svc.Tool { return nil }})); err != nil {
		t.Fatalf("with sources: %v", err)
	}
}

func TestBuiltins(t *testing.T) {
	var gotDef svc.Agent
	builtins := map[string]agent.Builtin{
		"hello": func(def svc.Agent) (svc.Tool, error) {
			gotDef = def
			return constTool("hello", svc.AccessRead, `"hi from `+def.Name+`"`), nil
		},
		"misnamed": func(svc.Agent) (svc.Tool, error) { return constTool("other", svc.AccessRead, `1`), nil },
		"broken":   func(svc.Agent) (svc.Tool, error) { return nil, errors.New("no runtime") },
	}
	m := toolCaller("hello")
	c, err := agent.Compile(svc.Agent{Name: "greeter", Model: "fake:m", BuiltinTools: []string{"hello"}, TrustLevel: svc.TrustLow},
		registry(map[string]svc.Model{"m": m}), agent.WithBuiltins(builtins))
	if err != nil {
		t.Fatal(err)
	}
	if gotDef.Name != "greeter" || gotDef.Trust() != svc.TrustLow {
		t.Errorf("builtin built for %+v", gotDef)
	}
	out, err := agent.Run(context.Background(), invocation(c, `1`))
	if err != nil || string(out.Output) != `"hi from greeter"` {
		t.Fatalf("Run = %s, %v", out.Output, err)
	}
	if s := m.requests()[0].Tools; len(s) != 1 || s[0].Name != "hello" {
		t.Errorf("tools offered %+v", s)
	}

	for _, tt := range []struct {
		a    svc.Agent
		want string
	}{
		{svc.Agent{BuiltinTools: []string{"nope"}}, `builtin tool "nope" is not available in this build`},
		{svc.Agent{BuiltinTools: []string{"hello", "hello"}}, `"hello" listed twice`},
		{svc.Agent{BuiltinTools: []string{"misnamed"}}, `misnamed: the runtime built no tool of that name`},
		{svc.Agent{BuiltinTools: []string{"broken"}}, `builtin_tools: broken: no runtime`},
		{svc.Agent{BuiltinTools: []string{"hello"}, Tools: []svc.Tool{constTool("hello", svc.AccessRead, `1`)}}, `tool "hello" has the name of builtin tool hello`},
	} {
		tt.a.Name, tt.a.Model = "a", "test:echo"
		_, err := agent.Compile(tt.a, nil, agent.WithBuiltins(builtins))
		if !errors.Is(err, svc.ErrSpecValidation) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: err = %v, want %q", tt.a.BuiltinTools, err, tt.want)
		}
	}
}

// A tool sees the conversation of the invocation calling it: the input and
// the complete turns before the one that called it.
func TestConversation(t *testing.T) {
	if agent.Conversation(context.Background()) != nil {
		t.Fatal("Conversation outside a tool call should be nil")
	}
	var seen [][]svc.Message
	peek := &tool{name: "peek", access: svc.AccessRead, fn: func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
		seen = append(seen, agent.Conversation(ctx))
		return json.RawMessage(`"peeked"`), nil
	}}
	m := toolCaller("peek", "peek")
	c := mustCompile(t, svc.Agent{Name: "a", Model: "fake:m", Tools: []svc.Tool{peek}}, map[string]svc.Model{"m": m})
	if _, err := agent.Run(context.Background(), invocation(c, `"question"`)); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 2 {
		t.Fatalf("tool called %d times", len(seen))
	}
	if len(seen[0]) != 1 || seen[0][0].Role != svc.RoleUser || string(seen[0][0].Content) != `"question"` {
		t.Errorf("first call saw %+v, want just the input", seen[0])
	}
	// The second call sees the first turn: the model's call and its result.
	if len(seen[1]) != 3 || seen[1][1].Role != svc.RoleAssistant || seen[1][1].ToolCalls[0].Name != "peek" ||
		seen[1][2].Role != svc.RoleTool || string(seen[1][2].Content) != `"peeked"` {
		t.Errorf("second call saw %+v", seen[1])
	}
}

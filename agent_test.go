package svc_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/svc-dev/svc"
)

// fakeTool is a Tool with a fixed name and access.
type fakeTool struct {
	name   string
	access svc.Access
}

func (f fakeTool) Name() string                 { return f.name }
func (f fakeTool) Description() string          { return "fake " + f.name }
func (f fakeTool) InputSchema() json.RawMessage { return json.RawMessage(`{}`) }
func (f fakeTool) Access() svc.Access           { return f.access }
func (f fakeTool) Call(context.Context, json.RawMessage) (json.RawMessage, error) {
	return json.RawMessage(`null`), nil
}

func fullAgent() svc.Agent {
	return svc.Agent{
		Name:         "full",
		Model:        "test:echo",
		Instructions: "do it",
		OutputType:   json.RawMessage(`{"type":"object"}`),
		InputType:    json.RawMessage(`{"type":"string"}`),
		Tools:        []svc.Tool{fakeTool{"a", svc.AccessRead}, fakeTool{"b", svc.AccessWrite}},
		MCPServers: []svc.MCPServer{{Name: "fs", Transport: "stdio", Command: "npx", Args: []string{"-y", "server"},
			Env: map[string]string{"K": "v"}, Prefix: "fs_"}},
		BuiltinTools:   []string{"spawn_agents"},
		FallbackModels: []string{"test:fail", "test:echo"},
		ModelSettings: map[string]any{
			"temperature": 0.2,
			"output":      map[string]any{"category": "billing", "tags": []any{"x", map[string]any{"deep": "y"}}},
			"call_tools":  []string{"a", "b"},
		},
		TrustLevel:    svc.TrustHigh,
		ContextPasser: svc.ContextFull,
	}
}

// withoutHooks strips the hooks, which reflect.DeepEqual cannot compare.
func withoutHooks(a svc.Agent) svc.Agent {
	a.PreProcess, a.PostProcess = nil, nil
	return a
}

func TestAgentCloneIsDeep(t *testing.T) {
	mutations := []struct {
		name   string
		mutate func(c *svc.Agent)
	}{
		{"output_type bytes", func(c *svc.Agent) { c.OutputType[2] = 'X' }},
		{"input_type bytes", func(c *svc.Agent) { c.InputType[2] = 'X' }},
		{"tools element", func(c *svc.Agent) { c.Tools[0] = fakeTool{"z", svc.AccessNetwork} }},
		{"tools append", func(c *svc.Agent) { c.Tools = append(c.Tools[:1], fakeTool{"q", svc.AccessRead}) }},
		{"mcp server field", func(c *svc.Agent) { c.MCPServers[0].Command = "evil" }},
		{"mcp args", func(c *svc.Agent) { c.MCPServers[0].Args[0] = "--evil" }},
		{"mcp env", func(c *svc.Agent) { c.MCPServers[0].Env["K"] = "changed"; c.MCPServers[0].Env["NEW"] = "1" }},
		{"builtin tools", func(c *svc.Agent) { c.BuiltinTools[0] = "other" }},
		{"fallbacks", func(c *svc.Agent) { c.FallbackModels[0] = "x:y" }},
		{"fallbacks append", func(c *svc.Agent) { c.FallbackModels = append(c.FallbackModels[:1], "x:y") }},
		{"settings top level", func(c *svc.Agent) { c.ModelSettings["temperature"] = 1.0; c.ModelSettings["new"] = true }},
		{"settings nested map", func(c *svc.Agent) { c.ModelSettings["output"].(map[string]any)["category"] = "tech" }},
		{"settings nested list", func(c *svc.Agent) { c.ModelSettings["output"].(map[string]any)["tags"].([]any)[0] = "changed" }},
		{"settings map in list", func(c *svc.Agent) {
			c.ModelSettings["output"].(map[string]any)["tags"].([]any)[1].(map[string]any)["deep"] = "changed"
		}},
		{"settings string list", func(c *svc.Agent) { c.ModelSettings["call_tools"].([]string)[0] = "changed" }},
		{"settings delete", func(c *svc.Agent) { delete(c.ModelSettings, "output") }},
	}
	for _, m := range mutations {
		t.Run(m.name, func(t *testing.T) {
			orig := fullAgent()
			c := orig.Clone()
			if !reflect.DeepEqual(withoutHooks(c), withoutHooks(orig)) {
				t.Fatalf("clone differs before mutation:\n%+v\n%+v", c, orig)
			}
			m.mutate(&c)
			if !reflect.DeepEqual(withoutHooks(orig), withoutHooks(fullAgent())) {
				t.Errorf("mutating the clone changed the original:\n%+v", orig)
			}
		})
	}
}

func TestAgentCloneKeepsNilsAndHooks(t *testing.T) {
	var zero svc.Agent
	c := zero.Clone()
	if c.OutputType != nil || c.InputType != nil || c.Tools != nil || c.MCPServers != nil ||
		c.BuiltinTools != nil || c.FallbackModels != nil || c.ModelSettings != nil {
		t.Errorf("zero agent's clone has non-nil fields: %+v", c)
	}
	called := 0
	hook := func(_ context.Context, v json.RawMessage) (json.RawMessage, error) { called++; return v, nil }
	a := svc.Agent{Name: "h", PreProcess: hook, PostProcess: hook}
	c = a.Clone()
	if c.PreProcess == nil || c.PostProcess == nil {
		t.Fatal("hooks dropped by Clone")
	}
	_, _ = c.PreProcess(context.Background(), nil)
	_, _ = c.PostProcess(context.Background(), nil)
	if called != 2 {
		t.Errorf("cloned hooks called the original %d times, want 2", called)
	}
}

func TestAgentValidate(t *testing.T) {
	ok := func(mod func(a *svc.Agent)) svc.Agent {
		a := svc.Agent{Name: "agent", Model: "test:echo"}
		mod(&a)
		return a
	}
	tests := []struct {
		name    string
		agent   svc.Agent
		wantErr string // substring; "" means valid
	}{
		{"minimal", ok(func(*svc.Agent) {}), ""},
		{"everything", fullAgent(), ""},
		{"every trust level", ok(func(a *svc.Agent) { a.TrustLevel = svc.TrustSandbox }), ""},
		{"null schema", ok(func(a *svc.Agent) { a.InputType = json.RawMessage(`null`) }), ""},
		{"empty name", ok(func(a *svc.Agent) { a.Name = "" }), "agent name"},
		{"bad name", ok(func(a *svc.Agent) { a.Name = "-x" }), "agent name"},
		{"no model", ok(func(a *svc.Agent) { a.Model = "" }), "agent agent: model:"},
		{"model without provider", ok(func(a *svc.Agent) { a.Model = "echo" }), "model:"},
		{"bad fallback", ok(func(a *svc.Agent) { a.FallbackModels = []string{"test:echo", "nope"} }), "fallback_models[1]"},
		{"bad trust", ok(func(a *svc.Agent) { a.TrustLevel = "root" }), "trust_level"},
		{"bad context passer", ok(func(a *svc.Agent) { a.ContextPasser = "partial" }), "context_passer"},
		{"nil tool", ok(func(a *svc.Agent) { a.Tools = []svc.Tool{fakeTool{"a", svc.AccessRead}, nil} }), "tools[1] is nil"},
		{"duplicate tool", ok(func(a *svc.Agent) {
			a.Tools = []svc.Tool{fakeTool{"a", svc.AccessRead}, fakeTool{"a", svc.AccessWrite}}
		}), `tool "a" listed twice`},
		{"bad input schema", ok(func(a *svc.Agent) { a.InputType = json.RawMessage(`{"type":`) }), "input_type is not valid JSON"},
		{"bad output schema", ok(func(a *svc.Agent) { a.OutputType = json.RawMessage(`nope`) }), "output_type is not valid JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.agent.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want an error containing %q", tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Validate() = %q, want it to contain %q", err, tt.wantErr)
			}
			if !errors.Is(err, svc.ErrSpecValidation) {
				t.Errorf("Validate() = %v, not a SpecValidationError", err)
			}
			var e *svc.Error
			if errors.As(err, &e) && e.Agent != tt.agent.Name {
				t.Errorf("error names agent %q, want %q", e.Agent, tt.agent.Name)
			}
		})
	}
}

func TestAgentModelsAndTrust(t *testing.T) {
	a := svc.Agent{Model: "test:fail", FallbackModels: []string{"test:echo", "x:y"}}
	if got := a.Models(); !slices.Equal(got, []string{"test:fail", "test:echo", "x:y"}) {
		t.Errorf("Models() = %v", got)
	}
	got := a.Models()
	got[1] = "changed"
	if a.FallbackModels[0] != "test:echo" {
		t.Error("Models() shares memory with FallbackModels")
	}
	if a.Trust() != svc.DefaultTrustLevel || svc.DefaultTrustLevel != svc.TrustMedium {
		t.Errorf("Trust() of an agent without a level = %s, want medium", a.Trust())
	}
	a.TrustLevel = svc.TrustLow
	if a.Trust() != svc.TrustLow {
		t.Errorf("Trust() = %s, want low", a.Trust())
	}
}

func TestValidName(t *testing.T) {
	tests := []struct {
		s    string
		want bool
	}{
		{"a", true},
		{"A", true},
		{"7", true},
		{"echo", true},
		{"my_agent-v1.2", true},
		{"1st", true},
		{strings.Repeat("a", 128), true},
		{strings.Repeat("a", 129), false},
		{"", false},
		{"_a", false},
		{"-a", false},
		{".a", false},
		{"a b", false},
		{"a/b", false},
		{"a:b", false},
		{"é", false},
		{"a\n", false},
	}
	for _, tt := range tests {
		if got := svc.ValidName(tt.s); got != tt.want {
			t.Errorf("ValidName(%q) = %v, want %v", tt.s, got, tt.want)
		}
	}
}

func TestParseModelID(t *testing.T) {
	tests := []struct {
		id             string
		provider, name string
		ok             bool
	}{
		{"test:echo", "test", "echo", true},
		{"openai:gpt-4o-mini", "openai", "gpt-4o-mini", true},
		{"ollama:llama3:8b", "ollama", "llama3:8b", true},
		{"", "", "", false},
		{"echo", "", "", false},
		{":echo", "", "", false},
		{"test:", "", "", false},
		{":", "", "", false},
	}
	for _, tt := range tests {
		p, n, err := svc.ParseModelID(tt.id)
		if (err == nil) != tt.ok || p != tt.provider || n != tt.name {
			t.Errorf("ParseModelID(%q) = %q, %q, %v; want %q, %q, ok=%v", tt.id, p, n, err, tt.provider, tt.name, tt.ok)
		}
	}
}

func TestTrustLevelAllows(t *testing.T) {
	levels := []svc.TrustLevel{svc.TrustSandbox, svc.TrustLow, svc.TrustMedium, svc.TrustHigh, "", "root"}
	accesses := []svc.Access{svc.AccessRead, svc.AccessNetwork, svc.AccessWrite, svc.Access(4)}
	want := map[svc.TrustLevel][]bool{ // read, network, write, unknown
		svc.TrustSandbox: {false, false, false, false},
		svc.TrustLow:     {true, false, false, false},
		svc.TrustMedium:  {true, true, false, false},
		svc.TrustHigh:    {true, true, true, false},
		"":               {false, false, false, false},
		"root":           {false, false, false, false},
	}
	for _, l := range levels {
		for i, a := range accesses {
			if got := l.Allows(a); got != want[l][i] {
				t.Errorf("%q.Allows(%s) = %v, want %v", l, a, got, want[l][i])
			}
		}
		if got, wantValid := l.Valid(), l != "" && l != "root"; got != wantValid {
			t.Errorf("%q.Valid() = %v, want %v", l, got, wantValid)
		}
	}
	// MinTrust is the least level allowing the access: it allows it and the
	// level below does not.
	order := []svc.TrustLevel{svc.TrustSandbox, svc.TrustLow, svc.TrustMedium, svc.TrustHigh}
	for _, a := range accesses[:3] {
		m := a.MinTrust()
		i := slices.Index(order, m)
		if i < 1 || !m.Allows(a) || order[i-1].Allows(a) {
			t.Errorf("%s.MinTrust() = %s is not the least level allowing it", a, m)
		}
	}
	for a, s := range map[svc.Access]string{svc.AccessRead: "read", svc.AccessNetwork: "network", svc.AccessWrite: "write", 9: "Access(9)"} {
		if a.String() != s {
			t.Errorf("Access(%d).String() = %q, want %q", int(a), a.String(), s)
		}
	}
}

// Settings set from Go may hold any map or slice type; none may be shared
// between a registered agent and its caller.
func TestCloneDeepForAnyShape(t *testing.T) {
	a := svc.Agent{Name: "a", Model: "test:echo", ModelSettings: map[string]any{
		"headers": map[string]string{"x": "1"},
		"stops":   []map[string]any{{"s": []int{1}}},
	}}
	c := a.Clone()
	a.ModelSettings["headers"].(map[string]string)["x"] = "2"
	a.ModelSettings["stops"].([]map[string]any)[0]["s"].([]int)[0] = 9
	if c.ModelSettings["headers"].(map[string]string)["x"] != "1" {
		t.Error("map[string]string shared with the clone")
	}
	if c.ModelSettings["stops"].([]map[string]any)[0]["s"].([]int)[0] != 1 {
		t.Error("nested []int shared with the clone")
	}
}

func TestUnknownAccessNeverAllowed(t *testing.T) {
	for _, lvl := range []svc.TrustLevel{svc.TrustSandbox, svc.TrustLow, svc.TrustMedium, svc.TrustHigh} {
		for _, a := range []svc.Access{0, -1, svc.AccessWrite + 1} {
			if lvl.Allows(a) {
				t.Errorf("%s allows unknown access %d", lvl, a)
			}
		}
	}
}

// Validate reports every problem, each a FieldError naming its field in
// the shape of the YAML spec, so that package spec can point at the line.
func TestAgentValidateReportsEveryField(t *testing.T) {
	a := svc.Agent{
		Name: "a", Model: "echo", FallbackModels: []string{"test:echo", "x"},
		TrustLevel: "root", ContextPasser: "half",
		Tools:        []svc.Tool{fakeTool{"t", svc.AccessRead}, nil, fakeTool{"t", svc.AccessRead}, fakeTool{"b c", svc.AccessRead}},
		BuiltinTools: []string{"spawn_agents", "spawn_agents"},
		MCPServers: []svc.MCPServer{
			{Name: "fs", Transport: "stdio", Command: "x", URL: "http://h"},
			{Name: "fs", Transport: "http", URL: "ftp://h", Command: "c", Env: map[string]string{"A=B": "1"}},
			{Transport: "carrier-pigeon", Prefix: "-p", TimeoutSeconds: -1},
		},
		InputType: json.RawMessage(`{`),
	}
	var got []string
	for _, err := range unjoin(a.Validate()) {
		var fe *svc.FieldError
		if !errors.As(err, &fe) || fe.Agent != "a" {
			t.Fatalf("%v is not a FieldError of agent a", err)
		}
		got = append(got, fe.Field)
	}
	want := []string{
		"model", "fallback_models[1]", "trust_level", "context_passer",
		"tools[1]", "tools[2]", "tools[3]", "builtin_tools[1]",
		"mcp_servers[0].url",
		"mcp_servers[1].url", "mcp_servers[1].command", "mcp_servers[1].env", "mcp_servers[1].env", "mcp_servers[1].name",
		"mcp_servers[2].name", "mcp_servers[2].transport", "mcp_servers[2].prefix", "mcp_servers[2].timeout_seconds",
		"input_type",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("fields %q\nwant   %q", got, want)
	}
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	if err == nil {
		return nil
	}
	return []error{err}
}

func TestMCPServerValidate(t *testing.T) {
	for _, tt := range []struct {
		s    svc.MCPServer
		want string // "" for valid
	}{
		{svc.MCPServer{Name: "fs", Transport: "stdio", Command: "npx", Args: []string{"-y"}, Env: map[string]string{"A": "1"}, Prefix: "fs_", TimeoutSeconds: 30}, ""},
		{svc.MCPServer{Name: "web", Transport: "http", URL: "https://example.com/mcp"}, ""},
		{svc.MCPServer{Name: "old", Transport: "sse", URL: "http://127.0.0.1:1/sse"}, ""},
		{svc.MCPServer{Transport: "stdio", Command: "x"}, "mcp server name missing"},
		{svc.MCPServer{Name: "x", Transport: "stdio"}, "mcp server x: command: missing: the stdio transport runs a command"},
		{svc.MCPServer{Name: "x", Transport: "sse", URL: "localhost:8080"}, `url: "localhost:8080": want an http:// or https:// URL`},
		{svc.MCPServer{Name: "x", Transport: "http", URL: "http://h", Args: []string{"a"}}, "args: not used by the http transport"},
		{svc.MCPServer{Name: "x", Transport: "stdio", Command: "c", TimeoutSeconds: 86401}, "timeout_seconds: 86401: want seconds above 0, at most 86400"},
	} {
		err := tt.s.Validate()
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%+v: %v, want valid", tt.s, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, svc.ErrSpecValidation)):
			t.Errorf("%+v: %v, want a SpecValidationError containing %q", tt.s, err, tt.want)
		}
	}
}

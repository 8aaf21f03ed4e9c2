package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/agent"
)

func TestCompile(t *testing.T) {
	write := constTool("write_file", svc.AccessWrite, `"ok"`)
	clock := constTool("current_time", svc.AccessRead, `"now"`)
	noSchema := &tool{name: "bare", access: svc.AccessRead}
	a := svc.Agent{
		Name:           "triage",
		Model:          "test:echo",
		FallbackModels: []string{"fake:one", "test:echo"},
		Instructions:   "Classify.",
		InputType:      json.RawMessage(`{"type":"object"}`),
		OutputType:     json.RawMessage(` {"type":"string"} `),
		Tools:          []svc.Tool{write, clock, noSchema},
		ModelSettings:  map[string]any{"temperature": 0.2},
		// Below write_file's needs: accepted here, refused when called.
		TrustLevel: svc.TrustLow,
	}
	one := &recorder{fn: answer(`"x"`)}
	c, err := agent.Compile(a, registry(map[string]svc.Model{"one": one}))
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}

	var ids []string
	for _, m := range c.Models {
		ids = append(ids, m.ID)
		if m.Model == nil {
			t.Errorf("model %s not resolved", m.ID)
		}
	}
	if want := []string{"test:echo", "fake:one", "test:echo"}; !reflect.DeepEqual(ids, want) {
		t.Errorf("Models = %q, want %q", ids, want)
	}
	if c.Models[1].Model != one {
		t.Error("fake:one did not resolve to the registered model")
	}

	var names []string
	for _, s := range c.ToolSpecs {
		names = append(names, s.Name)
		if s.Description != "the "+s.Name+" tool" {
			t.Errorf("tool %s description %q", s.Name, s.Description)
		}
	}
	if want := []string{"bare", "current_time", "write_file"}; !reflect.DeepEqual(names, want) {
		t.Errorf("ToolSpecs names = %q, want sorted %q", names, want)
	}
	if got := string(c.ToolSpecs[0].InputSchema); got != `{"type":"object"}` {
		t.Errorf("tool without a schema got %s, want the object schema", got)
	}
	if len(c.Tools) != 3 || c.Tools["write_file"] != write {
		t.Errorf("Tools = %v", c.Tools)
	}
	if c.In == nil || c.Out == nil {
		t.Fatal("schemas not compiled")
	}
	if got := string(c.Out.Raw()); got != `{"type":"string"}` {
		t.Errorf("Out.Raw() = %s", got)
	}

	// The compiled definition is a copy: changing the caller's value later
	// changes nothing.
	a.ModelSettings["temperature"] = 1.0
	a.FallbackModels[0] = "test:fail"
	a.OutputType[2] = 'X'
	if c.Def.ModelSettings["temperature"] != 0.2 || c.Def.FallbackModels[0] != "fake:one" || string(c.Def.OutputType) != ` {"type":"string"} ` {
		t.Errorf("Compiled.Def shares memory with the caller's Agent: %+v", c.Def)
	}
}

func TestCompileNilRegistryUsesDefault(t *testing.T) {
	c, err := agent.Compile(svc.Agent{Name: "a", Model: "test:echo"}, nil)
	if err != nil {
		t.Fatalf("Compile with nil registry: %v", err)
	}
	if c.In != nil || c.Out != nil || len(c.ToolSpecs) != 0 {
		t.Errorf("agent without schemas or tools compiled to %+v", c)
	}
}

func TestCompileErrors(t *testing.T) {
	ok := func() svc.Agent { return svc.Agent{Name: "a1", Model: "test:echo"} }
	tests := []struct {
		name string
		edit func(a *svc.Agent)
		want []string // substrings of the message
		also error    // another kind the chain must match
	}{
		{"name", func(a *svc.Agent) { a.Name = "bad name" }, []string{"agent name", `"bad name"`}, nil},
		{"model syntax", func(a *svc.Agent) { a.Model = "echo" }, []string{"agent a1: model", "provider:name"}, nil},
		{"fallback syntax", func(a *svc.Agent) { a.FallbackModels = []string{"test:echo", "nope"} }, []string{"fallback_models[1]"}, nil},
		{"unknown provider", func(a *svc.Agent) { a.Model = "openai:gpt-4o" }, []string{"agent a1: model", `unknown provider "openai"`, "known: fake, test"}, svc.ErrRegistry},
		{"unknown fallback provider", func(a *svc.Agent) { a.FallbackModels = []string{"test:echo", "nope:x"} },
			[]string{"agent a1: fallback_models[1]", `unknown provider "nope"`}, svc.ErrRegistry},
		{"unknown test model", func(a *svc.Agent) { a.Model = "test:no-such" }, []string{"agent a1: model", `"test:no-such"`}, svc.ErrRegistry},
		{"unknown fake model", func(a *svc.Agent) { a.FallbackModels = []string{"fake:missing"} },
			[]string{"agent a1: fallback_models[0]", "not defined by the test"}, svc.ErrRegistry},
		{"trust level", func(a *svc.Agent) { a.TrustLevel = "root" }, []string{"trust_level", `"root"`}, nil},
		{"context passer", func(a *svc.Agent) { a.ContextPasser = "some" }, []string{"context_passer"}, nil},
		{"nil tool", func(a *svc.Agent) { a.Tools = []svc.Tool{nil} }, []string{"tools[0] is nil"}, nil},
		{"duplicate tool", func(a *svc.Agent) {
			a.Tools = []svc.Tool{constTool("t", svc.AccessRead, "1"), constTool("t", svc.AccessRead, "2")}
		}, []string{`tool "t" listed twice`}, nil},
		{"tool name", func(a *svc.Agent) { a.Tools = []svc.Tool{constTool("bad name", svc.AccessRead, "1")} },
			[]string{"tools[0]", `"bad name"`}, nil},
		{"tool schema", func(a *svc.Agent) {
			t := constTool("t", svc.AccessRead, "1")
			t.schema = json.RawMessage(`{`)
			a.Tools = []svc.Tool{t}
		}, []string{`tool "t": input schema is not valid JSON`}, nil},
		{"input_type JSON", func(a *svc.Agent) { a.InputType = json.RawMessage(`{"type":`) }, []string{"input_type"}, nil},
		{"input_type schema", func(a *svc.Agent) { a.InputType = json.RawMessage(`{"type":12}`) }, []string{"agent a1: input_type"}, nil},
		{"input_type not a schema", func(a *svc.Agent) { a.InputType = json.RawMessage(`[1]`) }, []string{"agent a1: input_type"}, nil},
		{"output_type JSON", func(a *svc.Agent) { a.OutputType = json.RawMessage(`nope`) }, []string{"output_type"}, nil},
		{"output_type schema", func(a *svc.Agent) { a.OutputType = json.RawMessage(`{"minLength":"x"}`) }, []string{"agent a1: output_type"}, nil},
		{"builtin tool", func(a *svc.Agent) { a.BuiltinTools = []string{"spawn_agents"} },
			[]string{`builtin tool "spawn_agents" is not available in this build`}, nil},
		{"mcp servers", func(a *svc.Agent) { a.MCPServers = []svc.MCPServer{{Name: "fs", Transport: "stdio", Command: "x"}} },
			[]string{"agent a1: mcp_servers are not supported in this build yet"}, nil},
	}
	reg := registry(map[string]svc.Model{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := ok()
			tt.edit(&a)
			c, err := agent.Compile(a, reg)
			if err == nil {
				t.Fatalf("Compile succeeded: %+v", c)
			}
			var se *svc.Error
			if !errors.As(err, &se) || se.Kind != svc.KindSpecValidation {
				t.Fatalf("error %v (%T): want a SpecValidationError first in the chain", err, err)
			}
			if se.Agent != a.Name {
				t.Errorf("error names agent %q, want %q", se.Agent, a.Name)
			}
			if tt.also != nil && !errors.Is(err, tt.also) {
				t.Errorf("error %v does not match %v", err, tt.also)
			}
			for _, s := range tt.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
		})
	}
}

func TestValidateInput(t *testing.T) {
	c := mustCompile(t, svc.Agent{Name: "typed", Model: "test:echo",
		InputType: json.RawMessage(`{"type":"object","required":["text"],"properties":{"text":{"type":"string"}}}`)}, nil)
	if err := c.ValidateInput(json.RawMessage(`{"text":"hi"}`)); err != nil {
		t.Errorf("valid input rejected: %v", err)
	}
	for _, in := range []string{`{}`, `{"text":1}`, `"text"`, `{`} {
		err := c.ValidateInput(json.RawMessage(in))
		if err == nil {
			t.Errorf("input %s accepted", in)
			continue
		}
		var se *svc.Error
		if !errors.As(err, &se) || se.Kind != svc.KindSpecValidation || se.Agent != "typed" {
			t.Errorf("input %s: error %v: want SpecValidationError naming the agent", in, err)
		}
		if !strings.HasPrefix(err.Error(), "agent typed: input does not match input_type: ") {
			t.Errorf("input %s: message %q", in, err)
		}
	}

	untyped := mustCompile(t, svc.Agent{Name: "untyped", Model: "test:echo"}, nil)
	if err := untyped.ValidateInput(json.RawMessage(`[1,2]`)); err != nil {
		t.Errorf("agent without input_type rejected input: %v", err)
	}
}

// The models Compile resolves are the ones Run calls.
func TestCompiledModelsAreUsed(t *testing.T) {
	m := &recorder{fn: answer(`42`)}
	c := mustCompile(t, svc.Agent{Name: "a", Model: "fake:m"}, map[string]svc.Model{"m": m})
	out, err := agent.Run(context.Background(), invocation(c, `1`))
	if err != nil || string(out.Output) != "42" || len(m.requests()) != 1 {
		t.Fatalf("Run = %+v, %v; %d requests", out, err, len(m.requests()))
	}
}

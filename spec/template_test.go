package spec

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/svc-dev/svc"
)

// An agent naming a template gets the template's model, settings, tools,
// trust level and pre_instruction; its own fields win, model_settings key
// by key, and a list it gives (even empty) replaces the template's.
func TestTemplateDefaultsAndOverrides(t *testing.T) {
	writeTree(t, map[string]string{
		"specs/templates/researcher.yaml": `version: 1
model: test:echo
fallback_models: [test:fail]
pre_instruction: Always cite sources.
trust_level: low
tools: [current_time, read_file]
builtin_tools: [spawn_agents]
model_settings: {temperature: 0.2, max_tokens: 100, tool_arguments: {a: 1}}
`,
		"specs/agents/plain.yaml": "version: 1\ntemplate: researcher\ninstructions: Answer briefly.\n",
		"specs/agents/custom.yaml": `version: 1
template: researcher
model: test:other
tools: []
trust_level: medium
model_settings: {temperature: 0.9, tool_arguments: {b: 2}}
`,
		"specs/agents/alone.yaml": "version: 1\nmodel: test:echo\ninstructions: Hi.\n",
	})
	set, err := Load("specs", testEnv())
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]svc.Agent{}
	for _, a := range set.Agents {
		by[a.Name] = a
	}
	p := by["plain"]
	if p.Model != "test:echo" || !slices.Equal(p.FallbackModels, []string{"test:fail"}) || p.TrustLevel != svc.TrustLow {
		t.Errorf("plain: model %q fallbacks %q trust %q, want the template's", p.Model, p.FallbackModels, p.TrustLevel)
	}
	if p.Instructions != "Always cite sources.\n\nAnswer briefly." {
		t.Errorf("plain: instructions %q", p.Instructions)
	}
	if names := toolNamesOf(p.Tools); !slices.Equal(names, []string{"current_time", "read_file"}) {
		t.Errorf("plain: tools %q", names)
	}
	if !slices.Equal(p.BuiltinTools, []string{"spawn_agents"}) {
		t.Errorf("plain: builtin_tools %q", p.BuiltinTools)
	}
	if want := map[string]any{"temperature": 0.2, "max_tokens": int64(100), "tool_arguments": map[string]any{"a": int64(1)}}; !reflect.DeepEqual(p.ModelSettings, want) {
		t.Errorf("plain: model_settings %#v, want %#v", p.ModelSettings, want)
	}

	c := by["custom"]
	if c.Model != "test:other" || c.TrustLevel != svc.TrustMedium || len(c.Tools) != 0 {
		t.Errorf("custom: model %q trust %q tools %d, want its own", c.Model, c.TrustLevel, len(c.Tools))
	}
	if c.Instructions != "Always cite sources." {
		t.Errorf("custom: instructions %q, want the pre_instruction alone", c.Instructions)
	}
	// Key by key: the agent's temperature and tool_arguments (whole), the
	// template's max_tokens.
	if want := map[string]any{"temperature": 0.9, "max_tokens": int64(100), "tool_arguments": map[string]any{"b": int64(2)}}; !reflect.DeepEqual(c.ModelSettings, want) {
		t.Errorf("custom: model_settings %#v, want %#v", c.ModelSettings, want)
	}
	if by["alone"].Instructions != "Hi." {
		t.Errorf("alone: instructions %q", by["alone"].Instructions)
	}
	if len(set.Templates) != 1 || set.Templates[0].Name != "researcher" || set.Templates[0].PreInstruction != "Always cite sources." {
		t.Errorf("templates = %+v", set.Templates)
	}
}

func toolNamesOf(ts []svc.Tool) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.Name())
	}
	return out
}

// Template mistakes are reported at their file and line: in the template
// file for its own fields, at the agent's template key for an unknown
// template or one with errors, and at the agent's trust_level when a
// template tool needs more than the agent allows.
func TestTemplateErrors(t *testing.T) {
	writeTree(t, map[string]string{
		"specs/templates/base.yaml":        "version: 1\nmodel: test:echo\ntools: [write_file]\n",
		"specs/templates/broken.yaml":      "version: 1\nmodel: nocolon\ntemplate: base\ninstructions: x\n",
		"specs/agents/a.yaml":              "version: 1\ntemplate: nosuch\n",
		"specs/agents/b.yaml":              "version: 1\ntemplate: broken\n",
		"specs/agents/c.yaml":              "version: 1\ntemplate: base\ntrust_level: medium\n",
		"specs/agents/d.yaml":              "version: 1\ntemplate: base\ntrust_level: high\n",
		"specs/agents/e.yaml":              "version: 1\ntemplate: tmplnomodel\n",
		"specs/templates/tmplnomodel.yaml": "version: 1\npre_instruction: Be kind.\n",
	})
	res, err := Validate("specs", testEnv())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	var order []string
	for _, r := range res {
		order = append(order, r.File)
		if r.Err != nil {
			got[r.File] = r.Err.Error()
		}
	}
	wantOrder := []string{"specs/templates/base.yaml", "specs/templates/broken.yaml", "specs/templates/tmplnomodel.yaml",
		"specs/agents/a.yaml", "specs/agents/b.yaml", "specs/agents/c.yaml", "specs/agents/d.yaml", "specs/agents/e.yaml"}
	if !slices.Equal(order, wantOrder) {
		t.Errorf("files = %q, want %q", order, wantOrder)
	}
	want := map[string][]string{
		"specs/templates/broken.yaml": {
			"specs/templates/broken.yaml:2: model: ",
			"specs/templates/broken.yaml:3: template: unknown key",
			"specs/templates/broken.yaml:4: instructions: unknown key",
		},
		"specs/agents/a.yaml": {`specs/agents/a.yaml:2: template: unknown template "nosuch" (known templates: base, broken, tmplnomodel)`},
		"specs/agents/b.yaml": {"specs/agents/b.yaml:2: template: template broken has errors (see specs/templates/broken.yaml)"},
		"specs/agents/c.yaml": {"specs/agents/c.yaml:3: trust_level: tool write_file of template base needs write access"},
		"specs/agents/e.yaml": {"specs/agents/e.yaml:1: model: missing", "(template tmplnomodel names none)"},
	}
	for file, parts := range want {
		for _, p := range parts {
			if !strings.Contains(got[file], p) {
				t.Errorf("%s: error %q, want it to contain %q", file, got[file], p)
			}
		}
	}
	for _, ok := range []string{"specs/templates/base.yaml", "specs/templates/tmplnomodel.yaml", "specs/agents/d.yaml"} {
		if got[ok] != "" {
			t.Errorf("%s: unexpected error %s", ok, got[ok])
		}
	}
	if len(got) != len(want) {
		t.Errorf("errors in %d files, want %d: %q", len(got), len(want), got)
	}
	if _, err := Load("specs", testEnv()); err == nil {
		t.Error("Load accepted a directory with template errors")
	}
}

// mcp: {expose, name, description} on agents and groups; a bad block is
// reported at its line.
func TestMCPExposure(t *testing.T) {
	writeTree(t, map[string]string{
		"specs/agents/a.yaml": "version: 1\nmodel: test:echo\nmcp: {expose: false}\n",
		"specs/agents/b.yaml": "version: 1\nmodel: test:echo\nmcp:\n  name: ask_b\n  description: Ask B.\n",
		"specs/groups/g.yaml": "version: 1\nnodes: {x: {agent: b}}\nmcp: {name: the_group}\n",
		"bad/agents/a.yaml":   "version: 1\nmodel: test:echo\nmcp:\n  expose: maybe\n  name: has space\n  color: red\n",
		"bad/groups/g.yaml":   "version: 1\nnodes: {x: {agent: a}}\nmcp: yes\n",
	})
	set, err := Load("specs", testEnv())
	if err != nil {
		t.Fatal(err)
	}
	if a := set.Agents[0].MCP; a.Exposed() || a.Name != "" {
		t.Errorf("a: mcp %+v, want not exposed", a)
	}
	if b := set.Agents[1].MCP; !b.Exposed() || b.Name != "ask_b" || b.Description != "Ask B." {
		t.Errorf("b: mcp %+v", b)
	}
	if g := set.Groups[0].MCP; !g.Exposed() || g.Name != "the_group" {
		t.Errorf("g: mcp %+v", g)
	}
	_, err = Load("bad", testEnv())
	var msgs []string
	for _, e := range specErrors(t, err) {
		msgs = append(msgs, e.Error())
	}
	all := strings.Join(msgs, "\n")
	for _, w := range []string{"bad/agents/a.yaml:4: mcp.expose: ", "bad/agents/a.yaml:5: mcp.name: \"has space\": an MCP tool name",
		"bad/agents/a.yaml:6: mcp.color: unknown key", "bad/groups/g.yaml:3: mcp: want a mapping"} {
		if !strings.Contains(all, w) {
			t.Errorf("errors:\n%s\nwant one containing %q", all, w)
		}
	}
}

// A change to a template reloads the agents that use it.
func TestWatchReloadsTemplateChange(t *testing.T) {
	root := writeTree(t, map[string]string{
		"specs/templates/base.yaml": "version: 1\nmodel: test:echo\npre_instruction: one\n",
		"specs/agents/a.yaml":       "version: 1\ntemplate: base\n",
	})
	_, ch := watchTree(t, root, WatchConfig{Env: testEnv()})
	if err := os.WriteFile(filepath.Join(root, "specs/templates/base.yaml"), []byte("version: 1\nmodel: test:echo\npre_instruction: two\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := next(t, ch)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if got := r.set.Agents[0].Instructions; got != "two" {
		t.Errorf("instructions after the template changed = %q, want two", got)
	}
}

// Two agents or groups that MCP would list under one tool name are
// refused at the second one's mcp block.
func TestMCPToolNameClash(t *testing.T) {
	writeTree(t, map[string]string{
		"specs/agents/a.yaml":       "version: 1\nmodel: test:echo\nmcp: {name: ask}\n",
		"specs/agents/b.yaml":       "version: 1\nmodel: test:echo\n\nmcp: {name: ask}\n",
		"specs/agents/c.yaml":       "version: 1\nmodel: test:echo\nmcp: {name: ask, expose: false}\n",
		"specs/agents/group_g.yaml": "version: 1\nmodel: test:echo\n",
		"specs/groups/g.yaml":       "version: 1\nnodes: {x: {agent: a}}\n",
	})
	res, err := Validate("specs", testEnv())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range res {
		if r.Err != nil {
			got[r.File] = r.Err.Error()
		}
	}
	want := map[string]string{
		"specs/agents/b.yaml": `specs/agents/b.yaml:4: mcp.name: MCP tool name "ask" is already that of agent a (specs/agents/a.yaml)`,
		"specs/groups/g.yaml": `specs/groups/g.yaml: mcp.name: MCP tool name "group_g" is already that of agent group_g (specs/agents/group_g.yaml)`,
	}
	if len(got) != len(want) {
		t.Errorf("errors %q, want in %d files", got, len(want))
	}
	for f, w := range want {
		if !strings.HasPrefix(got[f], w) {
			t.Errorf("%s: %q, want it to start %q", f, got[f], w)
		}
	}
}

package svc_test

import (
	"reflect"
	"testing"

	"github.com/svc-dev/svc"
)

// Apply: the agent's fields win, a nil list takes the template's and an
// empty one keeps none, model_settings merge key by key, pre_instruction
// goes first, and the result shares no map or slice with the template.
func TestAgentTemplateApply(t *testing.T) {
	tmpl := svc.AgentTemplate{
		Name: "base", Model: "test:echo", FallbackModels: []string{"test:fail"}, TrustLevel: svc.TrustLow,
		ModelSettings:  map[string]any{"temperature": 0.2, "max_tokens": 100},
		BuiltinTools:   []string{"spawn_agents"},
		MCPServers:     []svc.MCPServer{{Name: "files", Transport: svc.MCPStdio, Command: "x"}},
		PreInstruction: "Be careful.",
	}
	got := tmpl.Apply(svc.Agent{Name: "a", Instructions: "Do it.", BuiltinTools: []string{},
		ModelSettings: map[string]any{"temperature": 0.9}})
	want := svc.Agent{Name: "a", Model: "test:echo", FallbackModels: []string{"test:fail"}, TrustLevel: svc.TrustLow,
		Instructions: "Be careful.\n\nDo it.", BuiltinTools: []string{},
		ModelSettings: map[string]any{"temperature": 0.9, "max_tokens": 100},
		MCPServers:    []svc.MCPServer{{Name: "files", Transport: svc.MCPStdio, Command: "x"}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Apply =\n%+v\nwant\n%+v", got, want)
	}
	got.ModelSettings["max_tokens"] = 1
	got.FallbackModels[0] = "changed"
	got.MCPServers[0].Name = "changed"
	if tmpl.ModelSettings["max_tokens"] != 100 || tmpl.FallbackModels[0] != "test:fail" || tmpl.MCPServers[0].Name != "files" {
		t.Errorf("changing the applied agent changed the template: %+v", tmpl)
	}
	if a := tmpl.Apply(svc.Agent{Name: "b", Model: "test:other", TrustLevel: svc.TrustHigh}); a.Model != "test:other" || a.TrustLevel != svc.TrustHigh || a.Instructions != "Be careful." {
		t.Errorf("own model and trust: %+v", a)
	}
}

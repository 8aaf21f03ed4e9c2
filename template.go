package svc

import "maps"

// AgentTemplate is what several agents share: a model, its settings,
// tools, MCP servers, builtin tools, a trust level, and a PreInstruction
// put before each agent's own instructions. Specs name one with
// `template: NAME` (DIR/templates/NAME.yaml); Go code calls Apply.
//
// Templates do not name templates: one level, so there is no order of
// inheritance to work out and no cycle to refuse.
type AgentTemplate struct {
	Name           string
	Model          string
	FallbackModels []string
	ModelSettings  map[string]any
	Tools          []Tool
	MCPServers     []MCPServer
	BuiltinTools   []string
	TrustLevel     TrustLevel
	// PreInstruction comes first in the instructions of every agent of
	// the template, a blank line before the agent's own.
	PreInstruction string
}

// Apply returns a with the template's defaults under it; a is not
// changed. The agent's own fields win:
//
//   - Model and TrustLevel: the template's when the agent's is empty.
//   - FallbackModels, Tools, MCPServers, BuiltinTools: the template's list
//     when the agent's is nil; an agent's list, even an empty non-nil
//     one, replaces the template's whole (lists are not concatenated, so
//     an agent can drop a tool the template has).
//   - ModelSettings: merged key by key at the top level, the agent's
//     value winning for a key both have (a nested mapping such as
//     tool_arguments is one value: the agent's replaces the template's).
//   - Instructions: PreInstruction, a blank line, then the agent's
//     instructions (PreInstruction alone when the agent has none).
func (t AgentTemplate) Apply(a Agent) Agent {
	t = t.clone()
	out := a.Clone()
	if out.Model == "" {
		out.Model = t.Model
	}
	if out.TrustLevel == "" {
		out.TrustLevel = t.TrustLevel
	}
	if out.FallbackModels == nil {
		out.FallbackModels = t.FallbackModels
	}
	if out.Tools == nil {
		out.Tools = t.Tools
	}
	if out.MCPServers == nil {
		out.MCPServers = t.MCPServers
	}
	if out.BuiltinTools == nil {
		out.BuiltinTools = t.BuiltinTools
	}
	if len(t.ModelSettings) > 0 {
		ms := t.ModelSettings
		maps.Copy(ms, out.ModelSettings)
		out.ModelSettings = ms
	}
	switch {
	case t.PreInstruction == "":
	case out.Instructions == "":
		out.Instructions = t.PreInstruction
	default:
		out.Instructions = t.PreInstruction + "\n\n" + out.Instructions
	}
	return out
}

// clone is a deep copy of t (tools shared, as Agent.Clone shares them).
func (t AgentTemplate) clone() AgentTemplate {
	a := Agent{FallbackModels: t.FallbackModels, ModelSettings: t.ModelSettings, Tools: t.Tools,
		MCPServers: t.MCPServers, BuiltinTools: t.BuiltinTools}.Clone()
	t.FallbackModels, t.ModelSettings, t.Tools = a.FallbackModels, a.ModelSettings, a.Tools
	t.MCPServers, t.BuiltinTools = a.MCPServers, a.BuiltinTools
	return t
}

// Package svc is the vocabulary of the svc agent runtime: agents, tasks,
// results, run states, runtime events, options and error kinds, and the small
// interfaces the rest of the module plugs into (Model, Tool, Emitter,
// Backend). It imports only the standard library, so every other package
// can depend on it and it depends on none of them.
package svc

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"path"
	"reflect"
	"slices"
	"strings"
)

// TrustLevel bounds what tools an agent may call.
type TrustLevel string

// Trust levels, from least to most trusted.
//
//	sandbox  no tools at all
//	low      read-only local tools (AccessRead)
//	medium   read-only and network tools (AccessRead, AccessNetwork)
//	high     everything, including tools that write (AccessWrite)
const (
	TrustSandbox TrustLevel = "sandbox"
	TrustLow     TrustLevel = "low"
	TrustMedium  TrustLevel = "medium"
	TrustHigh    TrustLevel = "high"
)

// DefaultTrustLevel applies when an agent names none.
const DefaultTrustLevel = TrustMedium

// Valid reports whether t is one of the four levels.
func (t TrustLevel) Valid() bool {
	switch t {
	case TrustSandbox, TrustLow, TrustMedium, TrustHigh:
		return true
	}
	return false
}

// Allows reports whether an agent at trust level t may call a tool needing a.
func (t TrustLevel) Allows(a Access) bool {
	if a < AccessRead || a > AccessWrite {
		return false // an access we do not know is never allowed
	}
	switch t {
	case TrustHigh:
		return a <= AccessWrite
	case TrustMedium:
		return a <= AccessNetwork
	case TrustLow:
		return a <= AccessRead
	}
	return false
}

// Access is what a tool does to the world, ordered by risk.
type Access int

const (
	// AccessRead tools only read local state (the clock, files under a root).
	AccessRead Access = iota + 1
	// AccessNetwork tools talk to the network.
	AccessNetwork
	// AccessWrite tools change local state.
	AccessWrite
)

func (a Access) String() string {
	switch a {
	case AccessRead:
		return "read"
	case AccessNetwork:
		return "network"
	case AccessWrite:
		return "write"
	}
	return fmt.Sprintf("Access(%d)", int(a))
}

// MinTrust is the lowest trust level that allows a.
func (a Access) MinTrust() TrustLevel {
	switch a {
	case AccessRead:
		return TrustLow
	case AccessNetwork:
		return TrustMedium
	}
	return TrustHigh
}

// Tool is something an agent's model can call. Implementations must be safe
// for concurrent calls. Package tools builds them from Go functions.
type Tool interface {
	// Name is the name the model calls the tool by.
	Name() string
	// Description tells the model what the tool is for.
	Description() string
	// InputSchema is the JSON Schema of the tool's arguments.
	InputSchema() json.RawMessage
	// Access says what the tool needs, for the trust gate.
	Access() Access
	// Call runs the tool. It must honour ctx.
	Call(ctx context.Context, args json.RawMessage) (json.RawMessage, error)
}

// ToolSource provides tools discovered at run time, such as an MCP server's
// tools. An agent asks its sources at the start of every invocation, so a
// source that starts lazily starts on first use. Implementations are safe
// for concurrent use and cheap once started.
type ToolSource interface {
	// Tools returns the source's current tools, starting it if needed. It
	// honours ctx.
	Tools(ctx context.Context) ([]Tool, error)
}

// MCPServer configures one Model Context Protocol tool server of an agent.
type MCPServer struct {
	Name      string            `json:"name" yaml:"name"`
	Transport string            `json:"transport" yaml:"transport"` // stdio | http | sse
	Command   string            `json:"command,omitempty" yaml:"command,omitempty"`
	Args      []string          `json:"args,omitempty" yaml:"args,omitempty"`
	Env       map[string]string `json:"env,omitempty" yaml:"env,omitempty"`
	URL       string            `json:"url,omitempty" yaml:"url,omitempty"`
	Prefix    string            `json:"prefix,omitempty" yaml:"prefix,omitempty"`
	// TimeoutSeconds bounds one tool call, including any wait for the
	// server to (re)start; 0 means the runtime's default (30 s).
	TimeoutSeconds float64 `json:"timeout_seconds,omitempty" yaml:"timeout_seconds,omitempty"`
	// Idempotent false declares the server's tools not idempotent: a call
	// in flight when a submitted run's process died is not made again
	// when the run resumes (the model is told its outcome is unknown).
	// Nil (the default) and true: calls are made again.
	Idempotent *bool `json:"idempotent,omitempty" yaml:"idempotent,omitempty"`
	// Approval are name patterns (path.Match: write_*, *) of the server's
	// tools, as the agent sees them (with Prefix), whose calls need a
	// person's approval, as Agent.Approval.
	Approval []string `json:"approval,omitempty" yaml:"approval,omitempty"`
}

// MCPExposure decides whether and how the MCP server side (`svc mcp`,
// `svc serve --mcp`) lists an agent or a group as a tool. The zero value
// lists it under its default name (the agent's name, group_NAME for a
// group) with the default description.
type MCPExposure struct {
	// Expose false leaves it out; nil and true list it.
	Expose *bool `json:"expose,omitempty" yaml:"expose,omitempty"`
	// Name, when set, is the tool name instead of the default: 1 to 128
	// of A-Z a-z 0-9 _ - . (MCP's rule for tool names).
	Name string `json:"name,omitempty" yaml:"name,omitempty"`
	// Description, when set, is the tool's description instead of the
	// generated one.
	Description string `json:"description,omitempty" yaml:"description,omitempty"`
}

// Exposed reports whether the MCP server side lists it.
func (m MCPExposure) Exposed() bool { return m.Expose == nil || *m.Expose }

// clone copies the Expose pointer, so a registered definition shares
// nothing with its caller.
func (m MCPExposure) clone() MCPExposure {
	if m.Expose != nil {
		v := *m.Expose
		m.Expose = &v
	}
	return m
}

// ValidMCPToolName reports whether s is a valid MCP tool name: 1 to 128
// of A-Z a-z 0-9 _ - . (SEP-986).
func ValidMCPToolName(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-', r == '.':
		default:
			return false
		}
	}
	return true
}

// Hook transforms an agent's input (PreProcess) or output (PostProcess).
// An error from a hook fails the invocation.
type Hook func(ctx context.Context, value json.RawMessage) (json.RawMessage, error)

// ContextPasser values.
const (
	// ContextNone gives a spawned child only its own input.
	ContextNone = ""
	// ContextFull gives a spawned child the parent's conversation as well.
	ContextFull = "full"
)

// Agent is the definition of an agent: the fourteen fields of the spec,
// and how the MCP server side lists it. A runtime copies an Agent when it
// is registered (Clone), so the registered definition cannot be changed
// through the value the caller still holds; the runtime hands out copies
// too.
type Agent struct {
	Name         string
	Model        string // provider:name, e.g. "test:echo" or "openai:gpt-4o-mini"
	Instructions string
	// OutputType and InputType are JSON Schemas; nil means any JSON value.
	OutputType json.RawMessage
	InputType  json.RawMessage
	Tools      []Tool
	MCPServers []MCPServer
	// BuiltinTools names runtime-provided tools such as "spawn_agents".
	BuiltinTools   []string
	FallbackModels []string // tried in order when Model fails
	ModelSettings  map[string]any
	TrustLevel     TrustLevel // DefaultTrustLevel when empty
	ContextPasser  string     // ContextNone or ContextFull
	PreProcess     Hook
	PostProcess    Hook
	// MCP decides how `svc mcp` and `svc serve --mcp` list the agent.
	MCP MCPExposure
	// Approval names the tools whose every call needs a person's approval
	// (issue 31; ApprovalAll for all of them, an MCP server's Approval
	// patterns add its tools). Inside a submitted run such a call pauses
	// the run (RunWaiting) until POST /runs/{id}/resume answers it; a
	// synchronous run fails with an ApprovalRequiredError.
	Approval []string
	// ApprovalTimeoutSeconds bounds the wait for an approval or an answer
	// (0: the runtime's approval_timeout_seconds; none by default), and
	// ApprovalTimeoutAction says what then happens: TimeoutDeny (the
	// default: the model is told no) or TimeoutFail (the run fails).
	ApprovalTimeoutSeconds float64
	ApprovalTimeoutAction  string
}

// NeedsApproval reports whether a call of the tool named name needs a
// person's approval: the agent lists it (or all), or its MCP server's
// Approval patterns match it.
func (a *Agent) NeedsApproval(name string) bool {
	for _, t := range a.Approval {
		if t == ApprovalAll || t == name {
			return true
		}
	}
	for i := range a.MCPServers {
		for _, p := range a.MCPServers[i].Approval {
			if ok, _ := path.Match(p, name); ok {
				return true
			}
		}
	}
	return false
}

// Clone returns a deep copy of a, sharing only the immutable parts (tools
// and hooks, which are behaviour rather than data).
func (a Agent) Clone() Agent {
	c := a
	c.OutputType = slices.Clone(a.OutputType)
	c.InputType = slices.Clone(a.InputType)
	c.Tools = slices.Clone(a.Tools)
	c.MCPServers = make([]MCPServer, len(a.MCPServers))
	for i, s := range a.MCPServers {
		s.Args = slices.Clone(s.Args)
		s.Env = maps.Clone(s.Env)
		s.Approval = slices.Clone(s.Approval)
		if s.Idempotent != nil {
			v := *s.Idempotent
			s.Idempotent = &v
		}
		c.MCPServers[i] = s
	}
	if a.MCPServers == nil {
		c.MCPServers = nil
	}
	c.BuiltinTools = slices.Clone(a.BuiltinTools)
	c.Approval = slices.Clone(a.Approval)
	c.FallbackModels = slices.Clone(a.FallbackModels)
	c.MCP = a.MCP.clone()
	c.ModelSettings = cloneAny(a.ModelSettings).(map[string]any)
	return c
}

// cloneAny deep-copies the maps and slices of a settings value, whatever
// their element types, so no registered agent shares them with its caller.
// The common JSON shapes take a fast path; anything else goes by reflection.
func cloneAny(v any) any {
	switch x := v.(type) {
	case nil, string, bool, float64, int, int64, json.Number:
		return v
	case map[string]any:
		if x == nil {
			return x
		}
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = cloneAny(e)
		}
		return m
	case []any:
		if x == nil {
			return x
		}
		s := make([]any, len(x))
		for i, e := range x {
			s[i] = cloneAny(e)
		}
		return s
	}
	return cloneValue(reflect.ValueOf(v)).Interface()
}

func cloneValue(v reflect.Value) reflect.Value {
	switch v.Kind() {
	case reflect.Map:
		if v.IsNil() {
			return v
		}
		m := reflect.MakeMapWithSize(v.Type(), v.Len())
		for it := v.MapRange(); it.Next(); {
			m.SetMapIndex(it.Key(), cloneValue(it.Value()))
		}
		return m
	case reflect.Slice:
		if v.IsNil() {
			return v
		}
		s := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		for i := 0; i < v.Len(); i++ {
			s.Index(i).Set(cloneValue(v.Index(i)))
		}
		return s
	case reflect.Interface:
		if v.IsNil() {
			return v
		}
		c := reflect.New(v.Type()).Elem()
		c.Set(cloneValue(v.Elem()))
		return c
	}
	return v
}

// Models returns the primary model followed by the fallbacks.
func (a *Agent) Models() []string {
	out := make([]string, 0, 1+len(a.FallbackModels))
	out = append(out, a.Model)
	return append(out, a.FallbackModels...)
}

// Trust returns the agent's trust level, defaulted.
func (a *Agent) Trust() TrustLevel {
	if a.TrustLevel == "" {
		return DefaultTrustLevel
	}
	return a.TrustLevel
}

// Validate checks what can be checked without a runtime: the name, the
// model identifiers, the trust level, the context passer, the tools (none
// nil, none listed twice, each validly named), the builtin tool names
// (none listed twice), the MCP servers (MCPServer.Validate, and no name
// used twice) and that the schemas are JSON. These are the rules of an
// agent definition, wherever it comes from; package spec adds only what
// is about the YAML file and the environment it is checked against.
//
// It reports every problem it finds, each a *FieldError naming its field,
// joined with errors.Join when there are several; all are
// SpecValidationErrors.
func (a *Agent) Validate() error {
	f := &fieldErrors{agent: a.Name}
	if !ValidName(a.Name) {
		f.add("name", "%q: %s", a.Name, nameRule)
	}
	if _, _, err := ParseModelID(a.Model); err != nil {
		f.add("model", "%v", err)
	}
	for i, m := range a.FallbackModels {
		if _, _, err := ParseModelID(m); err != nil {
			f.add(fmt.Sprintf("fallback_models[%d]", i), "%v", err)
		}
	}
	if a.TrustLevel != "" && !a.TrustLevel.Valid() {
		f.add("trust_level", "%q: want high, medium, low or sandbox", a.TrustLevel)
	}
	if a.ContextPasser != ContextNone && a.ContextPasser != ContextFull {
		f.add("context_passer", "%q: want null or \"full\"", a.ContextPasser)
	}
	tools := map[string]int{}
	for i, t := range a.Tools {
		field := fmt.Sprintf("tools[%d]", i)
		if t == nil {
			f.add(field, "is nil")
			continue
		}
		name := t.Name()
		if j, dup := tools[name]; dup {
			f.add(field, "tool %q listed twice (first as tools[%d])", name, j)
			continue
		}
		tools[name] = i
		if !ValidName(name) {
			f.add(field, "name %q: %s", name, nameRule)
		}
	}
	builtins := map[string]int{}
	for i, b := range a.BuiltinTools {
		field := fmt.Sprintf("builtin_tools[%d]", i)
		if j, dup := builtins[b]; dup {
			f.add(field, "builtin tool %q listed twice (first as builtin_tools[%d])", b, j)
			continue
		}
		builtins[b] = i
	}
	servers := map[string]int{}
	for i := range a.MCPServers {
		s := &a.MCPServers[i]
		prefix := fmt.Sprintf("mcp_servers[%d].", i)
		s.check(f, prefix)
		if j, dup := servers[s.Name]; dup && s.Name != "" {
			f.add(prefix+"name", "server %s is already mcp_servers[%d]", s.Name, j)
		} else if !dup {
			servers[s.Name] = i
		}
	}
	for i, t := range a.Approval {
		_, tool := tools[t]
		_, builtin := builtins[t]
		if t != ApprovalAll && !tool && !builtin && len(a.MCPServers) == 0 {
			// With MCP servers the name may be one of theirs, known only
			// once they run.
			f.add(fmt.Sprintf("approval[%d]", i), "%q is not one of the agent's tools", t)
		}
	}
	for i := range a.MCPServers {
		for j, p := range a.MCPServers[i].Approval {
			if _, err := path.Match(p, ""); err != nil {
				f.add(fmt.Sprintf("mcp_servers[%d].approval[%d]", i, j), "%q: not a name pattern: %v", p, err)
			}
		}
	}
	if a.ApprovalTimeoutSeconds < 0 || math.IsInf(a.ApprovalTimeoutSeconds, 0) || math.IsNaN(a.ApprovalTimeoutSeconds) {
		f.add("approval_timeout_seconds", "%v: must be 0 (the runtime's) or a positive number", a.ApprovalTimeoutSeconds)
	}
	switch a.ApprovalTimeoutAction {
	case "", TimeoutDeny, TimeoutFail:
	default:
		f.add("approval_timeout_action", "%q: want deny or fail", a.ApprovalTimeoutAction)
	}
	if a.MCP.Name != "" && !ValidMCPToolName(a.MCP.Name) {
		f.add("mcp.name", "%q: an MCP tool name is 1 to 128 of A-Z a-z 0-9 _ - .", a.MCP.Name)
	}
	for _, x := range []struct {
		field  string
		schema json.RawMessage
	}{{"input_type", a.InputType}, {"output_type", a.OutputType}} {
		if len(x.schema) > 0 && !json.Valid(x.schema) {
			f.add(x.field, "is not valid JSON")
		}
	}
	return f.err()
}

// ValidName reports whether s is usable as an agent, group or tool name:
// 1 to 128 characters of letters, digits, '_', '-' and '.', starting with a
// letter or digit.
func ValidName(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case i > 0 && (r == '_' || r == '-' || r == '.'):
		default:
			return false
		}
	}
	return true
}

// ParseModelID splits "provider:name".
func ParseModelID(id string) (provider, name string, err error) {
	provider, name, ok := strings.Cut(id, ":")
	if !ok || provider == "" || name == "" {
		return "", "", fmt.Errorf("model %q: want provider:name, e.g. test:echo", id)
	}
	return provider, name, nil
}

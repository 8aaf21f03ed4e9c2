// Package agent runs the agent loop: it calls an agent's model, runs the
// tools the model asks for, feeds their results back, and checks the final
// answer against the agent's output schema. It knows nothing of actors,
// budgets or retries beyond the small interfaces it is handed, so the
// supervisor, the worker and tests all drive it the same way.
package agent

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/model"
	"github.com/svc-dev/svc/schema"
)

// Resolved is one model of an agent, resolved from the registry.
type Resolved struct {
	// ID is the "provider:name" identifier the model was resolved from.
	ID    string
	Model svc.Model
}

// Compiled is an agent definition checked and prepared once, so that every
// invocation reuses the resolved models, compiled schemas and tool specs.
// It is immutable after Compile and safe to share between concurrent runs.
type Compiled struct {
	Def svc.Agent // a Clone of the definition
	// Models are the primary model then the fallbacks, in order.
	Models []Resolved
	// In and Out validate input and output; nil accepts any JSON value.
	In, Out *schema.Validator
	Tools   map[string]svc.Tool
	// ToolSpecs describe Tools to the model, sorted by name.
	ToolSpecs []svc.ToolSpec

	outputSchema json.RawMessage // Out.Raw(), computed once
}

// builtinTools are the builtin_tools names this build provides. None yet:
// spawn_agents arrives with the supervisor.
var builtinTools = map[string]bool{}

// defaultToolSchema is given to a tool that declares no input schema:
// model providers reject a tool without one, and tool arguments are
// always a JSON object.
var defaultToolSchema = json.RawMessage(`{"type":"object"}`)

// Compile checks a and prepares it to run: it validates the definition,
// resolves every model through models (model.Default() when nil), compiles
// the input and output schemas and indexes the tools. Every failure is a
// SpecValidationError naming the agent and the field; an unresolvable
// model keeps its RegistryError in the chain.
//
// Tools above the agent's trust level are accepted: calling one fails at
// run time with a TrustViolationError the model sees.
func Compile(a svc.Agent, models *model.Registry) (*Compiled, error) {
	if err := a.Validate(); err != nil {
		return nil, err
	}
	bad := func(cause error, format string, args ...any) error {
		return &svc.Error{Kind: svc.KindSpecValidation, Message: fmt.Sprintf(format, args...), Agent: a.Name, Err: cause}
	}
	if len(a.MCPServers) > 0 {
		return nil, bad(nil, "agent %s: mcp_servers are not supported in this build yet", a.Name)
	}
	for _, b := range a.BuiltinTools {
		if !builtinTools[b] {
			return nil, bad(nil, "agent %s: builtin_tools: builtin tool %q is not available in this build", a.Name, b)
		}
	}

	c := &Compiled{Def: a.Clone()}

	if models == nil {
		models = model.Default()
	}
	ids := c.Def.Models()
	c.Models = make([]Resolved, len(ids))
	for i, id := range ids {
		m, err := models.Resolve(id)
		if err != nil {
			if i == 0 {
				return nil, bad(err, "agent %s: model", a.Name)
			}
			return nil, bad(err, "agent %s: fallback_models[%d]", a.Name, i-1)
		}
		c.Models[i] = Resolved{ID: id, Model: m}
	}

	var err error
	if c.In, err = schema.Compile(c.Def.InputType); err != nil {
		return nil, bad(err, "agent %s: input_type", a.Name)
	}
	if c.Out, err = schema.Compile(c.Def.OutputType); err != nil {
		return nil, bad(err, "agent %s: output_type", a.Name)
	}
	if c.Out != nil {
		c.outputSchema = c.Out.Raw()
	}

	c.Tools = make(map[string]svc.Tool, len(c.Def.Tools))
	c.ToolSpecs = make([]svc.ToolSpec, 0, len(c.Def.Tools))
	for i, t := range c.Def.Tools {
		name := t.Name()
		// Validate rejects nil and duplicate tools; the name must also be
		// one a model provider accepts and the events can carry.
		if !svc.ValidName(name) {
			return nil, bad(nil, "agent %s: tools[%d]: tool name %q: use letters, digits, '_', '-' and '.', starting with a letter or digit", a.Name, i, name)
		}
		in := t.InputSchema()
		if len(in) == 0 {
			in = defaultToolSchema
		} else if !json.Valid(in) {
			return nil, bad(nil, "agent %s: tool %q: input schema is not valid JSON", a.Name, name)
		}
		c.Tools[name] = t
		c.ToolSpecs = append(c.ToolSpecs, svc.ToolSpec{Name: name, Description: t.Description(), InputSchema: in})
	}
	slices.SortFunc(c.ToolSpecs, func(x, y svc.ToolSpec) int { return cmp.Compare(x.Name, y.Name) })
	return c, nil
}

// ValidateInput checks input against the agent's input_type. It returns a
// SpecValidationError: a bad input is the caller's mistake, rejected before
// anything runs.
func (c *Compiled) ValidateInput(input json.RawMessage) error {
	if c.In == nil {
		return nil
	}
	if err := c.In.Validate(input); err != nil {
		return &svc.Error{Kind: svc.KindSpecValidation, Message: "agent " + c.Def.Name + ": input does not match input_type",
			Agent: c.Def.Name, Err: err}
	}
	return nil
}

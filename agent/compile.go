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
	"sync"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/model"
	"github.com/svc-dev/svc/ratelimit"
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
	// Tools are the agent's static tools: its own and its builtin tools.
	Tools map[string]svc.Tool
	// ToolSpecs describe Tools to the model, sorted by name.
	ToolSpecs []svc.ToolSpec
	// Sources provide more tools at run time (WithToolSources): every
	// invocation asks each of them for its tools before the first model
	// call. Their tools are called like Tools, trust gate included.
	Sources []svc.ToolSource
	// Prices cost the model calls whose provider reports no cost
	// (WithPrices; the built-in model.Prices by default).
	Prices model.PriceTable

	outputSchema json.RawMessage // Out.Raw(), computed once
	// modelIDs are the ids of Models, in order: an Outcome's ModelsTried is
	// a prefix of it, so reporting them costs no allocation.
	modelIDs []string
	// modelSteps are the Steps of calls to Models, in order, made once so
	// that marking a model call costs no allocation.
	modelSteps []Step
	// stream is model_settings.stream: streamOn or streamOff, or
	// streamAuto when the agent does not say (stream when someone listens).
	stream int8
	// coalesce gathers streamed fragments into deltas (WithCoalesce).
	coalesce Coalesce
	// settings are the model_settings sent to the providers: the
	// agent's, without the runtime's flow-control keys.
	settings map[string]any
	// limits are the limits each model's calls wait under (WithRateLimits),
	// by the index of Models; nil without a ratelimit.Set.
	limits [][]*ratelimit.Limiter
	// serverTools are the builtin_tools the models' providers run
	// (model.ServerTools), sent with every model call.
	serverTools []string
}

// Builtin builds the tool that one builtin_tools name stands for, for the
// agent being compiled: def is its definition, already validated. The tool
// must be named after the builtin. The runtime supplies builtins
// (spawn_agents) through WithBuiltins, since they need the runtime.
type Builtin func(def svc.Agent) (svc.Tool, error)

// CompileOption configures Compile.
type CompileOption func(*compileConfig)

type compileConfig struct {
	limits   *ratelimit.Set
	coalesce Coalesce
	builtins map[string]Builtin
	prices   *model.PriceTable
	sources  []svc.ToolSource
}

// WithCoalesce sets how the fragments of the agent's streamed answers are
// gathered into deltas; without it each fragment is a delta.
func WithCoalesce(co Coalesce) CompileOption {
	return func(c *compileConfig) { c.coalesce = co }
}

// WithBuiltins makes the named builtin tools available to builtin_tools.
// Without it every builtin_tools name is rejected.
func WithBuiltins(b map[string]Builtin) CompileOption {
	return func(c *compileConfig) { c.builtins = b }
}

// WithPrices prices model calls whose response carries no CostUSD; nil
// means model.DefaultPrices().
func WithPrices(t *model.PriceTable) CompileOption {
	return func(c *compileConfig) { c.prices = t }
}

// WithToolSources gives the agent tool sources (its MCP servers, say).
// An agent with mcp_servers compiles only when its caller gives sources:
// serving those servers is the runtime's job, not this package's.
func WithToolSources(src ...svc.ToolSource) CompileOption {
	return func(c *compileConfig) { c.sources = append(c.sources, src...) }
}

// defaultPrices is built once: every Compile without WithPrices shares it.
var defaultPrices = sync.OnceValue(model.DefaultPrices)

// defaultToolSchema is given to a tool that declares no input schema:
// model providers reject a tool without one, and tool arguments are
// always a JSON object.
var defaultToolSchema = json.RawMessage(`{"type":"object"}`)

// Compile checks a and prepares it to run: it validates the definition,
// resolves every model through models (model.Default() when nil), compiles
// the input and output schemas, builds the builtin tools and indexes the
// tools. Every failure is a SpecValidationError naming the agent and the
// field; an unresolvable model keeps its RegistryError in the chain.
//
// Tools above the agent's trust level are accepted: calling one fails at
// run time with a TrustViolationError the model sees.
func Compile(a svc.Agent, models *model.Registry, opts ...CompileOption) (*Compiled, error) {
	if err := a.Validate(); err != nil {
		return nil, err
	}
	var cfg compileConfig
	for _, o := range opts {
		o(&cfg)
	}
	bad := func(cause error, format string, args ...any) error {
		return &svc.Error{Kind: svc.KindSpecValidation, Message: fmt.Sprintf(format, args...), Agent: a.Name, Err: cause}
	}
	if len(a.MCPServers) > 0 && len(cfg.sources) == 0 {
		return nil, bad(nil, "agent %s: mcp_servers are not supported in this build yet", a.Name)
	}
	for i, b := range a.BuiltinTools {
		if cfg.builtins[b] == nil && !model.IsServerTool(b) {
			return nil, bad(nil, "agent %s: builtin_tools: builtin tool %q is not available in this build", a.Name, b)
		}
		if slices.Contains(a.BuiltinTools[:i], b) {
			return nil, bad(nil, "agent %s: builtin_tools: %q listed twice", a.Name, b)
		}
	}

	c := &Compiled{Def: a.Clone(), Sources: slices.Clone(cfg.sources), coalesce: cfg.coalesce}
	if cfg.prices != nil {
		c.Prices = *cfg.prices
	} else {
		c.Prices = defaultPrices()
	}

	if models == nil {
		models = model.Default()
	}
	ids := c.Def.Models()
	c.modelIDs = ids
	c.modelSteps = make([]Step, len(ids))
	for i, id := range ids {
		c.modelSteps[i] = Step{Kind: StepModel, Name: id}
	}
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

	for _, b := range c.Def.BuiltinTools {
		if cfg.builtins[b] != nil || !model.IsServerTool(b) {
			continue
		}
		// A server tool runs inside the provider's call: a model whose
		// provider has none would answer without it, quietly.
		for i, m := range c.Models {
			if !model.OffersServerTool(m.Model, b) {
				field := "model"
				if i > 0 {
					field = fmt.Sprintf("fallback_models[%d]", i-1)
				}
				return nil, bad(nil, "agent %s: builtin_tools: %s runs on the model's provider, and %s (%s) has no %s (the anthropic, google, openai and azure providers have them)",
					a.Name, b, m.ID, field, b)
			}
		}
		c.serverTools = append(c.serverTools, b)
	}

	if err := c.compileLimits(cfg.limits, bad); err != nil {
		return nil, err
	}

	switch v, ok := c.Def.ModelSettings["stream"]; {
	case !ok || v == nil:
	case v == true:
		c.stream = streamOn
	case v == false:
		c.stream = streamOff
	default:
		return nil, bad(nil, "agent %s: model_settings.stream: want true or false, got %v", a.Name, v)
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

	n := len(c.Def.Tools) + len(c.Def.BuiltinTools)
	c.Tools = make(map[string]svc.Tool, n)
	c.ToolSpecs = make([]svc.ToolSpec, 0, n)
	for i, t := range c.Def.Tools {
		name := t.Name()
		// Validate rejects nil and duplicate tools; the name must also be
		// one a model provider accepts and the events can carry.
		if !svc.ValidName(name) {
			return nil, bad(nil, "agent %s: tools[%d]: tool name %q: use letters, digits, '_', '-' and '.', starting with a letter or digit", a.Name, i, name)
		}
		spec, err := specOf(t)
		if err != nil {
			return nil, bad(nil, "agent %s: %v", a.Name, err)
		}
		c.Tools[name] = t
		c.ToolSpecs = append(c.ToolSpecs, spec)
	}
	for _, b := range c.Def.BuiltinTools {
		if slices.Contains(c.serverTools, b) {
			continue
		}
		t, err := cfg.builtins[b](c.Def.Clone())
		if err != nil {
			return nil, bad(err, "agent %s: builtin_tools: %s", a.Name, b)
		}
		if t == nil || t.Name() != b {
			return nil, bad(nil, "agent %s: builtin_tools: %s: the runtime built no tool of that name", a.Name, b)
		}
		if _, dup := c.Tools[b]; dup {
			return nil, bad(nil, "agent %s: tool %q has the name of builtin tool %s", a.Name, b, b)
		}
		spec, err := specOf(t)
		if err != nil {
			return nil, bad(nil, "agent %s: builtin_tools: %v", a.Name, err)
		}
		c.Tools[b] = t
		c.ToolSpecs = append(c.ToolSpecs, spec)
	}
	sortSpecs(c.ToolSpecs)
	return c, nil
}

// specOf describes t to a model.
func specOf(t svc.Tool) (svc.ToolSpec, error) {
	in := t.InputSchema()
	if len(in) == 0 {
		in = defaultToolSchema
	} else if !json.Valid(in) {
		return svc.ToolSpec{}, fmt.Errorf("tool %q: input schema is not valid JSON", t.Name())
	}
	return svc.ToolSpec{Name: t.Name(), Description: t.Description(), InputSchema: in}, nil
}

func sortSpecs(s []svc.ToolSpec) {
	slices.SortFunc(s, func(x, y svc.ToolSpec) int { return cmp.Compare(x.Name, y.Name) })
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

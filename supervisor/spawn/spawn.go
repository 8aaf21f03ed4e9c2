package spawn

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/agent"
)

// AgentsTool is the name of the builtin tool an agent lists in
// builtin_tools to run other agents as child runs.
const AgentsTool = "spawn_agents"

// Limits of one spawn_agents call.
const (
	// DefaultConcurrency is how many children run at once when the call
	// gives no max_concurrency.
	DefaultConcurrency = 4
	// MaxConcurrency caps max_concurrency.
	MaxConcurrency = 16
)

// spawnTool is spawn_agents for one agent, the parent: each child it is
// asked for runs as a run of its own, with its own trace id, one level
// deeper than the parent, under the parent's budget and cancellation, and
// with ParentTraceID the parent's trace on all its events.
//
// A child is either a registered agent, run as registered (name only), or
// a new agent derived from the parent (name and instructions): the
// parent's model, fallbacks, model_settings, trust level, tools, builtin
// tools, MCP servers and context_passer, with the given name and
// instructions, and no input or output schema or hooks.
//
// Every child comes back as one result in the tool's output, failed ones
// included (a model error, a timeout, the depth limit, a spawn cycle, an
// unknown agent). Only a malformed call fails the tool call as a whole.
type spawnTool struct {
	runs   *Runs
	parent svc.Agent
	// maxChildren is the runtime's max_spawn_children.
	maxChildren int
}

// NewAgentsTool returns spawn_agents for the agent parent, starting its
// children through runs (an agent.Builtin, with runs bound). A tool only
// compiled, never called (a spec check), may have nil runs.
func NewAgentsTool(runs *Runs, parent svc.Agent) svc.Tool {
	limit := svc.DefaultOptions().MaxSpawnChildren
	if runs != nil && runs.MaxChildren > 0 {
		limit = runs.MaxChildren
	}
	return &spawnTool{runs: runs, parent: parent, maxChildren: limit}
}

// spawnSchemas are the tool's input schemas by max_spawn_children: a
// runtime has one value, and every agent it compiles (each spawned child
// too) shares its schema rather than formatting its own.
var spawnSchemas sync.Map // int → json.RawMessage

// schemaFor is the input schema of a tool that allows limit children per
// call: maxItems tells the model the limit, so a model that follows its
// schema never meets the SpawnCapError.
func schemaFor(limit int) json.RawMessage {
	if s, ok := spawnSchemas.Load(limit); ok {
		return s.(json.RawMessage)
	}
	s := json.RawMessage(fmt.Sprintf(`{"type":"object","properties":{`+
		`"agents":{"type":"array","minItems":1,"maxItems":%d,"description":"the agents to run, each on its own input (at most %d)",`+
		`"items":{"type":"object","properties":{`+
		`"name":{"type":"string","minLength":1,"maxLength":128,"pattern":"^[A-Za-z0-9][A-Za-z0-9_.-]*$","description":"a registered agent to run, or the name of a new agent"},`+
		`"instructions":{"type":"string","description":"instructions for a new agent; leave out to run the registered agent of that name"},`+
		`"input":{"description":"the agent's input, any JSON value"}},`+
		`"required":["name"],"additionalProperties":false}},`+
		`"max_concurrency":{"type":"integer","minimum":1,"maximum":%d,"description":"how many agents run at once (default %d)"}},`+
		`"required":["agents"],"additionalProperties":false}`, limit, limit, MaxConcurrency, DefaultConcurrency))
	actual, _ := spawnSchemas.LoadOrStore(limit, s)
	return actual.(json.RawMessage)
}

func (t *spawnTool) Name() string { return AgentsTool }
func (t *spawnTool) Description() string {
	return "Run other agents on their own inputs and get their results, as a list of {name, success, output, error} in the order asked. " +
		"Name a registered agent to run it as it is, or give a new name with instructions for a new agent like you. " +
		"A failed agent is a result with success false, not a failure of this call."
}
func (t *spawnTool) InputSchema() json.RawMessage { return schemaFor(t.maxChildren) }

// Access: spawning reads nothing and writes nothing itself; what the
// children may do is bounded by their own trust level, never above the
// parent's (see child).
func (t *spawnTool) Access() svc.Access { return svc.AccessRead }

type spawnArgs struct {
	Agents         []spawnChild `json:"agents"`
	MaxConcurrency int          `json:"max_concurrency"`
}

type spawnChild struct {
	Name         string          `json:"name"`
	Instructions string          `json:"instructions"`
	Input        json.RawMessage `json:"input"`
}

// spawnResult is what the parent's model sees for one child.
type spawnResult struct {
	Name    string          `json:"name"`
	Success bool            `json:"success"`
	Output  json.RawMessage `json:"output"`
	Error   *svc.ErrorInfo  `json:"error"`
}

func (t *spawnTool) Call(ctx context.Context, raw json.RawMessage) (json.RawMessage, error) {
	var args spawnArgs
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&args); err != nil {
		return nil, svc.Errorf(svc.KindToolExecution, "spawn_agents: bad arguments: %v", err)
	}
	switch n := len(args.Agents); {
	case n == 0:
		return nil, svc.Errorf(svc.KindToolExecution, "spawn_agents: agents: give at least one agent")
	case n > t.maxChildren:
		// Before any child starts: the run ends with this error (package
		// agent ends a run on a SpawnCapError from a tool), and nothing
		// of the fan-out it refused has run.
		return nil, &svc.Error{Kind: svc.KindSpawnCap, Agent: t.parent.Name, Reason: "spawn_cap",
			Message: fmt.Sprintf("spawn_agents: agent %s asked for %d agents in one call; max_spawn_children is %d", t.parent.Name, n, t.maxChildren)}
	}
	for i, c := range args.Agents {
		if !svc.ValidName(c.Name) {
			return nil, svc.Errorf(svc.KindToolExecution, "spawn_agents: agents[%d].name %q: use letters, digits, '_', '-' and '.', starting with a letter or digit", i, c.Name)
		}
	}
	conc := args.MaxConcurrency
	switch {
	case conc == 0:
		conc = DefaultConcurrency
	case conc < 1 || conc > MaxConcurrency:
		return nil, svc.Errorf(svc.KindToolExecution, "spawn_agents: max_concurrency %d: must be between 1 and %d", conc, MaxConcurrency)
	}
	conc = min(conc, len(args.Agents))

	// The path ends with the parent. A parent that was itself spawned
	// already ends its path; one that was not (a top-level run, a group
	// node, a delegate) starts or extends it here.
	path := t.runs.Path(ctx)
	if len(path) == 0 || path[len(path)-1] != t.parent.Name {
		path = clipPath(path, t.parent.Name)
	}
	var note string
	if t.parent.ContextPasser == svc.ContextFull {
		note = contextNote(t.parent.Name, agent.Conversation(ctx))
	}

	results := make([]spawnResult, len(args.Agents))
	sem := make(chan struct{}, conc)
	var wg sync.WaitGroup
	for i := range args.Agents {
		// A cancelled parent is checked first: when a slot is free too,
		// select would pick either at random.
		started := false
		if ctx.Err() == nil {
			select {
			case sem <- struct{}{}:
				started = true
			case <-ctx.Done():
			}
		}
		if !started {
			// The parent was cancelled: the children not yet started never
			// start, and say so.
			results[i] = failedChild(args.Agents[i].Name, &svc.Error{Kind: svc.KindOf(ctx.Err()), Reason: "cancelled",
				Message: "spawn_agents: " + args.Agents[i].Name + ": not started: the parent run ended", Err: ctx.Err()})
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			results[i] = t.child(ctx, path, note, args.Agents[i])
		}()
	}
	wg.Wait()
	return json.Marshal(results)
}

// child runs one child to its result.
func (t *spawnTool) child(ctx context.Context, path []string, note string, ch spawnChild) spawnResult {
	if slices.Contains(path, ch.Name) {
		return t.cycle(ctx, ch.Name, &svc.Error{Kind: svc.KindSpawnCycle, Agent: ch.Name, Reason: "spawn_cycle",
			Message: fmt.Sprintf("spawn_agents: %s is already on the spawn path %s", ch.Name, strings.Join(path, " → "))})
	}
	c, err := t.compileChild(ch, note)
	if err != nil {
		return failedChild(ch.Name, err)
	}
	input := ch.Input
	if len(input) == 0 {
		input = json.RawMessage("null")
	}
	// The child's trace is its own: the task has no request id, so the
	// run makes one.
	res, err := t.runs.Run(ctx, c, svc.TaskSpec{Input: input}, clipPath(path, ch.Name))
	if err != nil {
		// A rejection of the run itself: bad input, the depth limit (which
		// emitted depth_limit_exceeded) or the child's own agent_failed
		// said so.
		return failedChild(ch.Name, err)
	}
	out := res.Output
	if len(out) == 0 {
		out = json.RawMessage("null")
	}
	return spawnResult{Name: ch.Name, Success: res.Success, Output: out, Error: svc.ErrorInfoOf(res.Err)}
}

// cycle is the result of a child refused as a spawn cycle. Like the depth
// limit (depth_limit_exceeded), the refusal is an event: the child's
// agent_failed with SpawnCycleError as its reason, under the parent's
// trace and span, so it shows in svc.rejections and the run's tree. (The
// other refusals, an unknown agent, a trust level above the parent's, bad
// input, are the model's mistakes and only its result says so.)
func (t *spawnTool) cycle(ctx context.Context, name string, err error) spawnResult {
	s := svc.ScopeFrom(ctx)
	t.runs.Emitter.Emit(svc.RuntimeEvent{
		EventType: svc.EventAgentFailed, Timestamp: time.Now().UTC(), AgentName: name,
		TraceID: s.ParentTrace, ParentTraceID: s.ParentTrace, ParentSpanID: s.ParentSpan,
		Payload: svc.Payload{"duration_ms": 0.0, "error": err.Error(), "backend": t.runs.Backend,
			"reason": string(svc.KindOf(err))},
	})
	return failedChild(name, err)
}

// compileChild builds the agent a child runs: the registered agent of its
// name when it gives no instructions, else a new agent derived from the
// parent. With context_passer full, note (the parent's conversation) is
// added to its instructions.
func (t *spawnTool) compileChild(ch spawnChild, note string) (*agent.Compiled, error) {
	if ch.Instructions == "" {
		c, err := t.runs.Lookup(ch.Name)
		if err != nil {
			return nil, &svc.Error{Kind: svc.KindRegistry, Agent: ch.Name,
				Message: fmt.Sprintf("spawn_agents: unknown agent %q: give instructions to spawn a new agent, or name a registered one", ch.Name)}
		}
		// A child may not do more than its parent could.
		if trustRank(c.Def.Trust()) > trustRank(t.parent.Trust()) {
			return nil, &svc.Error{Kind: svc.KindTrustViolation, Agent: ch.Name, Reason: "trust",
				Message: fmt.Sprintf("spawn_agents: agent %s has trust level %s, above its parent %s's %s",
					ch.Name, c.Def.Trust(), t.parent.Name, t.parent.Trust())}
		}
		if note == "" {
			return c, nil
		}
		def := c.Def.Clone()
		def.Instructions += note
		return t.runs.Compile(def, c.Def.Name)
	}
	p := t.parent.Clone()
	def := svc.Agent{
		Name:           ch.Name,
		Model:          p.Model,
		FallbackModels: p.FallbackModels,
		ModelSettings:  p.ModelSettings,
		TrustLevel:     p.TrustLevel,
		Tools:          p.Tools,
		MCPServers:     p.MCPServers,
		BuiltinTools:   p.BuiltinTools,
		ContextPasser:  p.ContextPasser,
		Instructions:   ch.Instructions + note,
	}
	// The child uses its parent's MCP servers, not servers of its own.
	return t.runs.Compile(def, t.parent.Name)
}

// contextNote is what a child of a context_passer full parent is told
// besides its instructions. The conversation goes into the instructions
// rather than the child's messages: the child's input stays exactly its
// input (its input_type still applies), and no provider sees tool calls
// to tools the child does not have.
func contextNote(parent string, conv []svc.Message) string {
	b, err := json.Marshal(conv)
	if err != nil {
		return "" // every part is JSON the loop already checked
	}
	return "\n\nYou were spawned by agent " + parent + ". Its conversation so far, as JSON messages:\n" + string(b)
}

func failedChild(name string, err error) spawnResult {
	return spawnResult{Name: name, Output: json.RawMessage("null"), Error: svc.ErrorInfoOf(err)}
}

func trustRank(t svc.TrustLevel) int {
	switch t {
	case svc.TrustSandbox:
		return 0
	case svc.TrustLow:
		return 1
	case svc.TrustMedium:
		return 2
	}
	return 3
}

// clipPath returns path with name appended, sharing nothing with path.
func clipPath(path []string, name string) []string {
	return append(slices.Clip(path), name)
}

package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/model"
	"github.com/svc-dev/svc/ratelimit"
	"github.com/svc-dev/svc/tools"
)

// MaxTurns bounds the model calls of one invocation's tool loop, so a model
// that keeps asking for tools cannot run forever. The one corrective call
// after an invalid output does not count.
const MaxTurns = 16

// Reasons carried by the errors Run returns, for agent_failed events.
const (
	ReasonPreProcess  = "pre_process"
	ReasonPostProcess = "post_process"
	ReasonModelError  = "model_error"
	// ReasonContextLength is a ContextError's: the prompt did not fit.
	ReasonContextLength = "context_length"
	ReasonMaxTurns      = "max_turns"
	ReasonInvalidOutput = "invalid_output"
	ReasonToolSource    = "tool_source"
)

// Budget is the token budget an invocation draws on. The supervisor's
// implementation emits budget_exceeded before returning its error.
type Budget interface {
	// Reserve is the pre-check before each model call: it sets aside an
	// estimate of the call's tokens (EstimateTokens) and fails with a
	// BudgetExceededError when it does not fit.
	Reserve(estimate int64) error
	// Charge is the post-charge, made after every Reserve that succeeded
	// (with 0 when the call failed): it releases the reservation, records
	// the tokens the call used and fails with a BudgetExceededError when
	// they overdraw a budget whose overdraft ends the run (the
	// supervisor's: a run's cap does, the runtime's budget does not).
	Charge(tokens int64) error
}

// EstimateTokens is what a model call reserves at the budget's pre-check:
// the request's max_tokens setting (the most the model may answer with),
// plus one token per four bytes of the prompt (instructions, messages,
// tool specs, output schema), a common rule of thumb for input tokens.
// Without max_tokens the answer is not covered, so a call may overshoot
// its reservation by its output.
func EstimateTokens(req *svc.ModelRequest) int64 {
	n := len(req.Instructions) + len(req.OutputSchema)
	for i := range req.Messages {
		m := &req.Messages[i]
		n += len(m.Content)
		for _, c := range m.ToolCalls {
			n += len(c.Name) + len(c.Arguments)
		}
	}
	for _, t := range req.Tools {
		n += len(t.Name) + len(t.Description) + len(t.InputSchema)
	}
	return MaxTokens(req.Settings) + int64(n+3)/4
}

// MaxTokens is the max_tokens of model settings as a positive integer, 0
// when it is absent or not one.
func MaxTokens(settings map[string]any) int64 {
	switch v := settings["max_tokens"].(type) {
	case int:
		return max(int64(v), 0)
	case int64:
		return max(v, 0)
	case float64:
		if v > 0 && v < 1<<53 {
			return int64(v)
		}
	}
	return 0
}

// Invocation is one run of a compiled agent on one input.
type Invocation struct {
	Agent *Compiled
	Input json.RawMessage
	// TaskID, TraceID and ParentTraceID label the events of the run;
	// SpanID and ParentSpanID name the invocation and the one (or the group
	// or batch run) that started it, for the event envelope.
	TaskID, TraceID, ParentTraceID string
	SpanID, ParentSpanID           string
	// Depth is the spawn depth of this invocation (0 at top level). Tools
	// run with it in their context, so a run they start is one deeper.
	Depth int32
	// Priority orders the invocation's model calls waiting for a rate
	// limit's turn (Normal: its context's svc.Scope.Priority); runs its
	// tools start inherit it. (Beside Depth, an int32, it takes no room
	// of its own: a parked invocation's size is watched.)
	Priority ratelimit.Priority
	// Budget is drawn on by every model call; nil means unlimited.
	Budget Budget
	// Emitter receives tool events, and agent_delta events when the model
	// streams; nil drops them. The DeltaSink it carries (WithDeltaSink)
	// receives the deltas too.
	Emitter svc.Emitter

	// step is the call the loop is in (nil: none), for whoever stops
	// waiting for a call that never returns and must say which it was.
	step atomic.Pointer[Step]
}

// Step names a call an invocation's loop makes to code it does not own: a
// model, a tool, a hook or a tool source.
type Step struct {
	Kind string // StepModel, StepTool, StepHook or StepToolSource
	Name string // the model id, the tool's name, the hook's reason, the source's name
}

// Kinds of Step.
const (
	StepModel      = "model"
	StepTool       = "tool"
	StepHook       = "hook"
	StepToolSource = "tool_source"
)

// Step returns the call the loop is in now, and false between calls (in
// the loop's own code). It is safe to call from any goroutine while Run
// runs: the runtime calls it for an attempt it stops waiting for.
func (inv *Invocation) Step() (Step, bool) {
	if s := inv.step.Load(); s != nil {
		return *s, true
	}
	return Step{}, false
}

// enter marks the start of a call to outside code; leave its end.
func (inv *Invocation) enter(s *Step) { inv.step.Store(s) }
func (inv *Invocation) leave()        { inv.step.Store(nil) }

// Outcome is what an invocation produced. Run returns it on failure too,
// with the tokens spent and the model that answered so far.
type Outcome struct {
	Output json.RawMessage
	// Model is the "provider:name" of the model that answered, "" if none did.
	Model      string
	TokensUsed int64
	// CostUSD sums the calls' costs: the provider's own figure, else the
	// agent's price table applied to the call's tokens.
	CostUSD float64
	// CostUnknown is set when some call had neither: its cost is counted
	// as 0, so CostUSD is a lower bound.
	CostUnknown bool
	// Remote is set when the attempt ran on another process (a worker of
	// the fleet), which emitted the invocation's agent events and made
	// its retries: the runtime here emits none of them and retries
	// nothing.
	Remote bool
	// CachedTokens sums the calls' CachedInputTokens, saturating. An int32
	// beside the bools fits in their padding: the runtime holds an Outcome
	// in each parked run, whose state is kept at 416 bytes.
	CachedTokens int32
	// ModelCalls counts the calls made to models, failed ones included.
	ModelCalls int
	// ModelsTried are the ids of the models called, primary first, in the
	// order they were tried. It shares storage with the Compiled agent:
	// do not modify it.
	ModelsTried []string
}

var (
	jsonNull    = json.RawMessage("null")
	emptyObject = json.RawMessage("{}")
)

// Run runs the agent loop of inv until the model gives a final answer that
// matches the output schema.
//
// Each turn calls the model (the first that answers among the primary and
// fallbacks; once one has answered it serves the rest of the invocation),
// then runs the tools it asked for, in order, feeding their results back.
// A fallback is tried only after a failure another model could get past
// (model.CanFallback: rate limits, overload, server errors, timeouts); an
// invalid request or a rejected key fails the invocation at once. The
// agent's tool sources, if any, are asked for their tools before the
// first turn.
// A tool failure, an unknown tool or a trust violation becomes a failed
// tool result the model sees, not a failure of the run; a SpawnCapError
// (spawn_agents asking for more than max_spawn_children) ends the run
// with that error. An output that
// does not match the schema gets exactly one corrective call.
//
// Errors are *svc.Error: ModelError ("model_error") when the models
// failed, ToolExecutionError ("tool_source") when a tool source did,
// AgentRuntimeError ("max_turns", "pre_process", "post_process"),
// OutputValidationError ("invalid_output"), the Budget's errors as they
// are, and, when ctx ends, CancelledError or TimeoutError wrapping ctx's
// error so errors.Is(err, context.Canceled) holds.
func Run(ctx context.Context, inv *Invocation) (Outcome, error) {
	var out Outcome
	err := RunInto(ctx, inv, &out)
	return out, err
}

// RunInto is Run writing its Outcome to *out, which it overwrites. It is
// how the runtime runs invocations: a call parked in its model (waiting on
// the network, or a test model's latency) holds its goroutine, whose stack
// is the loop's frames, and the loop keeps them small (no Outcome, request
// or response copied from frame to frame) so that a million parked calls
// each fit in a 4 KiB stack.
func RunInto(ctx context.Context, inv *Invocation, out *Outcome) error {
	*out = Outcome{}
	if inv == nil || inv.Agent == nil {
		return errNoInvocation()
	}
	r := runner{inv: inv, c: inv.Agent, em: inv.Emitter, out: out, answered: -1, tried: -1,
		tools: inv.Agent.Tools, specs: inv.Agent.ToolSpecs}
	if r.em == nil {
		r.em = svc.NopEmitter{}
	}
	r.jr = journalOf(ctx, inv)
	output, err := r.run(ctx)
	if r.tried >= 0 && r.tried < len(r.c.modelIDs) { // a Compiled not made by Compile has none
		out.ModelsTried = r.c.modelIDs[: r.tried+1 : r.tried+1]
	}
	if err != nil {
		return err
	}
	out.Output = output
	return nil
}

//go:noinline
func errNoInvocation() error {
	return svc.Errorf(svc.KindRuntime, "agent: Run needs an invocation of a compiled agent")
}

// runner is the state of one Run. It lives on Run's stack.
type runner struct {
	inv *Invocation
	c   *Compiled
	em  svc.Emitter
	out *Outcome
	// answered indexes c.Models: the model that answered first, -1 before.
	answered int
	// tried is the highest index of c.Models called so far, -1 before.
	// Models are tried in order, so c.modelIDs[:tried+1] were all tried.
	tried int
	// tools and specs are this invocation's tools: the agent's own, plus
	// its sources' when it has sources.
	tools map[string]svc.Tool
	specs []svc.ToolSpec
	// toolCtx is ctx with this invocation's scope (depth, trace, span,
	// conversation), made on the first tool call so runs without tools do
	// not pay for it; conv is the conversation it hands out.
	toolCtx context.Context
	conv    *conversation
	// deltas gathers the streamed fragments into deltas; nil when the
	// invocation's model calls do not stream.
	deltas *deltaBuf
	// jr is the run's journal (replay.go); nil outside a submitted run.
	jr *journaled
}

func (r *runner) run(ctx context.Context) (json.RawMessage, error) {
	c := r.c
	if len(c.Sources) > 0 {
		if err := r.loadSources(ctx); err != nil {
			return nil, err
		}
	}
	input := compact(r.inv.Input)
	if len(input) == 0 {
		input = jsonNull
	}
	if c.Def.PreProcess != nil {
		v, err := r.hook(ctx, c.Def.PreProcess, input, ReasonPreProcess)
		if err != nil {
			return nil, err
		}
		input = v
	}
	output, err := r.turns(ctx, input)
	if err != nil {
		return nil, err
	}
	if c.Def.PostProcess != nil {
		return r.hook(ctx, c.Def.PostProcess, output, ReasonPostProcess)
	}
	return output, nil
}

// compact drops the insignificant whitespace of a JSON input, so the model
// is sent the same prompt (and charges the same tokens) however the client
// spaced its JSON, and whether the task ran here or on a worker: a task
// crossing a broker is re-encoded compactly on the way. Input that is not
// valid JSON is left as it is.
func compact(in json.RawMessage) json.RawMessage {
	if !bytes.ContainsAny(in, " \t\r\n") {
		return in
	}
	var b bytes.Buffer
	b.Grow(len(in))
	if json.Compact(&b, in) != nil || b.Len() == len(in) {
		return in
	}
	return b.Bytes()
}

// turns runs the model turns (and the tools they call) on input until a
// final answer that matches the output schema.
func (r *runner) turns(ctx context.Context, input json.RawMessage) (json.RawMessage, error) {
	c := r.c
	// One user message is all a tool-less agent ever sends; leave room for
	// a few tool rounds otherwise.
	n := 1
	if len(r.tools) > 0 {
		n = 8
	}
	msgs := make([]svc.Message, 1, n)
	// Field by field rather than composite literals, which the compiler
	// builds in temporaries of their own in this frame (88 and 112 bytes)
	// and copies: every byte of this frame is held by each parked call.
	msgs[0].Role, msgs[0].Content = svc.RoleUser, input
	var req svc.ModelRequest
	req.Instructions = c.Def.Instructions
	req.Tools = r.specs
	req.OutputSchema = c.outputSchema
	req.Settings = c.settings
	req.ServerTools = c.serverTools

	var output json.RawMessage
	var resp svc.ModelResponse
	for turn := 1; ; turn++ {
		req.Messages = msgs
		if err := r.generate(ctx, &req, &resp); err != nil {
			return nil, err
		}
		if len(resp.ToolCalls) == 0 {
			output = resp.Output
			break
		}
		if turn == MaxTurns {
			// The tools' results could only feed a call we will not make.
			return nil, r.maxTurns()
		}
		var err error
		if msgs, err = r.runTools(ctx, msgs, &resp); err != nil {
			return nil, err
		}
	}
	if len(output) == 0 {
		output = jsonNull
	}

	if c.Out != nil {
		if verr := c.Out.Validate(output); verr != nil {
			return r.correct(ctx, &req, msgs, output, verr)
		}
	}
	return output, nil
}

// maxTurns is the error of a loop that reached MaxTurns. It is a function
// of its own to keep run's frame small (see RunInto).
//
//go:noinline
func (r *runner) maxTurns() error {
	return r.fail(svc.KindRuntime, ReasonMaxTurns, nil,
		"agent "+r.c.Def.Name+": no final answer after "+strconv.Itoa(MaxTurns)+" model turns (the model kept calling tools)")
}

// correct makes the one corrective call after an output that failed
// validation: the model sees its answer and the validation error, and its
// next answer must be valid.
func (r *runner) correct(ctx context.Context, req *svc.ModelRequest, msgs []svc.Message, output json.RawMessage, verr error) (json.RawMessage, error) {
	note := "Your answer does not match the output schema: " + verr.Error() +
		". Answer again with only a JSON value that matches the schema."
	msgs = append(msgs,
		svc.Message{Role: svc.RoleAssistant, Content: output},
		svc.Message{Role: svc.RoleUser, Content: jsonString(note)})
	req.Messages = msgs
	var resp svc.ModelResponse
	if err := r.generate(ctx, req, &resp); err != nil {
		return nil, err
	}
	if len(resp.ToolCalls) > 0 {
		verr = errors.New("the model called tools instead of answering")
	} else {
		output = resp.Output
		if len(output) == 0 {
			output = jsonNull
		}
		verr = r.c.Out.Validate(output)
	}
	if verr != nil {
		return nil, r.fail(svc.KindOutputValidation, ReasonInvalidOutput, verr,
			"agent "+r.c.Def.Name+": output does not match output_type after one corrective call")
	}
	return output, nil
}

// generate makes one model turn into *resp: the model that already
// answered, or the primary and then each fallback until one answers. A
// prompt too long for a model's context window goes on only to a later
// model whose window is larger (widerModel), whichever model failed.
func (r *runner) generate(ctx context.Context, req *svc.ModelRequest, resp *svc.ModelResponse) error {
	if ctx.Err() != nil {
		return r.interrupted(ctx)
	}
	if r.jr != nil {
		if replayed, err := r.replayModel(req, resp); replayed {
			return err
		}
	}
	i := 0
	if r.answered >= 0 {
		i = r.answered
	}
	var failures modelErrors
	for i >= 0 && i < len(r.c.Models) {
		stop, failed := r.call(ctx, i, req, resp)
		if stop != nil {
			return stop
		}
		if failed == nil {
			if r.jr != nil {
				r.recordModel(ctx, i, resp)
			}
			return nil
		}
		failures = append(failures, modelFailure{r.c.Models[i].ID, failed})
		switch {
		case model.IsContextError(failed):
			i = r.widerModel(i)
		case r.answered >= 0 || !model.CanFallback(failed):
			// Once a model has answered it serves the rest of the
			// invocation. A request the provider refused as invalid, or
			// a bad key, is not something another model fixes: fail now
			// rather than spend the fallbacks' quota on the same mistake.
			i = -1
		default:
			i++
		}
	}
	return r.modelsFailed(failures)
}

// widerModel is the first model after i whose context window is known and
// larger than model i's, or -1 when there is none (or model i's is not
// known).
func (r *runner) widerModel(i int) int {
	w, ok := model.ContextWindow(r.c.Models[i].ID)
	if !ok {
		return -1
	}
	for j := i + 1; j < len(r.c.Models); j++ {
		if wj, ok := model.ContextWindow(r.c.Models[j].ID); ok && wj > w {
			return j
		}
	}
	return -1
}

// call makes one call to model i, between the budget's reserve and charge,
// into *resp. stop ends the run (budget, ctx); failed is the model's own
// failure, after which the next model may be tried.
func (r *runner) call(ctx context.Context, i int, req *svc.ModelRequest, resp *svc.ModelResponse) (stop, failed error) {
	b := r.inv.Budget
	if b != nil {
		if err := b.Reserve(EstimateTokens(req)); err != nil {
			return err, nil
		}
	}
	m := &r.c.Models[i]
	req.Model = nameOf(m.ID)
	r.out.ModelCalls++
	r.tried = max(r.tried, i)
	if i < len(r.c.modelSteps) {
		r.inv.enter(&r.c.modelSteps[i])
	} else {
		r.inv.enter(&Step{Kind: StepModel, Name: m.ID})
	}
	// Whether to stream is asked at each call: a follower of a submitted
	// run may come while it runs.
	streamed := streams(r.inv)
	if streamed {
		if r.deltas == nil {
			r.deltas = newDeltaBuf(r.inv, r.c.coalesce)
		}
		// The fragments go to the deltaBuf (delta.go) through its add
		// func: the request escapes into the model.
		req.OnDelta = r.deltas.add
	}
	permits, err := r.acquire(ctx, i, EstimateTokens(req))
	if err == nil {
		err = generateSafely(ctx, m.Model, req, resp)
		releasePermits(permits, resp, err)
	}
	if streamed {
		req.OnDelta = nil
		// A failed call's text is not the answer: the next call's deltas
		// start again at index 0, which tells a listener to drop what it
		// has.
		r.deltas.finish(err != nil)
	}
	r.inv.leave()
	if err != nil {
		if b != nil {
			_ = b.Charge(0) // release the reservation: nothing to charge
		}
		if ctx.Err() != nil {
			return r.interrupted(ctx), nil
		}
		return nil, err
	}
	tokens := r.answeredBy(i, resp)
	if b != nil {
		if err := b.Charge(tokens); err != nil {
			return err, nil
		}
	}
	return nil, nil
}

// answeredBy counts resp, model i's answer (made or replayed), in the
// outcome: the model that answered, its tokens and cost. It returns the
// tokens, for the budget.
//
//go:noinline
func (r *runner) answeredBy(i int, resp *svc.ModelResponse) int64 {
	m := &r.c.Models[i]
	r.answered = i
	r.out.Model = m.ID
	tokens := resp.Tokens()
	r.out.TokensUsed += tokens
	cost := resp.CostUSD
	if cost == 0 {
		var known bool
		if cost, known = r.c.Prices.CostCached(m.ID, resp.InputTokens, resp.CachedInputTokens, resp.OutputTokens); !known {
			r.out.CostUnknown = true
		}
	}
	r.out.CostUSD += cost
	r.out.CachedTokens = int32(min(int64(r.out.CachedTokens)+max(resp.CachedInputTokens, 0), math.MaxInt32))
	return tokens
}

// generateSafely calls m into *resp, turning a panicking model into a
// failed one, so one bad provider cannot take the process down and the
// fallbacks still get a turn.
func generateSafely(ctx context.Context, m svc.Model, req *svc.ModelRequest, resp *svc.ModelResponse) (err error) {
	defer recoverModel(&err)
	*resp, err = m.Generate(ctx, *req)
	return err
}

func recoverModel(err *error) {
	if p := recover(); p != nil {
		*err = fmt.Errorf("model panicked: %v", p)
	}
}

// nameOf is the name part of a "provider:name" id that ParseModelID
// accepted at Compile.
func nameOf(id string) string {
	if i := strings.IndexByte(id, ':'); i >= 0 {
		return id[i+1:]
	}
	return id
}

// runTools records the model's tool-calling turn, runs each call in order
// and appends one tool message per call.
func (r *runner) runTools(ctx context.Context, msgs []svc.Message, resp *svc.ModelResponse) ([]svc.Message, error) {
	// The conversation before this turn, for tools that pass it on
	// (spawn_agents with context_passer full). The loop only ever appends
	// to msgs, so this prefix never changes under the tools.
	conv := msgs[:len(msgs):len(msgs)]
	msgs = append(msgs, svc.Message{Role: svc.RoleAssistant, Content: resp.Output, ToolCalls: resp.ToolCalls})
	if r.toolCtx == nil {
		r.conv = new(conversation)
		s := svc.ScopeFrom(ctx)
		s.Depth, s.ParentTrace, s.ParentSpan = int(r.inv.Depth), r.inv.TraceID, r.inv.SpanID
		if r.inv.Priority != ratelimit.Normal {
			s.Priority = r.inv.Priority.String()
		}
		s.Conversation = r.conv.get
		r.toolCtx = svc.WithScope(ctx, s)
		if r.jr != nil {
			// A run a tool starts is covered by the tool call's step: its
			// own steps are not recorded (its ids are not stable).
			r.toolCtx = svc.WithJournal(r.toolCtx, nil)
		}
	}
	r.conv.set(conv)
	toolCtx := r.toolCtx
	for _, call := range resp.ToolCalls {
		if ctx.Err() != nil {
			return msgs, r.interrupted(ctx)
		}
		var content json.RawMessage
		var failed bool
		var stop error
		if kind, waits := r.waitKind(call); waits {
			content, failed, stop = r.humanCall(toolCtx, call, kind)
		} else if r.jr != nil {
			content, failed, stop = r.journaledTool(toolCtx, call)
		} else {
			content, failed, stop = r.callTool(toolCtx, call)
		}
		if stop != nil {
			return msgs, stop
		}
		msgs = append(msgs, svc.Message{Role: svc.RoleTool, ToolCallID: call.ID, Content: content, IsError: failed})
	}
	// A tool that gave up because ctx ended reported a failure; the run is
	// over rather than the model's to handle.
	if ctx.Err() != nil {
		return msgs, r.interrupted(ctx)
	}
	return msgs, nil
}

// callTool runs one tool call with its events and returns the content of
// the tool message, and whether it reports a failure. A failure that ends
// the run (endsRun) is returned as stop instead, with no content.
func (r *runner) callTool(ctx context.Context, call svc.ToolCall) (content json.RawMessage, failed bool, stop error) {
	trust := r.c.Def.Trust()
	r.emit(svc.EventToolCallStarted, svc.Payload{"tool_name": call.Name, "trust_level": string(trust)})
	start := time.Now()
	out, err := r.execTool(ctx, trust, call)
	ms := float64(time.Since(start)) / float64(time.Millisecond)
	if err != nil {
		msg := err.Error()
		kind := toolKind(err)
		r.emit(svc.EventToolCallFailed, svc.Payload{"tool_name": call.Name, "error": msg, "duration_ms": ms,
			"reason": string(kind)})
		if endsRun(kind) {
			return nil, true, err
		}
		return jsonString(msg), true, nil
	}
	// tokens_used stays 0: a tool's own model usage is not attributed yet.
	r.emit(svc.EventToolCallCompleted, svc.Payload{"tool_name": call.Name, "duration_ms": ms, "tokens_used": int64(0)})
	return out, false, nil
}

// endsRun reports whether a tool call failing with this kind ends the
// run instead of going back to the model: a SpawnCapError, the runtime's
// refusal of a fan-out wider than max_spawn_children, which an operator
// set to stop a runaway model, not to let it ask again.
func endsRun(k svc.Kind) bool { return k == svc.KindSpawnCap || k == svc.KindApprovalRequired }

// toolKind is the kind of a failed tool call: the kind of the *svc.Error
// in err's chain, the context's for a call cut short, else
// ToolExecutionError (a tool's own plain error, an unknown tool).
func toolKind(err error) svc.Kind {
	var e *svc.Error
	if errors.As(err, &e) {
		return e.Kind
	}
	if k := svc.KindOf(err); k != svc.KindRuntime {
		return k
	}
	return svc.KindToolExecution
}

func (r *runner) execTool(ctx context.Context, trust svc.TrustLevel, call svc.ToolCall) (json.RawMessage, error) {
	tool, ok := r.tools[call.Name]
	if !ok {
		names := make([]string, len(r.specs))
		for i, s := range r.specs {
			names[i] = s.Name
		}
		return nil, fmt.Errorf("unknown tool %q (available: %s)", call.Name, strings.Join(names, ", "))
	}
	if err := tools.Check(trust, tool); err != nil {
		return nil, err
	}
	args := call.Arguments
	if len(args) == 0 {
		args = emptyObject
	}
	r.inv.enter(&Step{Kind: StepTool, Name: call.Name})
	out, err := callSafely(ctx, tool, args)
	r.inv.leave()
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return jsonNull, nil
	}
	// The result goes back into the conversation as a JSON value.
	if !json.Valid(out) {
		return nil, fmt.Errorf("tool %q returned invalid JSON", call.Name)
	}
	return out, nil
}

// callSafely turns a panicking tool into a failed tool call.
func callSafely(ctx context.Context, t svc.Tool, args json.RawMessage) (out json.RawMessage, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("tool %q panicked: %v", t.Name(), p)
		}
	}()
	return t.Call(ctx, args)
}

var (
	preProcessStep  = Step{Kind: StepHook, Name: ReasonPreProcess}
	postProcessStep = Step{Kind: StepHook, Name: ReasonPostProcess}
)

// hook runs a pre- or post-process hook; reason names which.
func (r *runner) hook(ctx context.Context, h svc.Hook, v json.RawMessage, reason string) (out json.RawMessage, err error) {
	defer func() {
		if p := recover(); p != nil {
			r.inv.leave()
			err = r.fail(svc.KindRuntime, reason, fmt.Errorf("panic: %v", p), "agent "+r.c.Def.Name+": "+reason+" hook failed")
		}
	}()
	if reason == ReasonPreProcess {
		r.inv.enter(&preProcessStep)
	} else {
		r.inv.enter(&postProcessStep)
	}
	out, err = h(ctx, v)
	r.inv.leave()
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, r.interrupted(ctx)
	case err != nil:
		return nil, r.fail(svc.KindRuntime, reason, err, "agent "+r.c.Def.Name+": "+reason+" hook failed")
	case len(out) == 0:
		return jsonNull, nil
	case !json.Valid(out):
		return nil, r.fail(svc.KindRuntime, reason, nil, "agent "+r.c.Def.Name+": "+reason+" hook returned invalid JSON")
	}
	return out, nil
}

func (r *runner) fail(kind svc.Kind, reason string, cause error, msg string) *svc.Error {
	return &svc.Error{Kind: kind, Message: msg, Reason: reason, Agent: r.c.Def.Name, TaskID: r.inv.TaskID, Err: cause}
}

// interrupted is the error for a run whose ctx ended: CancelledError or
// TimeoutError around ctx.Err(), with the cancel cause when there is a
// more specific one (a shutdown, say), whose kind then wins.
func (r *runner) interrupted(ctx context.Context) error {
	err := ctx.Err()
	if cause := context.Cause(ctx); cause != nil && cause != err {
		err = fmt.Errorf("%w: %w", err, cause)
	}
	return &svc.Error{Kind: svc.KindOf(err), Message: "agent " + r.c.Def.Name + " interrupted",
		Agent: r.c.Def.Name, TaskID: r.inv.TaskID, Err: err}
}

func (r *runner) modelsFailed(f modelErrors) error {
	msg := "agent " + r.c.Def.Name + ": model failed"
	switch total := len(r.c.Models); {
	case r.answered < 0 && len(f) < total:
		// Stopped early: the last failure is not one a fallback would fix.
		msg = "agent " + r.c.Def.Name + ": " + strconv.Itoa(len(f)) + " of " + strconv.Itoa(total) +
			" models failed; the last error is not one another model would fix, so the rest were not tried"
	case len(f) > 1:
		msg = "agent " + r.c.Def.Name + ": all " + strconv.Itoa(len(f)) + " models failed"
	}
	if last := f[len(f)-1].err; model.IsContextError(last) {
		return r.fail(svc.KindContext, ReasonContextLength, f,
			msg+": the prompt does not fit the model's context window, and no later model has a larger one")
	}
	return r.fail(svc.KindModel, ReasonModelError, f, msg)
}

type modelFailure struct {
	id  string
	err error
}

// modelErrors lists each model tried and how it failed, in order.
type modelErrors []modelFailure

func (m modelErrors) Error() string {
	var b strings.Builder
	for i, f := range m {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(f.id)
		b.WriteString(": ")
		b.WriteString(f.err.Error())
	}
	return b.String()
}

func (m modelErrors) Unwrap() []error {
	errs := make([]error, len(m))
	for i, f := range m {
		errs[i] = f.err
	}
	return errs
}

func (r *runner) emit(t svc.EventType, p svc.Payload) {
	r.em.Emit(svc.RuntimeEvent{
		EventType:     t,
		Timestamp:     time.Now().UTC(),
		AgentName:     r.c.Def.Name,
		TaskID:        r.inv.TaskID,
		TraceID:       r.inv.TraceID,
		ParentTraceID: r.inv.ParentTraceID,
		SpanID:        r.inv.SpanID,
		ParentSpanID:  r.inv.ParentSpanID,
		Payload:       p,
	})
}

// jsonString encodes s as a JSON string; encoding a string cannot fail.
func jsonString(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}

// loadSources asks each of the agent's tool sources for its tools and
// merges them with the static ones into this invocation's tools. A source
// that fails, or offers a tool whose name is taken or unusable, fails the
// invocation: running without tools the agent was given would make its
// answers quietly wrong.
func (r *runner) loadSources(ctx context.Context) error {
	c := r.c
	all := make(map[string]svc.Tool, len(c.Tools)+8)
	maps.Copy(all, c.Tools)
	specs := slices.Clone(c.ToolSpecs)
	for i, src := range c.Sources {
		name := sourceName(src, i)
		r.inv.enter(&Step{Kind: StepToolSource, Name: name})
		ts, err := sourceTools(ctx, src)
		r.inv.leave()
		if err != nil {
			if ctx.Err() != nil {
				return r.interrupted(ctx)
			}
			return r.fail(svc.KindToolExecution, ReasonToolSource, err, "agent "+c.Def.Name+": "+name+" failed")
		}
		for _, t := range ts {
			if t == nil {
				return r.fail(svc.KindToolExecution, ReasonToolSource, nil, "agent "+c.Def.Name+": "+name+" gave a nil tool")
			}
			tn := t.Name()
			if !svc.ValidName(tn) {
				return r.fail(svc.KindToolExecution, ReasonToolSource, nil,
					fmt.Sprintf("agent %s: %s: tool name %q: use letters, digits, '_', '-' and '.', starting with a letter or digit", c.Def.Name, name, tn))
			}
			if _, dup := all[tn]; dup {
				return r.fail(svc.KindToolExecution, ReasonToolSource, nil,
					fmt.Sprintf("agent %s: %s: tool %q has the name of another tool of the agent", c.Def.Name, name, tn))
			}
			spec, err := specOf(t)
			if err != nil {
				return r.fail(svc.KindToolExecution, ReasonToolSource, nil, "agent "+c.Def.Name+": "+name+": "+err.Error())
			}
			all[tn] = t
			specs = append(specs, spec)
		}
	}
	sortSpecs(specs)
	r.tools, r.specs = all, specs
	return nil
}

// sourceName names a tool source in errors: by its Name method when it has
// one (an MCP server's name, say), else by its place in Sources.
func sourceName(src svc.ToolSource, i int) string {
	if n, ok := src.(interface{ Name() string }); ok && n.Name() != "" {
		return "tool source " + strconv.Quote(n.Name())
	}
	return "tool source " + strconv.Itoa(i)
}

// sourceTools turns a panicking source into a failed one.
func sourceTools(ctx context.Context, src svc.ToolSource) (ts []svc.Tool, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return src.Tools(ctx)
}

// conversation holds, during a model turn's tool calls, the invocation's
// conversation before that turn. A tool may read it from another goroutine
// (spawn_agents starts its children in their own), hence the atomic.
type conversation struct{ p atomic.Pointer[[]svc.Message] }

func (c *conversation) set(msgs []svc.Message) { c.p.Store(&msgs) }

func (c *conversation) get() []svc.Message {
	if p := c.p.Load(); p != nil {
		return *p
	}
	return nil
}

// Conversation returns, inside a tool call, the conversation of the
// invocation that made the call: its input and every complete model turn
// before the one asking for this call (each assistant message with all its
// tool results). It is nil outside a tool call. The slice is the caller's
// own; the messages' contents are shared and must not be modified.
func Conversation(ctx context.Context) []svc.Message {
	get := svc.ScopeFrom(ctx).Conversation
	if get == nil {
		return nil
	}
	return slices.Clone(get())
}

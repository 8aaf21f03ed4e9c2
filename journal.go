package svc

import (
	"context"
	"encoding/json"
)

// Journal is the step log of a submitted run as the run's own code sees it
// while it executes (package supervisor/submitted implements it over a
// StepLog). The agent loop and the runtime's invocations ask it, before
// each step they would pay for, whether a previous life of the run already
// completed that step, and record each step they complete before they
// start the next, so that a run resumed after its process died replays
// what it had done instead of paying for it again.
//
// Keys are built with StepKey from a path that does not depend on timing:
// an invocation's path is its task id and agent name, and a step's index
// counts the steps of its kind the invocation made, in order.
type Journal interface {
	// Replay returns the recorded data of the step of kind and key, and
	// false when the run has no such step (it is new, or was in flight
	// when the process died).
	Replay(kind StepKind, key string) (json.RawMessage, bool)
	// Record appends a completed step to the run's step log and returns
	// once it is durable (or the store failed: then the step is not
	// recorded, the run goes on, and a resume pays for it again; the
	// journal logs why).
	Record(ctx context.Context, kind StepKind, key string, data json.RawMessage)
	// Queue is Record without the wait, for code that must not block (an
	// actor): the step is stored after every event and step given before
	// it, and before any given after it.
	Queue(kind StepKind, key string, data json.RawMessage)
	// Started reports whether a previous life of the run recorded any step
	// under path: the invocation at path started before, so its start
	// events were emitted already and are not emitted again.
	Started(path string) bool
	// Ended reports whether the run's history has the completion of the
	// invocation at path: it ended well in a previous life, whose death
	// came before its outcome was recorded, so the completion is not
	// reported a second time.
	Ended(path string) bool
}

type journalKey struct{}

// WithJournal returns ctx carrying j; a nil j hides the journal of ctx (a
// nested run, whose steps the calling tool's step covers).
func WithJournal(ctx context.Context, j Journal) context.Context {
	return context.WithValue(ctx, journalKey{}, j)
}

// JournalFrom returns the journal of ctx, nil outside a submitted run.
func JournalFrom(ctx context.Context) Journal {
	j, _ := ctx.Value(journalKey{}).(Journal)
	return j
}

// InvocationPath is the journal path of one invocation of agent on the
// task taskID: the prefix of the keys of its model and tool calls, and the
// key of its outcome.
func InvocationPath(taskID, agent string) string { return taskID + "/" + agent }

// ReplayedModelCall is the data of a StepModelCall: the response, the
// model that gave it (its index in the agent's chain of models, so a
// replay goes on with the same one), its usage and cost. The response's
// rate-limit hint is not kept: it was true of that moment only.
type ReplayedModelCall struct {
	Model             int             `json:"model"`
	ToolCalls         []ToolCall      `json:"tool_calls,omitempty"`
	Output            json.RawMessage `json:"output,omitempty"`
	InputTokens       int64           `json:"input_tokens,omitempty"`
	OutputTokens      int64           `json:"output_tokens,omitempty"`
	CachedInputTokens int64           `json:"cached_input_tokens,omitempty"`
	TokensUsed        int64           `json:"tokens_used,omitempty"`
	CostUSD           float64         `json:"cost_usd,omitempty"`
}

// NewReplayedModelCall is the step data of resp, answered by model i.
func NewReplayedModelCall(i int, resp *ModelResponse) ReplayedModelCall {
	return ReplayedModelCall{Model: i, ToolCalls: resp.ToolCalls, Output: resp.Output,
		InputTokens: resp.InputTokens, OutputTokens: resp.OutputTokens, CachedInputTokens: resp.CachedInputTokens,
		TokensUsed: resp.TokensUsed, CostUSD: resp.CostUSD}
}

// Response is the recorded response.
func (c *ReplayedModelCall) Response() ModelResponse {
	return ModelResponse{ToolCalls: c.ToolCalls, Output: c.Output, InputTokens: c.InputTokens,
		OutputTokens: c.OutputTokens, CachedInputTokens: c.CachedInputTokens, TokensUsed: c.TokensUsed, CostUSD: c.CostUSD}
}

// ReplayedOutcome is the data of a StepGroupNode: what one invocation
// produced (a group node's, a fan-out item's), so a resumed run takes it
// without running the invocation again.
type ReplayedOutcome struct {
	Output       json.RawMessage `json:"output"`
	Model        string          `json:"model,omitempty"`
	TokensUsed   int64           `json:"tokens_used,omitempty"`
	CostUSD      float64         `json:"cost_usd,omitempty"`
	CostUnknown  bool            `json:"cost_unknown,omitempty"`
	CachedTokens int32           `json:"cached_tokens,omitempty"`
	ModelCalls   int             `json:"model_calls,omitempty"`
	ModelsTried  []string        `json:"models_tried,omitempty"`
	Remote       bool            `json:"remote,omitempty"`
}

// ReplayedToolCall is the data of a StepToolCall: the content the model
// was given and whether it reported a failure. Started marks the record
// made before a call to a tool declared not idempotent: found without its
// result on replay, it means the call's outcome is unknown.
type ReplayedToolCall struct {
	Content json.RawMessage `json:"content,omitempty"`
	Failed  bool            `json:"failed,omitempty"`
	Started bool            `json:"started,omitempty"`
}

// IdempotentTool is implemented by a tool that says whether calling it
// again with the same arguments is safe. A resumed run makes again a call
// that was in flight when its process died, unless the tool says it is
// not idempotent: then the model is told the call's outcome is unknown.
// A tool that does not implement it counts as idempotent.
type IdempotentTool interface {
	Idempotent() bool
}

// ToolIdempotent reports whether t may be called again after a crash.
func ToolIdempotent(t Tool) bool {
	if it, ok := t.(IdempotentTool); ok {
		return it.Idempotent()
	}
	return true
}

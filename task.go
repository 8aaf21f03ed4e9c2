package svc

import (
	"encoding/json"
	"errors"
)

// TaskSpec is one unit of work for an agent.
type TaskSpec struct {
	// ID becomes the result's task_id; the runtime generates a UUIDv7 when
	// it is empty.
	ID string `json:"id,omitempty"`
	// Input is handed to the agent: any JSON value.
	Input json.RawMessage `json:"input"`
	// RequestID becomes the trace_id of every event of the run.
	RequestID string            `json:"request_id,omitempty"`
	Metadata  map[string]string `json:"metadata,omitempty"`
	// TokenBudget caps the tokens of this run (all its invocations and the
	// runs nested in it), with scope "run" in budget_exceeded; 0 takes the
	// runtime's max_tokens_per_run. It is separate from the runtime's
	// token_budget, which every run shares and which applies too. A task
	// of a run nested in another (spawn_agents, delegate) draws on the
	// enclosing run's cap and its own field is not used.
	TokenBudget int64 `json:"token_budget,omitempty"`
	// Priority orders this run's model calls while they wait for a rate
	// limit's turn (package ratelimit): "high", "normal" (also "") or
	// "low". Runs nested in it inherit it.
	Priority string `json:"priority,omitempty"`
	// Invalid, when set, is why this task could not be read (a bad line of
	// a streamed gather): in a GatherStream the task fails with it, as its
	// own result, without running. It never goes on the wire.
	Invalid error `json:"-"`
}

// Priorities a TaskSpec may give.
var Priorities = []string{"high", "normal", "low"}

// CheckPriority rejects a Priority other than "", "high", "normal" and
// "low" with a SpecValidationError.
func (t *TaskSpec) CheckPriority() error {
	switch t.Priority {
	case "", "high", "normal", "low":
		return nil
	}
	return Errorf(KindSpecValidation, "priority %q: want high, normal or low", t.Priority)
}

// CheckTokenBudget rejects a negative TokenBudget with a
// SpecValidationError.
func (t *TaskSpec) CheckTokenBudget() error {
	if t.TokenBudget < 0 {
		return Errorf(KindSpecValidation, "token_budget %d: must be 0 (the runtime's max_tokens_per_run) or more", t.TokenBudget)
	}
	return nil
}

// ErrorInfo is the error of a failed AgentResult.
type ErrorInfo struct {
	Type    string `json:"type"` // the error kind, e.g. "ModelError"
	Message string `json:"message"`
	Reason  string `json:"reason,omitempty"`
}

// ErrorInfoOf describes err for an AgentResult.
func ErrorInfoOf(err error) *ErrorInfo {
	if err == nil {
		return nil
	}
	return &ErrorInfo{Type: string(KindOf(err)), Message: err.Error(), Reason: ReasonOf(err)}
}

// Err turns the info back into an *Error of the same kind.
func (e *ErrorInfo) Err() error {
	if e == nil {
		return nil
	}
	return &Error{Kind: Kind(e.Type), Message: e.Message, Reason: e.Reason}
}

// ResultMetadata is the metadata of an AgentResult.
type ResultMetadata struct {
	TraceID    string  `json:"trace_id"`
	DurationMS float64 `json:"duration_ms"`
	TokensUsed int64   `json:"tokens_used"`
	CostUSD    float64 `json:"cost_usd"`
	// Model is the resolved identifier of the model that answered, "" when
	// none did.
	Model    string `json:"model"`
	Attempts int    `json:"attempts"`
	// Backend is where the invocation ran: "local" for this process.
	Backend string `json:"backend"`
	// ModelsTried are the models called, primary first, in the order tried.
	ModelsTried []string `json:"models_tried,omitempty"`
	// CostUnknown is set when a model call had no price: CostUSD counts it
	// as 0.
	CostUnknown bool `json:"cost_unknown,omitempty"`
	// CachedTokens are the input tokens the model calls read from the
	// providers' prompt caches (part of TokensUsed, priced at the cached
	// rate); absent when none were.
	CachedTokens int64 `json:"cached_tokens,omitempty"`
}

// AgentResult is the envelope of one agent run.
type AgentResult struct {
	AgentName string          `json:"agent_name"`
	TaskID    string          `json:"task_id"`
	Success   bool            `json:"success"`
	Output    json.RawMessage `json:"output"`
	// Error is the wire form of a failure: what JSON carries.
	Error    *ErrorInfo     `json:"error"`
	Metadata ResultMetadata `json:"metadata"`
	// Err is the failure itself, an *Error with its kind and cause, on a
	// result the runtime returns in process; the runtime builds Error from
	// it at its edge (the Backend methods). A result decoded from JSON has
	// only Error: use Failure to read either.
	Err error `json:"-"`
}

// Failure returns the result's error: Err when set, else Error as an
// *Error of the same kind, nil on success.
func (r *AgentResult) Failure() error {
	if r.Err != nil {
		return r.Err
	}
	return r.Error.Err()
}

// Publish fills Error from Err, for a result leaving the runtime.
func (r *AgentResult) Publish() {
	if r.Err != nil && r.Error == nil {
		r.Error = ErrorInfoOf(r.Err)
	}
}

// MarshalJSON writes a nil output as null, so the field is always present.
func (r AgentResult) MarshalJSON() ([]byte, error) {
	type plain AgentResult
	p := plain(r)
	if len(p.Output) == 0 {
		p.Output = json.RawMessage("null")
	}
	return json.Marshal(p)
}

// AgentSchema is what GET /agents/{name}/schema serves.
type AgentSchema struct {
	Name   string          `json:"name"`
	Input  json.RawMessage `json:"input"`
	Output json.RawMessage `json:"output"`
}

// AnySchema is the JSON Schema that accepts every value; an agent without an
// input_type or output_type reports it.
var AnySchema = json.RawMessage(`{}`)

// GatherRequest is the body of POST /agents/{name}/gather.
type GatherRequest struct {
	Tasks []TaskSpec `json:"tasks"`
	// MaxConcurrency bounds the tasks in flight, 1..10000. 0 leaves the
	// field out of the body, which means DefaultGatherConcurrency; on the
	// wire an explicit "max_concurrency": 0 is a 400, like any value
	// outside the range.
	MaxConcurrency int `json:"max_concurrency,omitempty"`
}

// Gather limits.
const (
	DefaultGatherConcurrency = 100
	MaxGatherConcurrency     = 10000
)

// CheckGatherConcurrency rejects a max_concurrency outside 1..10000, 0
// included, with a SpecValidationError, and returns n otherwise. A gather
// without max_concurrency (absent from the request body) runs with
// DefaultGatherConcurrency; in Go, pass that constant.
func CheckGatherConcurrency(n int) (int, error) {
	if n < 1 || n > MaxGatherConcurrency {
		return 0, Errorf(KindSpecValidation, "max_concurrency %d: must be between 1 and %d (leave it out for the default, %d)",
			n, MaxGatherConcurrency, DefaultGatherConcurrency)
	}
	return n, nil
}

// ErrNoTasks is returned for a gather without tasks.
var ErrNoTasks = errors.New("tasks: at least one task is required")

package svc

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Human in the loop (issue 31). An agent may list tools that need a
// person's approval before each call (Agent.Approval), and may ask a
// person a question with the builtin tool ask_human. Inside a submitted
// run such a call does not happen at once: the run records a wait request
// in its step log (StepWait), moves to RunWaiting with a run_waiting
// event, and its goroutines and actors end. An answer (POST
// /runs/{id}/resume) is recorded as a StepDecision, the run goes back to
// running and is replayed from its step log (resume by replay, issue 30):
// the replay reaches the same call, finds the decision, and goes on. A
// synchronous run or gather cannot wait: the call fails the run with an
// ApprovalRequiredError.

// AskHumanTool is the builtin tool an agent lists in builtin_tools to ask
// a person a question: {"question": string, "choices"?: [string]}; the
// answer is the tool's result.
const AskHumanTool = "ask_human"

// ApprovalAll is the Approval list that makes every tool of an agent need
// approval (`approval: all` in a spec file).
const ApprovalAll = "*"

// WaitKind says what a WaitRequest waits for.
type WaitKind string

// Wait kinds.
const (
	// WaitApproval is a tool call that needs a person's approval.
	WaitApproval WaitKind = "approval"
	// WaitQuestion is an ask_human call: a question for a person.
	WaitQuestion WaitKind = "question"
)

// WaitRequest is what a waiting run waits for: one approval or one
// answer. Its ID is derived from the run's step key (WaitRequestID), so a
// replay of the run reaches the same request under the same id.
type WaitRequest struct {
	ID   string   `json:"id"`
	Kind WaitKind `json:"kind"`
	// Agent and TaskID name the invocation that made the call; SpanID is
	// its span (the run's tree).
	Agent  string `json:"agent"`
	TaskID string `json:"task_id"`
	SpanID string `json:"span_id,omitempty"`
	// Tool and Arguments are the call waiting for approval (ask_human
	// for a question).
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	// Question and Choices are an ask_human call's (Choices may be empty:
	// any JSON answer is taken).
	Question string   `json:"question,omitempty"`
	Choices  []string `json:"choices,omitempty"`
	// CreatedAt is when the run first paused for it; Deadline, when the
	// agent has approval_timeout_seconds, is when it times out, and
	// OnTimeout what happens then.
	CreatedAt time.Time  `json:"created_at"`
	Deadline  *time.Time `json:"deadline,omitempty"`
	OnTimeout string     `json:"on_timeout,omitempty"`
}

// Approval timeout actions (approval_timeout_action).
const (
	// TimeoutDeny answers a request left unanswered as a denial (a
	// question: as a tool error), so the model goes on without it.
	TimeoutDeny = "deny"
	// TimeoutFail fails the run.
	TimeoutFail = "fail"
)

// ReasonApprovalTimeout is the Reason of a run failed by an approval
// timeout with action fail.
const ReasonApprovalTimeout = "approval_timeout"

// WaitRequestID is the id of the request recorded under step key key: a
// short digest, the same in every life of the run.
func WaitRequestID(key string) string {
	h := sha256.Sum256([]byte(key))
	return "req_" + hex.EncodeToString(h[:8])
}

// Decision is the answer to a WaitRequest: the body of POST
// /runs/{id}/resume, and the data of a StepDecision.
type Decision struct {
	RequestID string `json:"request_id"`
	// Approve answers an approval; Reason, optional, goes to the model
	// with a denial.
	Approve *bool  `json:"approve,omitempty"`
	Reason  string `json:"reason,omitempty"`
	// Answer answers a question: any JSON value.
	Answer json.RawMessage `json:"answer,omitempty"`
	// TimedOut marks the decision the runtime made when the request's
	// deadline passed.
	TimedOut bool `json:"timed_out,omitempty"`
	// At is when the decision was taken.
	At time.Time `json:"at"`
}

// Check refuses, as a SpecValidationError, a decision that does not fit
// req: an approval needs approve, a question an answer (one of its
// choices when it has some).
func (d *Decision) Check(req WaitRequest) error {
	switch req.Kind {
	case WaitApproval:
		if d.Approve == nil || len(d.Answer) > 0 {
			return Errorf(KindSpecValidation, "request %s asks for an approval: give \"approve\": true or false (and no \"answer\")", req.ID)
		}
	case WaitQuestion:
		if len(d.Answer) == 0 || d.Approve != nil {
			return Errorf(KindSpecValidation, "request %s asks a question: give \"answer\" (any JSON value; no \"approve\")", req.ID)
		}
		if !json.Valid(d.Answer) {
			return Errorf(KindSpecValidation, "request %s: answer is not a JSON value", req.ID)
		}
		if len(req.Choices) > 0 {
			var s string
			if json.Unmarshal(d.Answer, &s) != nil || !contains(req.Choices, s) {
				return Errorf(KindSpecValidation, "request %s: answer must be one of its choices %q", req.ID, req.Choices)
			}
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// OpenRequests returns the wait requests of a step log that have no
// decision yet, in the order they were made.
func OpenRequests(steps []RunStep) []WaitRequest {
	answered := make(map[string]bool)
	for _, st := range steps {
		if st.Kind == StepDecision {
			answered[st.Key] = true
		}
	}
	var open []WaitRequest
	seen := make(map[string]bool)
	for _, st := range steps {
		if st.Kind != StepWait || answered[st.Key] || seen[st.Key] {
			continue
		}
		var req WaitRequest
		if json.Unmarshal(st.Data, &req) == nil {
			seen[st.Key] = true
			open = append(open, req)
		}
	}
	return open
}

// FindRequest returns the wait step of request id in steps, and whether
// it was answered.
func FindRequest(steps []RunStep, id string) (req WaitRequest, key string, answered, found bool) {
	for _, st := range steps {
		if st.Kind != StepWait {
			continue
		}
		var r WaitRequest
		if json.Unmarshal(st.Data, &r) == nil && r.ID == id {
			req, key, found = r, st.Key, true
			break
		}
	}
	if !found {
		return req, "", false, false
	}
	for _, st := range steps {
		if st.Kind == StepDecision && st.Key == key {
			return req, key, true, true
		}
	}
	return req, key, false, true
}

// PauseError is what an invocation of a submitted run returns when it
// made a call that waits for a person: it ends the run's work for now,
// and the runtime parks the run (RunWaiting) instead of failing it.
type PauseError struct {
	Request WaitRequest
}

func (e *PauseError) Error() string {
	return fmt.Sprintf("run paused: request %s waits for %s of %s", e.Request.ID, e.Request.Kind, e.Request.Tool)
}

// Paused returns the request a run's error says it waits for.
func Paused(err error) (WaitRequest, bool) {
	var p *PauseError
	if errors.As(err, &p) {
		return p.Request, true
	}
	return WaitRequest{}, false
}

// ApprovalRequired is the ApprovalRequiredError of a call that would wait
// for a person outside a submitted run.
func ApprovalRequired(agent, tool string, kind WaitKind) *Error {
	what := "needs approval"
	if kind == WaitQuestion {
		what = "asks a person a question"
	}
	return &Error{Kind: KindApprovalRequired, Agent: agent, Reason: "approval_required",
		Message: fmt.Sprintf("agent %q: tool %q %s, which only a submitted run can wait for: submit the run (POST /submit) and answer it with POST /runs/{id}/resume", agent, tool, what)}
}

// ApprovalTool is implemented by a tool that says whether each call of it
// needs a person's approval (tools.NeedsApproval), whichever agent has it.
type ApprovalTool interface {
	NeedsApproval() bool
}

// ToolNeedsApproval reports whether t declares that its calls need
// approval.
func ToolNeedsApproval(t Tool) bool {
	if at, ok := t.(ApprovalTool); ok {
		return at.NeedsApproval()
	}
	return false
}

// MayWait reports whether a call of the agent could wait for a person:
// it lists tools under Approval, has ask_human, an MCP server of it has
// approval patterns, or one of its tools declares it needs approval.
func (a *Agent) MayWait() bool {
	if len(a.Approval) > 0 || contains(a.BuiltinTools, AskHumanTool) {
		return true
	}
	for i := range a.MCPServers {
		if len(a.MCPServers[i].Approval) > 0 {
			return true
		}
	}
	for _, t := range a.Tools {
		if ToolNeedsApproval(t) {
			return true
		}
	}
	return false
}

// ResumeBackend is a RunBackend whose waiting runs can be resumed.
type ResumeBackend interface {
	// ResumeRun records d as the answer to one of a waiting run's
	// requests and starts the run again. A run that is not waiting, or a
	// request that is unknown or already answered, is a RunStateError
	// (409); a decision that does not fit its request a
	// SpecValidationError.
	ResumeRun(ctx context.Context, runID string, d Decision) (RunStatus, error)
}

package agent

import (
	"context"
	"encoding/json"
	"strconv"
	"time"

	"github.com/svc-dev/svc"
)

// Human in the loop (issue 31; svc/wait.go says the whole story). A call
// of a tool the agent's Approval lists, or of the builtin ask_human, waits
// for a person. Inside a submitted run (a journal) the loop records the
// wait request and ends with a PauseError, which the runtime turns into
// a waiting run; once a decision is recorded, the replayed run reaches
// the same call again and finds it. Outside one, nothing can wait: the
// run ends with an ApprovalRequiredError.

// askHumanSchema is ask_human's input.
var askHumanSchema = json.RawMessage(`{"type":"object","properties":{` +
	`"question":{"type":"string","description":"what to ask the person"},` +
	`"choices":{"type":"array","items":{"type":"string"},"description":"the answers to choose from; omit for a free answer"}},` +
	`"required":["question"],"additionalProperties":false}`)

type askHuman struct{}

// AskHuman is the Builtin of ask_human. The tool is never called: the
// agent loop answers its calls (humanCall).
func AskHuman(svc.Agent) (svc.Tool, error) { return askHuman{}, nil }

func (askHuman) Name() string { return svc.AskHumanTool }
func (askHuman) Description() string {
	return "Ask a person a question and wait for the answer (a submitted run pauses until it comes). The answer is the result."
}
func (askHuman) InputSchema() json.RawMessage { return askHumanSchema }
func (askHuman) Access() svc.Access           { return svc.AccessRead }
func (askHuman) Call(context.Context, json.RawMessage) (json.RawMessage, error) {
	return nil, svc.Errorf(svc.KindRuntime, "ask_human is answered by the agent loop, not called")
}

// waitKind says whether call waits for a person, and for what.
func (r *runner) waitKind(call svc.ToolCall) (svc.WaitKind, bool) {
	tool, known := r.tools[call.Name]
	if !known {
		return "", false // an unknown tool fails as usual
	}
	if call.Name == svc.AskHumanTool {
		return svc.WaitQuestion, true
	}
	if r.c.Def.NeedsApproval(call.Name) || svc.ToolNeedsApproval(tool) {
		return svc.WaitApproval, true
	}
	return "", false
}

// humanCall is callTool for a call that waits for a person.
func (r *runner) humanCall(ctx context.Context, call svc.ToolCall, kind svc.WaitKind) (json.RawMessage, bool, error) {
	if r.jr == nil {
		err := svc.ApprovalRequired(r.c.Def.Name, call.Name, kind)
		err.TaskID = r.inv.TaskID
		r.emit(svc.EventToolCallFailed, svc.Payload{"tool_name": call.Name, "error": err.Error(), "duration_ms": float64(0),
			"reason": string(svc.KindApprovalRequired)})
		return nil, true, err
	}
	jr := r.jr
	key := svc.StepKey(jr.tools, jr.nTool)
	jr.nTool++
	if content, failed, ok := r.replayedTool(key); ok {
		return content, failed, nil
	}
	if data, ok := jr.j.Replay(svc.StepDecision, key); ok {
		var d svc.Decision
		if json.Unmarshal(data, &d) == nil {
			return r.decided(ctx, call, kind, key, d)
		}
	}
	return nil, true, r.pause(ctx, call, kind, key)
}

// decided goes on from a recorded decision: an approved call is made (and
// recorded as any call), a denial or a timed-out request is a tool error
// the model sees, an answer is the tool's result.
func (r *runner) decided(ctx context.Context, call svc.ToolCall, kind svc.WaitKind, key string, d svc.Decision) (json.RawMessage, bool, error) {
	if kind == svc.WaitApproval && d.Approve != nil && *d.Approve {
		return r.journaledCall(ctx, call, key)
	}
	r.emit(svc.EventToolCallStarted, svc.Payload{"tool_name": call.Name, "trust_level": string(r.c.Def.Trust())})
	var content json.RawMessage
	failed := true
	switch {
	case d.TimedOut && kind == svc.WaitQuestion:
		content = jsonString("no answer came in time: the question timed out")
	case d.TimedOut:
		content = jsonString("tool " + strconv.Quote(call.Name) + ": no approval came in time: the call was not made")
	case kind == svc.WaitQuestion:
		content, failed = d.Answer, false
	default:
		msg := "tool " + strconv.Quote(call.Name) + ": a person denied this call"
		if d.Reason != "" {
			msg += ": " + d.Reason
		}
		content = jsonString(msg)
	}
	if failed {
		var msg string
		_ = json.Unmarshal(content, &msg)
		r.emit(svc.EventToolCallFailed, svc.Payload{"tool_name": call.Name, "error": msg, "duration_ms": float64(0),
			"reason": string(svc.KindApprovalRequired)})
	} else {
		r.emit(svc.EventToolCallCompleted, svc.Payload{"tool_name": call.Name, "duration_ms": float64(0), "tokens_used": int64(0)})
	}
	r.recordTool(ctx, key, content, failed)
	return content, failed, nil
}

// pause records the wait request of the call under key (once: a replay
// that reaches it again keeps the first, its id and its deadline) and
// returns the error that parks the run.
func (r *runner) pause(ctx context.Context, call svc.ToolCall, kind svc.WaitKind, key string) error {
	var req svc.WaitRequest
	if data, ok := r.jr.j.Replay(svc.StepWait, key); !ok || json.Unmarshal(data, &req) != nil || req.ID == "" {
		req = r.waitRequest(call, kind, key)
		if data, err := json.Marshal(req); err == nil {
			r.jr.j.Record(ctx, svc.StepWait, key, data)
		}
	}
	return &svc.Error{Kind: svc.KindApprovalRequired, Agent: r.c.Def.Name, TaskID: r.inv.TaskID, Reason: "waiting",
		Message: "agent " + r.c.Def.Name + ": waiting for " + string(kind) + " of " + call.Name + " (request " + req.ID + ")",
		Err:     &svc.PauseError{Request: req}}
}

func (r *runner) waitRequest(call svc.ToolCall, kind svc.WaitKind, key string) svc.WaitRequest {
	now := time.Now().UTC()
	req := svc.WaitRequest{ID: svc.WaitRequestID(key), Kind: kind, Agent: r.c.Def.Name, TaskID: r.inv.TaskID,
		SpanID: r.inv.SpanID, Tool: call.Name, Arguments: call.Arguments, CreatedAt: now}
	if kind == svc.WaitQuestion {
		var q struct {
			Question string   `json:"question"`
			Choices  []string `json:"choices"`
		}
		_ = json.Unmarshal(call.Arguments, &q)
		req.Question, req.Choices = q.Question, q.Choices
		req.Arguments = nil
	}
	if secs := r.c.Def.ApprovalTimeoutSeconds; secs > 0 {
		at := now.Add(time.Duration(secs * float64(time.Second)))
		req.Deadline = &at
		req.OnTimeout = r.c.Def.ApprovalTimeoutAction
		if req.OnTimeout == "" {
			req.OnTimeout = svc.TimeoutDeny
		}
	}
	return req
}

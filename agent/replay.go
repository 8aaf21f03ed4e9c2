package agent

import (
	"context"
	"encoding/json"
	"strconv"

	"github.com/svc-dev/svc"
)

// Replay (issue 30): inside a submitted run the context carries the run's
// svc.Journal. Each model call that answers and each tool call that ends is
// recorded before the loop goes on; a resumed run, running the same loop
// on the same input, finds each of those steps under the key it computes
// again and takes the recorded result instead of calling the model or the
// tool. Replayed steps emit no events: their events are in the run's
// history already. The first step that is not recorded is made as usual,
// and from then on the loop is live.

// journaled is a runner's view of its run's journal: where its keys live
// and how many calls of each kind it has made.
type journaled struct {
	j      svc.Journal
	models string // key prefix of the model calls
	tools  string // key prefix of the tool calls
	nModel int
	nTool  int
}

// journalOf is inv's journal in ctx, nil when there is none (the common
// case, which costs one context lookup).
//
//go:noinline
func journalOf(ctx context.Context, inv *Invocation) *journaled {
	j := svc.JournalFrom(ctx)
	if j == nil {
		return nil
	}
	p := svc.InvocationPath(inv.TaskID, inv.Agent.Def.Name)
	return &journaled{j: j, models: p + "/model", tools: p + "/tool"}
}

// replayModel answers the next model call from the journal when it was
// recorded: replayed reports whether it was, err is what the call returns
// then (the budget's verdict on its tokens).
//
//go:noinline
func (r *runner) replayModel(req *svc.ModelRequest, resp *svc.ModelResponse) (replayed bool, err error) {
	jr := r.jr
	data, ok := jr.j.Replay(svc.StepModelCall, svc.StepKey(jr.models, jr.nModel))
	if !ok {
		return false, nil
	}
	var rec svc.ReplayedModelCall
	if json.Unmarshal(data, &rec) != nil || rec.Model < 0 || rec.Model >= len(r.c.Models) {
		// A record this agent cannot have made (its spec changed): make
		// the call again rather than trust it.
		return false, nil
	}
	jr.nModel++
	*resp = rec.Response()
	i := rec.Model
	r.out.ModelCalls++
	r.tried = max(r.tried, i)
	tokens := r.answeredBy(i, resp)
	// The tokens were spent: they count against the run's budget as they
	// did the first time, so a resumed run stops where the first would.
	if b := r.inv.Budget; b != nil {
		if err := b.Reserve(0); err != nil {
			return true, err
		}
		if err := b.Charge(tokens); err != nil {
			return true, err
		}
	}
	return true, nil
}

// recordModel records the answer of model i before the loop goes on.
//
//go:noinline
func (r *runner) recordModel(ctx context.Context, i int, resp *svc.ModelResponse) {
	jr := r.jr
	key := svc.StepKey(jr.models, jr.nModel)
	jr.nModel++
	data, err := json.Marshal(svc.NewReplayedModelCall(i, resp))
	if err != nil {
		return // not recordable: a resume pays for it again
	}
	jr.j.Record(ctx, svc.StepModelCall, key, data)
}

// errOutcomeUnknown is the content the model gets for a call to a tool
// declared not idempotent that was in flight when the run's process died.
const errOutcomeUnknown = "the outcome of this call is unknown: the run was interrupted while the tool ran, " +
	"and the tool is declared not idempotent, so it was not called again"

// journaledTool is callTool inside a submitted run: a recorded call is
// replayed, a call to a tool declared not idempotent that a previous life
// started but did not finish is reported as of unknown outcome, and any
// other call is made and recorded.
//
//go:noinline
func (r *runner) journaledTool(ctx context.Context, call svc.ToolCall) (json.RawMessage, bool, error) {
	jr := r.jr
	key := svc.StepKey(jr.tools, jr.nTool)
	jr.nTool++
	return r.journaledCall(ctx, call, key)
}

// journaledCall is journaledTool for the call recorded under key.
func (r *runner) journaledCall(ctx context.Context, call svc.ToolCall, key string) (json.RawMessage, bool, error) {
	jr := r.jr
	if content, failed, ok := r.replayedTool(key); ok {
		return content, failed, nil
	}
	tool, known := r.tools[call.Name]
	risky := known && !svc.ToolIdempotent(tool)
	if risky {
		if _, ok := jr.j.Replay(svc.StepToolCall, key+"/started"); ok {
			msg := "tool " + strconv.Quote(call.Name) + ": " + errOutcomeUnknown
			r.emit(svc.EventToolCallFailed, svc.Payload{"tool_name": call.Name, "error": msg, "duration_ms": float64(0),
				"reason": string(svc.KindToolExecution)})
			content := jsonString(msg)
			r.recordTool(ctx, key, content, true)
			return content, true, nil
		}
		// Say the call started before making it, so a crash during it
		// is known on resume.
		jr.j.Record(ctx, svc.StepToolCall, key+"/started", json.RawMessage(`{"started":true}`))
	}
	content, failed, stop := r.callTool(ctx, call)
	// A call cut short by the run's end is not a result, nor is one that
	// ended the run (its run fails for good: nothing resumes it).
	if ctx.Err() == nil && stop == nil {
		r.recordTool(ctx, key, content, failed)
	}
	return content, failed, stop
}

// replayedTool is the recorded result of the tool call under key, when a
// previous life of the run completed it.
func (r *runner) replayedTool(key string) (content json.RawMessage, failed, ok bool) {
	data, found := r.jr.j.Replay(svc.StepToolCall, key)
	if !found {
		return nil, false, false
	}
	var rec svc.ReplayedToolCall
	if json.Unmarshal(data, &rec) != nil || rec.Started {
		return nil, false, false
	}
	if len(rec.Content) == 0 {
		rec.Content = jsonNull
	}
	return rec.Content, rec.Failed, true
}

func (r *runner) recordTool(ctx context.Context, key string, content json.RawMessage, failed bool) {
	data, err := json.Marshal(svc.ReplayedToolCall{Content: content, Failed: failed})
	if err != nil {
		return
	}
	r.jr.j.Record(ctx, svc.StepToolCall, key, data)
}

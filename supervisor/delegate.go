package supervisor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/svc-dev/svc"
)

// The delegate entry point: a team coordinator's tool call → delegateTool.Call
// → runCompiled (run.go) → a run actor and one invocation actor for the
// delegate, nested in the team run (same trace, one level deeper, the
// coordinator's invocation as its parent span).

// delegateTool is the tool a team's coordinator gets: delegate(target,
// input) runs one of the team's delegates as a nested run (one level deeper,
// charged to the same budget, with the usual events) and returns its result.
type delegateTool struct {
	rt        *Runtime
	team      string
	delegates map[string]bool
	maxRounds int
	desc      string
	schema    json.RawMessage
}

func newDelegateTool(rt *Runtime, g svc.Group) *delegateTool {
	t := &delegateTool{rt: rt, team: g.Name, delegates: map[string]bool{}, maxRounds: g.MaxRounds}
	if t.maxRounds == 0 {
		t.maxRounds = svc.DefaultMaxRounds
	}
	for _, d := range g.Delegates {
		t.delegates[d] = true
	}
	enum, _ := json.Marshal(g.Delegates)
	t.schema = json.RawMessage(`{"type":"object","properties":{"target":{"type":"string","enum":` + string(enum) +
		`,"description":"the delegate to hand the task to"},"input":{"description":"the delegate's input"}},"required":["target","input"],"additionalProperties":false}`)
	t.desc = fmt.Sprintf("Hand a task to one of the delegates of team %s (%s) and get their result. At most %d calls per run.",
		g.Name, strings.Join(g.Delegates, ", "), t.maxRounds)
	return t
}

func (t *delegateTool) Name() string                 { return "delegate" }
func (t *delegateTool) Description() string          { return t.desc }
func (t *delegateTool) InputSchema() json.RawMessage { return t.schema }
func (t *delegateTool) Access() svc.Access           { return svc.AccessRead }

type delegateArgs struct {
	Target string          `json:"target"`
	Input  json.RawMessage `json:"input"`
}

// delegateResult is what the coordinator's model sees.
type delegateResult struct {
	Success bool            `json:"success"`
	Output  json.RawMessage `json:"output"`
	Error   *svc.ErrorInfo  `json:"error,omitempty"`
}

func (t *delegateTool) Call(ctx context.Context, args json.RawMessage) (json.RawMessage, error) {
	var a delegateArgs
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		return nil, svc.Errorf(svc.KindToolExecution, "delegate: bad arguments: %v", err)
	}
	if !t.delegates[a.Target] {
		return nil, svc.Errorf(svc.KindToolExecution, "delegate: %q is not a delegate of team %s", a.Target, t.team)
	}
	rs := runOf(ctx)
	rounds := rs.rounds
	if rounds == nil {
		return nil, svc.Errorf(svc.KindToolExecution, "delegate: called outside a run of team %s", t.team)
	}
	if n := rounds.Add(1); n > int64(t.maxRounds) {
		return nil, svc.Errorf(svc.KindToolExecution, "delegate: team %s reached max_rounds (%d)", t.team, t.maxRounds)
	}
	if len(a.Input) == 0 {
		a.Input = json.RawMessage("null")
	}
	c, err := t.rt.lookup(a.Target)
	if err != nil {
		return nil, err
	}
	task, err := prepare(c, svc.TaskSpec{Input: a.Input, RequestID: svc.ParentTraceFrom(ctx)}, svc.RequestIDFrom(ctx), -1)
	if err != nil {
		return nil, err
	}
	res, err := t.rt.runCompiled(withNested(ctx), c, task)
	if err != nil {
		return nil, err
	}
	out := res.Output
	if len(out) == 0 {
		out = json.RawMessage("null")
	}
	return json.Marshal(delegateResult{Success: res.Success, Output: out, Error: svc.ErrorInfoOf(res.Err)})
}

package spawn

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/svc-dev/svc"
)

// DelegateTool is the name of the tool a team's coordinator gets.
const DelegateTool = "delegate"

// delegateTool is the tool a team's coordinator gets: delegate(target,
// input) runs one of the team's delegates as a nested run (same trace,
// one level deeper, the coordinator's invocation as its parent span,
// charged to the same budget, with the usual events) and returns its
// result.
type delegateTool struct {
	runs      *Runs
	team      string
	delegates map[string]bool
	maxRounds int
	desc      string
	schema    json.RawMessage
}

// NewDelegateTool returns the delegate tool of team g, running its
// delegates through runs.
func NewDelegateTool(runs *Runs, g svc.Group) svc.Tool {
	t := &delegateTool{runs: runs, team: g.Name, delegates: map[string]bool{}, maxRounds: g.MaxRounds}
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

func (t *delegateTool) Name() string                 { return DelegateTool }
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
	rounds := t.runs.Rounds(ctx)
	if rounds == nil {
		return nil, svc.Errorf(svc.KindToolExecution, "delegate: called outside a run of team %s", t.team)
	}
	if n := rounds.Add(1); n > int64(t.maxRounds) {
		return nil, svc.Errorf(svc.KindToolExecution, "delegate: team %s reached max_rounds (%d)", t.team, t.maxRounds)
	}
	if len(a.Input) == 0 {
		a.Input = json.RawMessage("null")
	}
	c, err := t.runs.Lookup(a.Target)
	if err != nil {
		return nil, err
	}
	// The delegate's run is part of the team run: its trace is the
	// coordinator's (else the request's).
	trace := svc.ParentTraceFrom(ctx)
	if trace == "" {
		trace = svc.RequestIDFrom(ctx)
	}
	res, err := t.runs.Run(ctx, c, svc.TaskSpec{Input: a.Input, RequestID: trace}, nil)
	if err != nil {
		return nil, err
	}
	out := res.Output
	if len(out) == 0 {
		out = json.RawMessage("null")
	}
	return json.Marshal(delegateResult{Success: res.Success, Output: out, Error: svc.ErrorInfoOf(res.Err)})
}

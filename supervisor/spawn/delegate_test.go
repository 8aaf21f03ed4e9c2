package spawn_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/supervisor/spawn"
)

func team() svc.Group {
	return svc.Group{Name: "t", Coordinator: "boss", Delegates: []string{"helper"}, MaxRounds: 2}
}

// A delegate runs inside the team run, on the coordinator's trace, as a
// nested run that no spawn path names; the coordinator sees its result.
func TestDelegate(t *testing.T) {
	f := &fakeRuns{registered: map[string]svc.Agent{"helper": {Name: "helper"}}, rounds: new(atomic.Int64)}
	tool := spawn.NewDelegateTool(f.runs(), team())
	if tool.Name() != spawn.DelegateTool || !strings.Contains(string(tool.InputSchema()), `"enum":["helper"]`) {
		t.Fatalf("tool %s, schema %s", tool.Name(), tool.InputSchema())
	}
	ctx := svc.WithScope(svc.WithRequestID(context.Background(), "req"), svc.Scope{Depth: 0, ParentTrace: "coord", RequestID: "req"})
	out, err := tool.Call(ctx, json.RawMessage(`{"target":"helper","input":{"q":1}}`))
	if err != nil || string(out) != `{"success":true,"output":{"q":1}}` {
		t.Fatalf("Call = %s, %v", out, err)
	}
	if len(f.calls) != 1 || f.calls[0].task.RequestID != "coord" || f.calls[0].path != nil {
		t.Errorf("runs %+v, want helper on trace coord, no spawn path", f.calls)
	}
	// Without a coordinator's trace, the request's.
	if _, err := tool.Call(svc.WithRequestID(context.Background(), "req"), json.RawMessage(`{"target":"helper","input":1}`)); err != nil ||
		f.calls[1].task.RequestID != "req" {
		t.Errorf("second call %v, request id %q", err, f.calls[1].task.RequestID)
	}
}

// A call the team does not allow fails the tool call and runs nothing:
// a target that is not a delegate, a call outside a team run, a round
// past max_rounds.
func TestDelegateRefusals(t *testing.T) {
	f := &fakeRuns{registered: map[string]svc.Agent{"helper": {Name: "helper"}}}
	tool := spawn.NewDelegateTool(f.runs(), team())
	call := func(args string) error {
		_, err := tool.Call(context.Background(), json.RawMessage(args))
		return err
	}
	for args, want := range map[string]string{
		`{"target":"boss","input":1}`:         "not a delegate",
		`{"target":"helper","input":1,"x":2}`: "bad arguments",
		`{"target":"helper","input":1}`:       "outside a run of team t",
	} {
		if err := call(args); !errors.Is(err, svc.ErrToolExecution) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", args, err, want)
		}
	}
	f.rounds = new(atomic.Int64)
	for range 2 {
		if err := call(`{"target":"helper","input":1}`); err != nil {
			t.Fatal(err)
		}
	}
	if err := call(`{"target":"helper","input":1}`); err == nil || !strings.Contains(err.Error(), "max_rounds (2)") {
		t.Errorf("third round: %v, want max_rounds", err)
	}
	if len(f.calls) != 2 {
		t.Errorf("%d runs, want 2", len(f.calls))
	}
}

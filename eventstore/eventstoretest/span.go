package eventstoretest

import (
	"context"
	"strings"
	"testing"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/eventstore"
)

// span sets an event's span ids.
func span(e svc.RuntimeEvent, id, parent string) svc.RuntimeEvent {
	e.SpanID, e.ParentSpanID = id, parent
	return e
}

// Where time would mislead, the tree follows the span ids: a gather's two
// invocations start at the same instant, and the child run and the nested
// (delegate) invocation each hang below the invocation that started them,
// not below the one started last; budget_exceeded goes to the invocation
// it names even though another of the same agent and task runs.
func testTreeLinksBySpanID(t *testing.T, open Open) {
	ctx := context.Background()
	p := func(tool string) svc.Payload { return svc.Payload{"tool_name": tool} }
	evs := []svc.RuntimeEvent{
		span(mk(svc.EventBatchStarted, 0, "w", "", "x-1", svc.Payload{"task_count": 2}), "batch", ""),
		span(mk(svc.EventAgentSpawned, 1, "w", "a", "x-1", nil), "sa", "batch"),
		span(mk(svc.EventAgentSpawned, 1, "w", "b", "x-1", nil), "sb", "batch"),
		span(mk(svc.EventToolCallStarted, 2, "w", "a", "x-1", p("spawn_agents")), "sa", "batch"),
		span(mk(svc.EventToolCallStarted, 2, "w", "b", "x-1", p("delegate")), "sb", "batch"),
		// A's child run and B's nested invocation start at the same time,
		// after both invocations started.
		span(child(mk(svc.EventAgentSpawned, 3, "kid", "k", "x-kid", nil), "x-1"), "sk", "sa"),
		span(child(mk(svc.EventAgentSpawned, 3, "helper", "h", "x-1", nil), "x-1"), "sh", "sb"),
		span(child(mk(svc.EventAgentCompleted, 4, "kid", "k", "x-kid", nil), "x-1"), "sk", "sa"),
		span(child(mk(svc.EventAgentCompleted, 4, "helper", "h", "x-1", nil), "x-1"), "sh", "sb"),
		span(mk(svc.EventToolCallCompleted, 5, "w", "a", "x-1", p("spawn_agents")), "sa", "batch"),
		span(mk(svc.EventToolCallCompleted, 5, "w", "b", "x-1", p("delegate")), "sb", "batch"),
		span(mk(svc.EventBudgetExceeded, 6, "w", "a", "x-1", nil), "sa", "batch"),
		span(mk(svc.EventAgentFailed, 6, "w", "a", "x-1", svc.Payload{"reason": "BudgetExceededError"}), "sa", "batch"),
		span(mk(svc.EventAgentCompleted, 6, "w", "b", "x-1", nil), "sb", "batch"),
		span(mk(svc.EventBatchCompleted, 6, "w", "", "x-1", nil), "batch", ""),
	}
	want := `
run w failed task=- trace=x-1 0..6 []
  event batch_started completed task=- trace=x-1 0..0 [batch_started]
  agent w failed task=a trace=x-1 1..6 [agent_spawned agent_failed]
    tool spawn_agents completed task=a trace=x-1 2..5 [tool_call_started tool_call_completed]
    run kid completed task=- trace=x-kid 3..4 []
      agent kid completed task=k trace=x-kid 3..4 [agent_spawned agent_completed]
    event budget_exceeded failed task=a trace=x-1 6..6 [budget_exceeded]
  agent w completed task=b trace=x-1 1..6 [agent_spawned agent_completed]
    tool delegate completed task=b trace=x-1 2..5 [tool_call_started tool_call_completed]
    agent helper completed task=h trace=x-1 3..4 [agent_spawned agent_completed]
  event batch_completed completed task=- trace=x-1 6..6 [batch_completed]
`
	s := open(t, eventstore.Retention{})
	write(t, s, evs...)
	tree, err := s.Tree(ctx, "x-1")
	if err != nil {
		t.Fatal(err)
	}
	if got := render(tree.Root); strings.TrimSpace(got) != strings.TrimSpace(want) {
		t.Errorf("tree:\n%s\nwant:\n%s", got, strings.TrimSpace(want))
	}
	// The span ids come back from the store.
	back, err := s.Events(ctx, svc.EventQuery{TraceID: "x-kid", Limit: 10})
	if err != nil || len(back) != 2 || back[0].SpanID != "sk" || back[0].ParentSpanID != "sa" {
		t.Errorf("events of x-kid = %+v, %v", back, err)
	}
}

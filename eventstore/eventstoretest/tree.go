package eventstoretest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/eventstore"
)

// render draws a tree one node a line: kind, name, status, task, trace,
// start..end in ms after base ("…" while running) and the event types.
func render(n *svc.TreeNode) string {
	var b strings.Builder
	var walk func(n *svc.TreeNode, depth int)
	walk = func(n *svc.TreeNode, depth int) {
		task := "-"
		if n.TaskID != nil {
			task = *n.TaskID
		}
		end := "…"
		if n.End != nil {
			end = fmt.Sprint(n.End.Sub(base).Milliseconds())
		}
		types := make([]string, len(n.Events))
		for i, e := range n.Events {
			types[i] = string(e.EventType)
		}
		fmt.Fprintf(&b, "%s%s %s %s task=%s trace=%s %d..%s [%s]\n", strings.Repeat("  ", depth), n.Kind, n.Name,
			n.Status, task, n.TraceID, n.Start.Sub(base).Milliseconds(), end, strings.Join(types, " "))
		for _, c := range n.Children {
			walk(c, depth+1)
		}
	}
	walk(n, 0)
	return b.String()
}

func testTree(t *testing.T, open Open) {
	ctx := context.Background()
	p := func(tool string) svc.Payload { return svc.Payload{"tool_name": tool} }
	evs := []svc.RuntimeEvent{
		// g-1: a group whose triage node spawns a child run (c-1), which
		// spawns a grandchild run (gc-1); billing is refused by the budget.
		mk(svc.EventGroupStarted, 0, "support", "", "g-1", svc.Payload{"group_name": "support", "node_count": 2}),
		mk(svc.EventAgentSpawned, 1, "triage", "g/triage", "g-1", nil),
		mk(svc.EventToolCallStarted, 2, "triage", "g/triage", "g-1", p("spawn_agents")),
		child(mk(svc.EventAgentSpawned, 3, "researcher", "c1", "c-1", nil), "g-1"),
		child(mk(svc.EventToolCallStarted, 4, "researcher", "c1", "c-1", p("spawn_agents")), "g-1"),
		child(mk(svc.EventAgentSpawned, 5, "reader", "gc1", "gc-1", nil), "c-1"),
		child(mk(svc.EventAgentCompleted, 6, "reader", "gc1", "gc-1", nil), "c-1"),
		child(mk(svc.EventToolCallCompleted, 7, "researcher", "c1", "c-1", p("spawn_agents")), "g-1"),
		child(mk(svc.EventAgentFailed, 8, "researcher", "c1", "c-1", svc.Payload{"error": "ModelError: x"}), "g-1"),
		mk(svc.EventToolCallCompleted, 9, "triage", "g/triage", "g-1", p("spawn_agents")),
		mk(svc.EventAgentCompleted, 10, "triage", "g/triage", "g-1", nil),
		mk(svc.EventAgentSpawned, 11, "billing", "g/billing", "g-1", nil),
		mk(svc.EventBudgetExceeded, 12, "billing", "g/billing", "g-1", nil),
		mk(svc.EventAgentFailed, 13, "billing", "g/billing", "g-1", nil),
		mk(svc.EventGroupCompleted, 14, "support", "", "g-1", svc.Payload{"group_name": "support"}),

		// r-1: a team run still going: the coordinator's delegate call is
		// a nested run in the same trace; a tool call has not ended; a
		// failed call whose start is not stored; a batch event; a refused
		// spawn with no invocation.
		mk(svc.EventAgentSpawned, 100, "coord", "r1", "r-1", nil),
		mk(svc.EventToolCallStarted, 101, "coord", "r1", "r-1", p("delegate")),
		child(mk(svc.EventAgentSpawned, 102, "helper", "r2", "r-1", nil), "r-1"),
		child(mk(svc.EventToolCallStarted, 103, "helper", "r2", "r-1", p("search")), "r-1"),
		child(mk(svc.EventToolCallStarted, 104, "helper", "r2", "r-1", p("search")), "r-1"),
		child(mk(svc.EventToolCallCompleted, 105, "helper", "r2", "r-1", p("search")), "r-1"),
		child(mk(svc.EventToolCallFailed, 106, "helper", "r2", "r-1", p("search")), "r-1"),
		child(mk(svc.EventAgentCompleted, 107, "helper", "r2", "r-1", nil), "r-1"),
		mk(svc.EventToolCallCompleted, 108, "coord", "r1", "r-1", p("delegate")),
		mk(svc.EventToolCallStarted, 109, "coord", "r1", "r-1", p("slow")),
		mk(svc.EventBatchStarted, 110, "coord", "", "r-1", svc.Payload{"task_count": 1}),
		mk(svc.EventToolCallFailed, 111, "coord", "r1", "r-1", p("ghost")),
		mk(svc.EventDepthLimitExceeded, 112, "deep", "d1", "r-1", nil),

		// a-1: one agent, run twice with the same task id (a second
		// spawn after the first ended is a second invocation).
		mk(svc.EventAgentSpawned, 200, "solo", "s1", "a-1", nil),
		mk(svc.EventAgentCompleted, 201, "solo", "s1", "a-1", nil),
		mk(svc.EventAgentSpawned, 202, "solo", "s1", "a-1", nil),
		mk(svc.EventAgentFailed, 203, "solo", "s1", "a-1", nil),

		// o-1: only a child run is stored, not the parent's own events.
		child(mk(svc.EventAgentSpawned, 300, "kid", "o1", "oc-1", nil), "o-1"),

		// f-1: a fan-out group that lost one branch and still succeeded
		// (group_completed says so): the root is completed, the branch
		// failed. f-2: a group that failed with every node completed (it
		// was cut short): the root is failed.
		mk(svc.EventGroupStarted, 400, "fanout", "", "f-1", svc.Payload{"group_name": "fanout", "node_count": 2}),
		mk(svc.EventAgentSpawned, 401, "worker", "f/1", "f-1", nil),
		mk(svc.EventAgentCompleted, 402, "worker", "f/1", "f-1", nil),
		mk(svc.EventAgentSpawned, 403, "worker", "f/2", "f-1", nil),
		mk(svc.EventAgentFailed, 404, "worker", "f/2", "f-1", svc.Payload{"error": "ModelError: bad"}),
		mk(svc.EventGroupCompleted, 405, "fanout", "", "f-1", svc.Payload{"group_name": "fanout", "success": true}),
		mk(svc.EventGroupStarted, 500, "pipe", "", "f-2", svc.Payload{"group_name": "pipe", "node_count": 2}),
		mk(svc.EventAgentSpawned, 501, "step", "p/1", "f-2", nil),
		mk(svc.EventAgentCompleted, 502, "step", "p/1", "f-2", nil),
		mk(svc.EventGroupCompleted, 503, "pipe", "", "f-2", svc.Payload{"group_name": "pipe", "success": false}),
	}
	cases := []struct{ trace, want string }{
		{"g-1", `
group support failed task=- trace=g-1 0..14 [group_started group_completed]
  agent triage completed task=g/triage trace=g-1 1..10 [agent_spawned agent_completed]
    tool spawn_agents completed task=g/triage trace=g-1 2..9 [tool_call_started tool_call_completed]
    run researcher failed task=- trace=c-1 3..8 []
      agent researcher failed task=c1 trace=c-1 3..8 [agent_spawned agent_failed]
        tool spawn_agents completed task=c1 trace=c-1 4..7 [tool_call_started tool_call_completed]
        run reader completed task=- trace=gc-1 5..6 []
          agent reader completed task=gc1 trace=gc-1 5..6 [agent_spawned agent_completed]
  agent billing failed task=g/billing trace=g-1 11..13 [agent_spawned agent_failed]
    event budget_exceeded failed task=g/billing trace=g-1 12..12 [budget_exceeded]
`},
		{"c-1", `
run researcher failed task=- trace=c-1 3..8 []
  agent researcher failed task=c1 trace=c-1 3..8 [agent_spawned agent_failed]
    tool spawn_agents completed task=c1 trace=c-1 4..7 [tool_call_started tool_call_completed]
    run reader completed task=- trace=gc-1 5..6 []
      agent reader completed task=gc1 trace=gc-1 5..6 [agent_spawned agent_completed]
`},
		{"r-1", `
run coord running task=- trace=r-1 100..… []
  agent coord running task=r1 trace=r-1 100..… [agent_spawned]
    tool delegate completed task=r1 trace=r-1 101..108 [tool_call_started tool_call_completed]
    agent helper completed task=r2 trace=r-1 102..107 [agent_spawned agent_completed]
      tool search completed task=r2 trace=r-1 103..105 [tool_call_started tool_call_completed]
      tool search failed task=r2 trace=r-1 104..106 [tool_call_started tool_call_failed]
    tool slow running task=r1 trace=r-1 109..… [tool_call_started]
    tool ghost failed task=r1 trace=r-1 111..111 [tool_call_failed]
  event batch_started completed task=- trace=r-1 110..110 [batch_started]
  event depth_limit_exceeded failed task=d1 trace=r-1 112..112 [depth_limit_exceeded]
`},
		{"a-1", `
run solo failed task=- trace=a-1 200..203 []
  agent solo completed task=s1 trace=a-1 200..201 [agent_spawned agent_completed]
  agent solo failed task=s1 trace=a-1 202..203 [agent_spawned agent_failed]
`},
		{"o-1", `
run  running task=- trace=o-1 300..… []
  run kid running task=- trace=oc-1 300..… []
    agent kid running task=o1 trace=oc-1 300..… [agent_spawned]
`},
		{"f-1", `
group fanout completed task=- trace=f-1 400..405 [group_started group_completed]
  agent worker completed task=f/1 trace=f-1 401..402 [agent_spawned agent_completed]
  agent worker failed task=f/2 trace=f-1 403..404 [agent_spawned agent_failed]
`},
		{"f-2", `
group pipe failed task=- trace=f-2 500..503 [group_started group_completed]
  agent step completed task=p/1 trace=f-2 501..502 [agent_spawned agent_completed]
`},
	}
	s := open(t, eventstore.Retention{})
	write(t, s, evs[len(evs)/2:]...)
	write(t, s, evs[:len(evs)/2]...)
	for _, c := range cases {
		t.Run(c.trace, func(t *testing.T) {
			tree, err := s.Tree(ctx, c.trace)
			if err != nil {
				t.Fatal(err)
			}
			if tree.TraceID != c.trace {
				t.Errorf("trace id %q", tree.TraceID)
			}
			if got, want := render(tree.Root), strings.TrimPrefix(c.want, "\n"); got != want {
				t.Fatalf("tree:\n%s\nwant:\n%s", got, want)
			}
			// Clients see empty lists, never null.
			b, err := json.Marshal(tree)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(b), `"children":null`) || strings.Contains(string(b), `"events":null`) {
				t.Fatalf("null lists in %s", b)
			}
		})
	}
}

// testTreeDepth checks that a chain of child runs is followed MaxTreeDepth
// levels deep, and that a cycle of parents ends.
func testTreeDepth(t *testing.T, open Open) {
	ctx := context.Background()
	var evs []svc.RuntimeEvent
	for i := range eventstore.MaxTreeDepth + 5 {
		e := mk(svc.EventAgentSpawned, i, "a", fmt.Sprint(i), fmt.Sprintf("t%d", i), nil)
		if i > 0 {
			e.ParentTraceID = fmt.Sprintf("t%d", i-1)
		}
		evs = append(evs, e)
	}
	// x and y name each other as parent.
	evs = append(evs, child(mk(svc.EventAgentSpawned, 100, "x", "x", "x", nil), "y"),
		child(mk(svc.EventAgentSpawned, 101, "y", "y", "y", nil), "x"))
	s := open(t, eventstore.Retention{})
	write(t, s, evs...)
	tree, err := s.Tree(ctx, "t0")
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	for n := tree.Root; n != nil; {
		runs++
		var next *svc.TreeNode
		for _, c := range n.Children {
			for _, cc := range c.Children {
				if cc.Kind == "run" {
					next = cc
				}
			}
		}
		n = next
	}
	if runs != eventstore.MaxTreeDepth+1 {
		t.Errorf("the tree holds %d runs, want the root and %d levels below it", runs, eventstore.MaxTreeDepth)
	}
	tree, err = s.Tree(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	want := "run x running task=- trace=x 100..… []\n" +
		"  agent x running task=x trace=x 100..… [agent_spawned]\n" +
		"    run y running task=- trace=y 101..… []\n" +
		"      agent y running task=y trace=y 101..… [agent_spawned]\n"
	if got := render(tree.Root); got != want {
		t.Errorf("cycle:\n%s\nwant:\n%s", got, want)
	}
}

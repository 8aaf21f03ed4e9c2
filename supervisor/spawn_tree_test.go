package supervisor_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/eventstore"
	"github.com/svc-dev/svc/eventstore/memevents"
)

// The children of spawn_agents appear under the parent's invocation in the
// parent trace's event tree (GET /runs/{trace_id}/tree), by their
// parent_trace_id, from the events the runtime really emits.
func TestSpawnTree(t *testing.T) {
	s := &script{fn: spawner(map[string]string{"boss": `{"agents":[
		{"name":"alpha","instructions":"child alpha","input":1},
		{"name":"beta","instructions":"child beta","input":2}]}`})}
	mem := memevents.New(eventstore.Retention{})
	t.Cleanup(func() { _ = mem.Close() })
	store := svc.EmitterFunc(func(ev svc.RuntimeEvent) { _ = mem.Write(context.Background(), []svc.RuntimeEvent{ev}) })
	rt := newRuntime(t, svc.Options{}, store, s.registry(), boss(nil))
	res, err := rt.Run(context.Background(), "boss", svc.TaskSpec{Input: json.RawMessage(`"go"`), RequestID: "tree-boss"})
	if err != nil || !res.Success {
		t.Fatalf("run: %+v, %v", res, err)
	}
	tree, err := mem.Tree(context.Background(), "tree-boss")
	if err != nil {
		t.Fatal(err)
	}
	if tree.Root == nil || len(tree.Root.Children) != 1 {
		t.Fatalf("root = %+v, want one invocation (boss)", tree.Root)
	}
	bossNode := tree.Root.Children[0]
	children := map[string]*svc.TreeNode{}
	var tools int
	for _, c := range bossNode.Children {
		switch c.Kind {
		case "run":
			children[c.Name] = c
		case "tool":
			tools++
		}
	}
	if bossNode.Name != "boss" || tools != 1 || len(children) != 2 || children["alpha"] == nil || children["beta"] == nil {
		t.Fatalf("boss node children: %d tools, runs %v; want the spawn_agents call and the runs of alpha and beta", tools, children)
	}
	for name, c := range children {
		if c.TraceID == "tree-boss" || c.Status != "completed" || len(c.Children) != 1 || c.Children[0].Name != name {
			t.Errorf("child run %s = %+v, want its own trace, completed, with its invocation", name, c)
		}
	}
}

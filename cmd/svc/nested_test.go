package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/internal/servertest"
	"github.com/svc-dev/svc/internal/testutil"
)

// Issue 12 part 7 with real processes: `svc worker start --dispatch-nested`
// sends the spawn_agents children of the tasks it runs back on the broker
// (a real redis-server), with depth, token cap, cancellation and trace
// carried across. The test model's call_tools and tool_arguments make a
// test:echo parent call spawn_agents with the children each test wants.

// nestedFleetSpecs: parent spawns child; parent2 spawns middle, which
// spawns leaf (depth 2: refused, max_spawn_depth is 1); parent3 spawns
// hungry, which spends 200 tokens; parent4 spawns sleepy, which answers
// after ten minutes; parent5 spawns helper, a new agent it describes
// (name and instructions). Team crew's coordinator lead delegates to
// researcher. Worker "w-parents" takes the parents, "w-children" the
// rest.
var nestedFleetSpecs = map[string]string{
	"runtime.yaml":        "version: 1\ntimeout_seconds: 120\nmax_spawn_depth: 1\n",
	"agents/parent.yaml":  spawner("parent", "child", `{from: parent}`),
	"agents/parent2.yaml": spawner("parent2", "middle", `{from: parent2}`),
	"agents/middle.yaml":  spawner("middle", "leaf", `{from: middle}`),
	"agents/parent3.yaml": spawner("parent3", "hungry", `{from: parent3}`),
	"agents/parent4.yaml": spawner("parent4", "sleepy", `{from: parent4}`),
	"agents/child.yaml":   "version: 1\nname: child\nmodel: test:echo\nmodel_settings: {tokens: 5}\n",
	"agents/leaf.yaml":    "version: 1\nname: leaf\nmodel: test:echo\n",
	"agents/hungry.yaml":  "version: 1\nname: hungry\nmodel: test:echo\nmodel_settings: {tokens: 200}\n",
	"agents/sleepy.yaml":  "version: 1\nname: sleepy\nmodel: test:echo\nmodel_settings: {latency_ms: 600000}\n",
	"agents/parent5.yaml": "version: 1\nname: parent5\nmodel: test:echo\nbuiltin_tools: [spawn_agents]\nmodel_settings:\n" +
		"  call_tools: [spawn_agents]\n  tool_arguments:\n    spawn_agents: {agents: [{name: helper, instructions: help, input: {from: parent5}}]}\n",
	"agents/lead.yaml": "version: 1\nname: lead\nmodel: test:echo\nmodel_settings:\n  call_tools: [delegate]\n" +
		"  tool_arguments: {delegate: {target: researcher, input: {q: 1}}}\n",
	"agents/researcher.yaml": "version: 1\nname: researcher\nmodel: test:echo\n",
	"groups/crew.yaml":       "version: 1\nname: crew\nkind: team\ncoordinator: lead\ndelegates: [researcher]\n",
}

// spawner is an agent that calls spawn_agents once, for one child with
// input, then answers {"echo": input, "tools": {"spawn_agents": results}};
// each of its model calls uses 10 tokens.
func spawner(name, child, input string) string {
	return fmt.Sprintf("version: 1\nname: %s\nmodel: test:echo\nbuiltin_tools: [spawn_agents]\nmodel_settings:\n"+
		"  tokens: 10\n  call_tools: [spawn_agents]\n  tool_arguments:\n    spawn_agents: {agents: [{name: %s, input: %s}]}\n",
		name, child, input)
}

const (
	nestedParents  = "parent,parent2,parent3,parent4,parent5"
	nestedChildren = "child,middle,leaf,hungry,sleepy,researcher"
)

// nestedLog is a JSON log line of a process: an event of the log emitter.
type nestedLog struct {
	Msg           string  `json:"msg"`
	Agent         string  `json:"agent"`
	TaskID        string  `json:"task_id"`
	TraceID       string  `json:"trace_id"`
	ParentTraceID string  `json:"parent_trace_id"`
	Limit         float64 `json:"limit"`
	Depth         float64 `json:"depth"`
	Reason        string  `json:"reason"`
}

// agentLogs are the events of type msg for agent that the process logged.
func agentLogs(p *fleetProc, msg, agent string) []nestedLog {
	var out []nestedLog
	for _, line := range strings.Split(p.stderr.String(), "\n") {
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var ev nestedLog
		if json.Unmarshal([]byte(line), &ev) == nil && ev.Msg == msg && ev.Agent == agent {
			out = append(out, ev)
		}
	}
	return out
}

// nestedFleet is a serve node (--publish-events, with its event store)
// and its two workers, over one redis-server.
type nestedFleet struct {
	serve, parents, children *fleetProc
	c                        *fleetClient
}

func startNestedFleet(t *testing.T, dispatchNested bool) *nestedFleet {
	t.Helper()
	specs := writeSpecs(t, nestedFleetSpecs)
	url := servertest.Redis(t)
	b := fleetBroker{serveArgs: []string{"--broker", url}, workerURL: url}
	f := &nestedFleet{serve: startFleetServe(t, "serve", specs, filepath.Join(t.TempDir(), "serve"), b, "--publish-events")}
	worker := func(name, agents string) *fleetProc {
		args := []string{"worker", "start", "--broker", url, "--specs", specs, "--agents", agents, "--ack-wait", "2s",
			"--heartbeat-seconds", "1", "--log-format", "json", "--runtime-id", name, "--concurrency", "4"}
		if dispatchNested {
			args = append(args, "--dispatch-nested")
		}
		p := startFleetProc(t, name, args...)
		p.waitLog(t, regexp.MustCompile(`"msg":"worker_started"`))
		return p
	}
	f.parents = worker("w-parents", nestedParents)
	f.children = worker("w-children", nestedChildren)
	f.c = newFleetClient(t, f.serve.url)
	// Both workers announced to the serve node (a task for an agent no
	// worker serves would wait for its deadline).
	testutil.Within(t, fleetWait, "both workers healthy on the serve node", func() bool {
		st := runtimeStats(t, f.c)
		p, ok1 := workerIn(st, "w-parents")
		c, ok2 := workerIn(st, "w-children")
		return ok1 && ok2 && p.Status == svc.WorkerHealthy && c.Status == svc.WorkerHealthy
	})
	return f
}

// spawnResult is one entry of spawn_agents' result.
type spawnResult struct {
	Name    string          `json:"name"`
	Success bool            `json:"success"`
	Output  json.RawMessage `json:"output"`
	Error   *svc.ErrorInfo  `json:"error"`
}

// spawnedBy decodes the one child's result from a spawner's answer.
func spawnedBy(t *testing.T, output json.RawMessage) spawnResult {
	t.Helper()
	var out struct {
		Tools struct {
			SpawnAgents []spawnResult `json:"spawn_agents"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(output, &out); err != nil || len(out.Tools.SpawnAgents) != 1 {
		t.Fatalf("spawner's output %s: %v; want one spawn_agents result", output, err)
	}
	return out.Tools.SpawnAgents[0]
}

// run runs agent on the serve node and returns its result.
func (f *nestedFleet) run(t *testing.T, agent, body string) svc.AgentResult {
	t.Helper()
	code, b := f.c.must(http.MethodPost, "/agents/"+agent+"/run", body)
	var res svc.AgentResult
	if code != http.StatusOK || json.Unmarshal(b, &res) != nil || !res.Success {
		t.Fatalf("run %s: %d %s", agent, code, b)
	}
	return res
}

// storedEvents are the serve node's stored events of type typ for agent.
func (f *nestedFleet) storedEvents(t *testing.T, typ svc.EventType, agent string) []svc.RuntimeEvent {
	t.Helper()
	code, b := f.c.must(http.MethodGet, "/events?limit=1000&event_type="+string(typ), "")
	var evs []svc.RuntimeEvent
	if code != http.StatusOK || json.Unmarshal(b, &evs) != nil {
		t.Fatalf("GET /events: %d %s", code, b)
	}
	var out []svc.RuntimeEvent
	for _, ev := range evs {
		if ev.AgentName == agent {
			out = append(out, ev)
		}
	}
	return out
}

// TestNestedRunsOverBroker: serve, a worker taking the parents and one
// taking the children, both with --dispatch-nested.
func TestNestedRunsOverBroker(t *testing.T) {
	t.Parallel()
	f := startNestedFleet(t, true)

	t.Run("child dispatched to the other worker", func(t *testing.T) {
		res := f.run(t, "parent", `{"id":"p1","input":"go"}`)
		kid := spawnedBy(t, res.Output)
		if kid.Name != "child" || !kid.Success || string(kid.Output) != `{"from":"parent"}` {
			t.Fatalf("child = %+v (%s)", kid, kid.Output)
		}
		trace := res.Metadata.TraceID
		// The child ran on w-children (the worker that takes it), under its
		// own trace, with the parent's as parent_trace_id; w-parents, where
		// the parent ran, dispatched it and did not run it.
		testutil.Within(t, fleetWait, "w-children to log the child's agent_completed", func() bool {
			return len(agentLogs(f.children, "agent_completed", "child")) == 1
		})
		done := agentLogs(f.children, "agent_completed", "child")[0]
		if done.ParentTraceID != trace || done.TraceID == trace || done.TraceID == "" {
			t.Errorf("child's agent_completed on w-children = %+v; parent's trace %s", done, trace)
		}
		if evs := agentLogs(f.parents, "agent_spawned", "child"); len(evs) != 0 {
			t.Errorf("w-parents ran the child: %+v", evs)
		}
		disp := agentLogs(f.parents, "agent_dispatched", "child")
		if len(disp) != 1 || disp[0].ParentTraceID != trace || disp[0].TaskID != done.TaskID {
			t.Errorf("w-parents' agent_dispatched of the child = %+v; want one, of task %s under trace %s", disp, done.TaskID, trace)
		}
		if evs := agentLogs(f.children, "agent_completed", "parent"); len(evs) != 0 {
			t.Errorf("w-children ran the parent: %+v", evs)
		}

		// The serve node (--publish-events) has the whole tree: the child's
		// dispatch and its run, relayed from two workers, below the parent.
		testutil.Within(t, fleetWait, "the serve node's events of the child", func() bool {
			d := f.storedEvents(t, svc.EventAgentDispatched, "child")
			c := f.storedEvents(t, svc.EventAgentCompleted, "child")
			return len(d) == 1 && len(c) == 1 && d[0].ParentTraceID == trace && c[0].ParentTraceID == trace &&
				c[0].Payload["backend"] == "broker:redis"
		})
		testutil.Within(t, fleetWait, "the child below the parent in /runs/{trace_id}/tree", func() bool {
			code, b := f.c.must(http.MethodGet, "/runs/"+trace+"/tree", "")
			var tree svc.EventTree
			if code != http.StatusOK || json.Unmarshal(b, &tree) != nil || tree.Root == nil {
				return false
			}
			return findAgent(tree.Root, "parent", func(n *svc.TreeNode) bool {
				return findAgent(n, "child", func(c *svc.TreeNode) bool { return c.Status == "completed" }) != nil
			}) != nil
		})
	})

	t.Run("a team's delegate with tool_arguments", func(t *testing.T) {
		// The coordinator runs on the serve node (it gets the delegate tool
		// for the run); the delegate it calls, with the arguments the spec
		// gives, runs on w-children, in the team's trace.
		// (A group with one terminal node answers with that node's result.)
		code, b := f.c.must(http.MethodPost, "/groups/crew/run", `{"input":"go"}`)
		var res svc.AgentResult
		if code != http.StatusOK || json.Unmarshal(b, &res) != nil || !res.Success || res.AgentName != "lead" {
			t.Fatalf("run crew: %d %s", code, b)
		}
		var out struct {
			Tools struct {
				Delegate struct {
					Success bool            `json:"success"`
					Output  json.RawMessage `json:"output"`
				} `json:"delegate"`
			} `json:"tools"`
		}
		if json.Unmarshal(res.Output, &out) != nil || !out.Tools.Delegate.Success || string(out.Tools.Delegate.Output) != `{"q":1}` {
			t.Fatalf("lead's output = %s", res.Output)
		}
		testutil.Within(t, fleetWait, "w-children to log researcher's agent_completed", func() bool {
			evs := agentLogs(f.children, "agent_completed", "researcher")
			return len(evs) == 1 && evs[0].TraceID == res.Metadata.TraceID
		})
		if evs := agentLogs(f.parents, "agent_spawned", "researcher"); len(evs) != 0 {
			t.Errorf("w-parents ran researcher: %+v", evs)
		}
	})

	t.Run("a derived child stays on the parent's worker", func(t *testing.T) {
		// helper is a new agent parent5 describes (a name with
		// instructions): no worker has it, so it runs where parent5 runs.
		// (It inherits parent5's settings and spawns helper in turn, one
		// level too deep: refused.)
		res := f.run(t, "parent5", `{"input":"go"}`)
		helper := spawnedBy(t, res.Output)
		if helper.Name != "helper" || !helper.Success {
			t.Fatalf("helper = %+v (%s)", helper, helper.Output)
		}
		// The worker's log is buffered: its line may come after the
		// result has reached the publisher.
		testutil.Within(t, fleetWait, "w-parents to log helper's agent_completed", func() bool {
			return len(agentLogs(f.parents, "agent_completed", "helper")) == 1
		})
		if evs := agentLogs(f.parents, "agent_dispatched", "helper"); len(evs) != 0 {
			t.Errorf("w-parents dispatched helper: %+v", evs)
		}
	})

	t.Run("depth limit across the broker", func(t *testing.T) {
		// parent2 (depth 0, w-parents) → middle (depth 1, w-children, a
		// task of its own there) → leaf (depth 2): refused, because the
		// depth came with middle's task.
		res := f.run(t, "parent2", `{"input":"go"}`)
		middle := spawnedBy(t, res.Output)
		if middle.Name != "middle" || !middle.Success {
			t.Fatalf("middle = %+v (%s)", middle, middle.Output)
		}
		leaf := spawnedBy(t, middle.Output)
		if leaf.Name != "leaf" || leaf.Success || leaf.Error == nil || leaf.Error.Type != string(svc.KindDepthLimit) {
			t.Fatalf("leaf = %+v, want a DepthLimitError", leaf)
		}
		if len(agentLogs(f.children, "agent_completed", "middle")) != 1 {
			t.Error("middle did not run on w-children")
		}
		if ev := agentLogs(f.children, "depth_limit_exceeded", "leaf"); len(ev) != 1 || ev[0].Depth != 2 {
			t.Errorf("w-children's depth_limit_exceeded of leaf = %+v, want one at depth 2", ev)
		}
		for _, p := range []*fleetProc{f.parents, f.children} {
			if evs := agentLogs(p, "agent_spawned", "leaf"); len(evs) != 0 {
				t.Errorf("%s ran leaf: %+v", p.name, evs)
			}
		}
	})

	t.Run("token cap across the broker", func(t *testing.T) {
		// The run's cap is 100. parent3's first call spends 10 on
		// w-parents; hungry's task carries the 90 left, and w-children
		// stops hungry there (it spent 200). The 200 come back with the
		// result and are charged to parent3's cap: its next call is
		// refused, and the run fails with the budget error.
		code, b := f.c.must(http.MethodPost, "/agents/parent3/run", `{"id":"capped","token_budget":100,"input":"go"}`)
		if code != http.StatusTooManyRequests || !strings.Contains(string(b), "BudgetExceededError") || !strings.Contains(string(b), "used 210 of 100") {
			t.Fatalf("parent3 with token_budget 100: %d %s; want 429, a BudgetExceededError, 210 used", code, b)
		}
		testutil.Within(t, fleetWait, "w-children's budget_exceeded of hungry at 90", func() bool {
			evs := agentLogs(f.children, "budget_exceeded", "hungry")
			return len(evs) == 1 && evs[0].Limit == 90
		})
		if evs := agentLogs(f.children, "agent_failed", "hungry"); len(evs) != 1 {
			t.Errorf("w-children's agent_failed of hungry = %+v, want one", evs)
		}
	})

	t.Run("cancel reaches the child on the other worker", func(t *testing.T) {
		run := f.c.mustSubmit("parent4", "slow-parent", `"go"`)
		inFlight := func() (parents, children int64) {
			st := runtimeStats(t, f.c)
			p, _ := workerIn(st, "w-parents")
			c, _ := workerIn(st, "w-children")
			return p.InFlight, c.InFlight
		}
		testutil.Within(t, fleetWait, "sleepy to run on w-children, its parent waiting on w-parents", func() bool {
			p, c := inFlight()
			return len(agentLogs(f.children, "agent_spawned", "sleepy")) == 1 && p == 1 && c == 1
		})
		if code, b := f.c.must(http.MethodPost, "/runs/"+run+"/cancel", ""); code != http.StatusNoContent {
			t.Fatalf("cancel: %d %s", code, b)
		}
		f.c.waitState(run, "cancelled")
		// sleepy (ten minutes of latency) stops on w-children long before
		// its answer: nothing of the run is left in flight on either worker.
		testutil.Within(t, fleetWait, "no task in flight on the workers", func() bool {
			p, c := inFlight()
			return p == 0 && c == 0
		})
		if evs := agentLogs(f.children, "agent_completed", "sleepy"); len(evs) != 0 {
			t.Errorf("sleepy completed: %+v", evs)
		}
		// A run the fleet takes afterwards runs as usual.
		res := f.run(t, "parent", `{"input":"after"}`)
		if kid := spawnedBy(t, res.Output); !kid.Success {
			t.Errorf("child after the cancel = %+v", kid)
		}
	})
}

// TestNestedRunsStayOnWorker: without --dispatch-nested (the default), the
// child runs in the runtime of the worker that runs its parent, though
// the other worker is the one that takes the child's agent.
func TestNestedRunsStayOnWorker(t *testing.T) {
	f := startNestedFleet(t, false)
	res := f.run(t, "parent", `{"id":"p1","input":"go"}`)
	kid := spawnedBy(t, res.Output)
	if kid.Name != "child" || !kid.Success || string(kid.Output) != `{"from":"parent"}` {
		t.Fatalf("child = %+v (%s)", kid, kid.Output)
	}
	testutil.Within(t, fleetWait, "w-parents to log the child's agent_completed", func() bool {
		return len(agentLogs(f.parents, "agent_completed", "child")) == 1
	})
	if evs := agentLogs(f.parents, "agent_completed", "child"); evs[0].ParentTraceID != res.Metadata.TraceID {
		t.Errorf("child's agent_completed = %+v; parent's trace %s", evs[0], res.Metadata.TraceID)
	}
	if evs := agentLogs(f.parents, "agent_dispatched", "child"); len(evs) != 0 {
		t.Errorf("w-parents dispatched the child: %+v", evs)
	}
	for _, msg := range []string{"agent_spawned", "agent_completed"} {
		if evs := agentLogs(f.children, msg, "child"); len(evs) != 0 {
			t.Errorf("w-children logged %s of the child: %+v", msg, evs)
		}
	}
}

// findAgent returns the first agent node named name in the tree under n
// (n included), depth first, that meets ok.
func findAgent(n *svc.TreeNode, name string, ok func(*svc.TreeNode) bool) *svc.TreeNode {
	if n.Name == name && n.Kind == "agent" && ok(n) {
		return n
	}
	for _, c := range n.Children {
		if f := findAgent(c, name, ok); f != nil {
			return f
		}
	}
	return nil
}

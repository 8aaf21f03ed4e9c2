package app

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/http/client"
	"github.com/svc-dev/svc/internal/testutil"
	"github.com/svc-dev/svc/model"
)

// Nested runs over the broker (WorkerOptions.DispatchNested): a fleet of a
// publisher and two workers in one process, each with a model of its own
// that records which agents it ran, so a test sees on which worker a
// spawned child ran.

// nestedSpecs are the agents of the fleet: parent spawns child (with the
// parent's input), parent2 spawns middle, which spawns leaf. Depth limit 1:
// leaf, at depth 2, is refused.
var nestedSpecs = map[string]string{
	"runtime.yaml":       "version: 1\ntimeout_seconds: 30\nmax_spawn_depth: 1\n",
	"agents/parent.yaml": "version: 1\nname: parent\nmodel: script:parent\ninstructions: parent\nbuiltin_tools: [spawn_agents]\n",
	"agents/parent2.yaml": "version: 1\nname: parent2\nmodel: script:parent2\ninstructions: parent2\n" +
		"builtin_tools: [spawn_agents]\n",
	"agents/middle.yaml": "version: 1\nname: middle\nmodel: script:middle\ninstructions: middle\nbuiltin_tools: [spawn_agents]\n",
	"agents/child.yaml":  "version: 1\nname: child\nmodel: script:child\ninstructions: child\n",
	"agents/leaf.yaml":   "version: 1\nname: leaf\nmodel: script:leaf\ninstructions: leaf\n",
}

func writeNestedSpecs(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range nestedSpecs {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// nestedModel is the scripted model of one process of the fleet.
type nestedModel struct {
	label   string
	mu      sync.Mutex
	ran     []string // the agents whose model calls it answered, in order
	blocked chan struct{}
	ended   chan struct{}
}

func newNestedModel(label string) *nestedModel {
	return &nestedModel{label: label, blocked: make(chan struct{}, 8), ended: make(chan struct{}, 8)}
}

func (m *nestedModel) agents() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.ran)
}

var spawnOf = map[string]string{"parent": "child", "parent2": "middle", "middle": "leaf"}

func (m *nestedModel) registry() *model.Registry {
	reg := model.Default()
	reg.Register("script", func(name string) (svc.Model, error) {
		return svc.ModelFunc(func(ctx context.Context, req svc.ModelRequest) (svc.ModelResponse, error) {
			m.mu.Lock()
			m.ran = append(m.ran, name)
			m.mu.Unlock()
			input := json.RawMessage("null")
			for _, msg := range req.Messages {
				if msg.Role == svc.RoleUser {
					input = json.RawMessage(msg.Content)
					break
				}
			}
			if target, ok := spawnOf[name]; ok {
				for i := len(req.Messages) - 1; i >= 0; i-- {
					if msg := req.Messages[i]; msg.Role == svc.RoleTool {
						return svc.ModelResponse{Output: json.RawMessage(msg.Content), TokensUsed: 10}, nil
					}
				}
				args := `{"agents":[{"name":"` + target + `","input":` + string(input) + `}]}`
				return svc.ModelResponse{TokensUsed: 10,
					ToolCalls: []svc.ToolCall{{ID: "spawn-1", Name: "spawn_agents", Arguments: json.RawMessage(args)}}}, nil
			}
			var in struct {
				Tokens int64 `json:"tokens"`
				Block  bool  `json:"block"`
			}
			_ = json.Unmarshal(input, &in)
			if in.Block {
				m.blocked <- struct{}{}
				<-ctx.Done()
				m.ended <- struct{}{}
				return svc.ModelResponse{}, ctx.Err()
			}
			out, _ := json.Marshal(map[string]string{"agent": name, "ran_on": m.label})
			return svc.ModelResponse{Output: out, TokensUsed: max(in.Tokens, 1)}, nil
		}), nil
	})
	return reg
}

// nestedFleet is a publisher (with PublishEvents and an event store) and
// two workers: w1 takes parent and parent2, w2 takes child, middle and
// leaf.
type nestedFleet struct {
	c      *client.Client
	w1, w2 *nestedModel
	pub    *nestedModel
}

func startNestedFleet(t *testing.T, broker string, nested bool) *nestedFleet {
	t.Helper()
	specs := writeNestedSpecs(t)
	f := &nestedFleet{w1: newNestedModel("w1"), w2: newNestedModel("w2"), pub: newNestedModel("publisher")}
	o := Options{SpecsDir: specs, DataDir: t.TempDir(), Store: "memory", Events: "memory", Broker: broker,
		PublishEvents: true, Models: f.pub.registry(), Logger: zap.NewNop()}
	if broker == "embedded" {
		o.NATSListen = freeAddr(t)
	}
	pub, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shutdown(t, pub) })
	for _, w := range []struct {
		id     string
		agents []string
		m      *nestedModel
	}{{"w1", []string{"parent", "parent2"}, f.w1}, {"w2", []string{"child", "middle", "leaf"}, f.w2}} {
		wk, err := New(Options{SpecsDir: specs, Store: "memory", Events: "none", Broker: pub.BrokerURL(), Models: w.m.registry(),
			Worker: &WorkerOptions{Agents: w.agents, Heartbeat: -1, RuntimeID: w.id, DispatchNested: nested},
			Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		if err := wk.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { shutdown(t, wk) }) // before the publisher's (cleanups run last first)
	}
	c, err := client.New(pub.URL(), client.WithHTTPClient(httpClient))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	f.c = c
	return f
}

// events returns the publisher's stored events of type typ for agent.
func (f *nestedFleet) events(t *testing.T, typ svc.EventType, agent string) []svc.RuntimeEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	evs, err := f.c.Events(ctx, svc.EventQuery{EventType: typ, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var out []svc.RuntimeEvent
	for _, ev := range evs {
		if ev.AgentName == agent {
			out = append(out, ev)
		}
	}
	return out
}

// spawned decodes the spawn_agents results a parent answered with.
func spawned(t *testing.T, res svc.AgentResult) []struct {
	Name    string          `json:"name"`
	Success bool            `json:"success"`
	Output  json.RawMessage `json:"output"`
	Error   *svc.ErrorInfo  `json:"error"`
} {
	t.Helper()
	var out []struct {
		Name    string          `json:"name"`
		Success bool            `json:"success"`
		Output  json.RawMessage `json:"output"`
		Error   *svc.ErrorInfo  `json:"error"`
	}
	if !res.Success || json.Unmarshal(res.Output, &out) != nil || len(out) != 1 {
		t.Fatalf("parent result = %+v (%s)", res, res.Output)
	}
	return out
}

// TestNestedRunsOverBroker: with DispatchNested, a child spawned by an
// agent on worker 1 runs on worker 2 (the one that takes its agent), one
// level deeper, under the parent's trace; the depth limit, the parent's
// token cap and a cancel of the parent's run hold across the hop.
func TestNestedRunsOverBroker(t *testing.T) {
	f := startNestedFleet(t, "embedded", true)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	t.Run("child runs on the other worker", func(t *testing.T) {
		res, err := f.c.Run(ctx, "parent", svc.TaskSpec{ID: "p1", Input: json.RawMessage(`{"tokens":5}`)})
		if err != nil {
			t.Fatal(err)
		}
		kids := spawned(t, res)
		if !kids[0].Success || string(kids[0].Output) != `{"agent":"child","ran_on":"w2"}` {
			t.Fatalf("child = %+v (%s)", kids[0], kids[0].Output)
		}
		if slices.Contains(f.w1.agents(), "child") || !slices.Contains(f.w2.agents(), "child") {
			t.Fatalf("w1 ran %v, w2 ran %v: the child should run on w2 only", f.w1.agents(), f.w2.agents())
		}
		// Worker 2 relays the child's events to the publisher of the
		// outermost task, under the parent's trace, one level deeper.
		var done svc.RuntimeEvent
		testutil.Eventually(t, "the child's agent_completed at the publisher", func() bool {
			evs := f.events(t, svc.EventAgentCompleted, "child")
			if len(evs) == 0 {
				return false
			}
			done = evs[len(evs)-1]
			return true
		})
		if done.ParentTraceID != res.Metadata.TraceID || done.TraceID == res.Metadata.TraceID ||
			done.Payload["backend"] != "broker:nats" {
			t.Errorf("child's agent_completed = %+v; parent trace %s", done, res.Metadata.TraceID)
		}
		testutil.Eventually(t, "the child's dispatch from w1 at the publisher", func() bool {
			evs := f.events(t, svc.EventAgentDispatched, "child")
			return len(evs) > 0 && evs[len(evs)-1].ParentTraceID == res.Metadata.TraceID
		})
		// The run's tree on the publisher has the child, which ran two
		// hops away, below the parent.
		testutil.Eventually(t, "the child below the parent in the run's tree", func() bool {
			tree, err := f.c.Tree(ctx, res.Metadata.TraceID)
			if err != nil || tree.Root == nil {
				return false
			}
			// (The dispatch and the worker's invocation of an agent are two
			// nodes; the worker's has the tool calls.)
			return findNode(tree.Root, "parent", func(n *svc.TreeNode) bool {
				return findNode(n, "child", nil) != nil
			}) != nil
		})
	})

	t.Run("depth limit across hops", func(t *testing.T) {
		res, err := f.c.Run(ctx, "parent2", svc.TaskSpec{Input: json.RawMessage(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		// parent2 (depth 0, w1) → middle (depth 1, w2) → leaf (depth 2):
		// refused, though w2 saw middle's task as its own top-level run.
		kids := spawned(t, res)
		var leaf []struct {
			Name    string         `json:"name"`
			Success bool           `json:"success"`
			Error   *svc.ErrorInfo `json:"error"`
		}
		if !kids[0].Success || json.Unmarshal(kids[0].Output, &leaf) != nil || len(leaf) != 1 {
			t.Fatalf("middle = %+v (%s)", kids[0], kids[0].Output)
		}
		if leaf[0].Success || leaf[0].Error == nil || leaf[0].Error.Type != string(svc.KindDepthLimit) {
			t.Fatalf("leaf = %+v, want a DepthLimitError", leaf[0])
		}
		if !slices.Contains(f.w2.agents(), "middle") || slices.Contains(f.w1.agents(), "leaf") || slices.Contains(f.w2.agents(), "leaf") {
			t.Fatalf("w1 ran %v, w2 ran %v", f.w1.agents(), f.w2.agents())
		}
		testutil.Eventually(t, "depth_limit_exceeded relayed from w2", func() bool {
			evs := f.events(t, svc.EventDepthLimitExceeded, "leaf")
			return len(evs) == 1 && evs[0].Payload["depth"] == 2.0
		})
	})

	t.Run("token cap across hops", func(t *testing.T) {
		// The run's cap is 100: the parent's first call takes 10 on w1, so
		// the child on w2 may spend 90; it spends 200 and is stopped
		// there, and the 200 are charged back to the parent's cap on w1.
		// The parent's next call is refused on w1: its run is rejected.
		_, err := f.c.Run(ctx, "parent", svc.TaskSpec{ID: "capped", TokenBudget: 100, Input: json.RawMessage(`{"tokens":200}`)})
		if svc.KindOf(err) != svc.KindBudgetExceeded || !strings.Contains(err.Error(), "used 210 of 100") {
			t.Fatalf("parent: %v, want a BudgetExceededError with the child's 200 tokens charged", err)
		}
		testutil.Eventually(t, "the child's budget_exceeded at 90 from w2", func() bool {
			for _, ev := range f.events(t, svc.EventBudgetExceeded, "child") {
				if ev.Payload["limit"] == 90.0 && ev.Payload["scope"] == "run" {
					return true
				}
			}
			return false
		})
		testutil.Eventually(t, "the parent's cap charged with the child's tokens on w1", func() bool {
			for _, ev := range f.events(t, svc.EventBudgetExceeded, "child") {
				if used, _ := ev.Payload["used"].(float64); ev.Payload["limit"] == 100.0 && used >= 210 {
					return true
				}
			}
			return false
		})
	})

	t.Run("cancel reaches the child on the other worker", func(t *testing.T) {
		id, err := f.c.Submit(ctx, svc.SubmitRequest{Target: "parent", Task: svc.TaskSpec{Input: json.RawMessage(`{"block":true}`)}})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-f.w2.blocked:
		case <-ctx.Done():
			t.Fatal("the child never started on w2")
		}
		if err := f.c.CancelRun(ctx, id); err != nil {
			t.Fatal(err)
		}
		select {
		case <-f.w2.ended:
		case <-ctx.Done():
			t.Fatal("the child on w2 was not cancelled")
		}
		testutil.Eventually(t, "the run cancelled", func() bool {
			st, err := f.c.RunStatus(ctx, id)
			return err == nil && st.State == svc.RunCancelled
		})
	})
}

// TestNestedRunsStayOnWorker: without DispatchNested (the default), a
// child runs in the runtime of the worker whose task spawned it, though
// another worker takes the child's agent.
func TestNestedRunsStayOnWorker(t *testing.T) {
	f := startNestedFleet(t, "memory://app-nested-default", false)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := f.c.Run(ctx, "parent", svc.TaskSpec{Input: json.RawMessage(`{"tokens":5}`)})
	if err != nil {
		t.Fatal(err)
	}
	kids := spawned(t, res)
	if !kids[0].Success || !strings.Contains(string(kids[0].Output), `"ran_on":"w1"`) {
		t.Fatalf("child = %+v (%s)", kids[0], kids[0].Output)
	}
	if slices.Contains(f.w2.agents(), "child") {
		t.Fatalf("w2 ran %v: the child should stay on w1", f.w2.agents())
	}
}

// findNode returns the first agent node named name in the tree under n (n
// included), depth first, that meets ok (any, when nil).
func findNode(n *svc.TreeNode, name string, ok func(*svc.TreeNode) bool) *svc.TreeNode {
	if n.Name == name && n.Kind == "agent" && (ok == nil || ok(n)) {
		return n
	}
	for _, c := range n.Children {
		if f := findNode(c, name, ok); f != nil {
			return f
		}
	}
	return nil
}

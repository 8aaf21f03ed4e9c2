package registry_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/agent"
	"github.com/svc-dev/svc/model"
	"github.com/svc-dev/svc/supervisor/registry"
	"github.com/svc-dev/svc/tools"
)

// delegate stands in for the runtime's delegate tool.
type delegate struct{ team string }

func (delegate) Name() string                 { return "delegate" }
func (delegate) Description() string          { return "hand a task over" }
func (delegate) InputSchema() json.RawMessage { return json.RawMessage(`{"type":"object"}`) }
func (delegate) Access() svc.Access           { return svc.AccessRead }
func (delegate) Call(context.Context, json.RawMessage) (json.RawMessage, error) {
	return json.RawMessage(`null`), nil
}

func newRegistry(t *testing.T, onReplace func(old, next *registry.Snapshot)) *registry.Registry {
	t.Helper()
	models := model.Default()
	return registry.New(registry.Config{
		Compile:   func(a svc.Agent) (*agent.Compiled, error) { return agent.Compile(a, models) },
		Delegate:  func(g svc.Group) svc.Tool { return &delegate{team: g.Name} },
		OnReplace: onReplace,
	})
}

func echo(name string) svc.Agent { return svc.Agent{Name: name, Model: "test:echo"} }

func pipeline(name string, agents ...string) svc.Group {
	g := svc.Group{Name: name}
	for i, a := range agents {
		g.Nodes = append(g.Nodes, svc.GroupNode{Name: a, Agent: a})
		if i > 0 {
			g.Edges = append(g.Edges, svc.GroupEdge{From: agents[i-1], To: a})
		}
	}
	return g
}

func wantKind(t *testing.T, err error, kind svc.Kind, msg string) {
	t.Helper()
	if svc.KindOf(err) != kind {
		t.Fatalf("error %v: kind %v, want %v", err, svc.KindOf(err), kind)
	}
	if !strings.Contains(err.Error(), msg) {
		t.Fatalf("error %q does not say %q", err, msg)
	}
}

func TestRegisterAndLookup(t *testing.T) {
	r := newRegistry(t, nil)
	if err := r.Register(echo("b"), echo("a")); err != nil {
		t.Fatal(err)
	}
	if err := r.RegisterGroups(pipeline("ab", "a", "b")); err != nil {
		t.Fatal(err)
	}
	s := r.Load()
	if got := s.AgentNames(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("agent names %q, want sorted a, b", got)
	}
	if got := s.GroupNames(); !slices.Equal(got, []string{"ab"}) {
		t.Fatalf("group names %q", got)
	}
	if c, err := s.LookupAgent("a"); err != nil || c.Def.Name != "a" {
		t.Fatalf("LookupAgent(a) = %v, %v", c, err)
	}
	if g, err := s.LookupGroup("ab"); err != nil || g.Graph == nil || g.Team != nil {
		t.Fatalf("LookupGroup(ab) = %+v, %v", g, err)
	}

	// A name registered twice is refused and changes nothing.
	err := r.Register(echo("c"), echo("a"))
	wantKind(t, err, svc.KindSpecValidation, "agent a is already registered")
	if _, ok := r.Load().Agent("c"); ok {
		t.Fatal("a refused Register added an agent")
	}
	err = r.RegisterGroups(pipeline("ab", "a"))
	wantKind(t, err, svc.KindSpecValidation, "group ab is defined twice")
	// A group over an unknown agent is a topology error.
	err = r.RegisterGroups(pipeline("ax", "a", "x"))
	if svc.KindOf(err) != svc.KindTopology && svc.KindOf(err) != svc.KindSpecValidation {
		t.Fatalf("group over an unknown agent: %v", err)
	}
	if _, ok := r.Load().Group("ax"); ok {
		t.Fatal("a refused group was added")
	}
}

// Unknown names say what to run instead.
func TestUnknownNames(t *testing.T) {
	r := newRegistry(t, nil)
	if err := r.Register(echo("a"), echo("b")); err != nil {
		t.Fatal(err)
	}
	if err := r.RegisterGroups(pipeline("g", "a", "b")); err != nil {
		t.Fatal(err)
	}
	s := r.Load()
	_, err := s.LookupAgent("g")
	wantKind(t, err, svc.KindRegistry, `unknown agent "g": g is a group: POST /groups/g/run`)
	_, err = s.LookupAgent("zz")
	wantKind(t, err, svc.KindRegistry, `unknown agent "zz" (registered agents: a, b)`)
	_, err = s.LookupGroup("a")
	wantKind(t, err, svc.KindRegistry, `unknown group "a": a is an agent: POST /agents/a/run`)
	_, err = s.LookupGroup("zz")
	wantKind(t, err, svc.KindRegistry, `unknown group "zz" (registered groups: g)`)

	for _, c := range []struct {
		name       string
		kind, want svc.TargetKind
	}{
		{"a", "", svc.TargetAgent},
		{"g", "", svc.TargetGroup},
		{"a", svc.TargetAgent, svc.TargetAgent},
	} {
		if got, err := s.Target(c.name, c.kind); err != nil || got != c.want {
			t.Errorf("Target(%q, %q) = %q, %v; want %q", c.name, c.kind, got, err, c.want)
		}
	}
	_, err = s.Target("g", svc.TargetAgent)
	wantKind(t, err, svc.KindRegistry, `g is a group: submit it with kind "group"`)
	_, err = s.Target("a", svc.TargetGroup)
	wantKind(t, err, svc.KindRegistry, `a is an agent: submit it with kind "agent"`)
	_, err = s.Target("zz", "")
	wantKind(t, err, svc.KindRegistry, `unknown target "zz" (registered agents: a, b; registered groups: g)`)
	_, err = s.Target("a", "tool")
	wantKind(t, err, svc.KindSpecValidation, `kind "tool": want agent or group`)

	// Long lists are cut.
	var many []svc.Agent
	for i := range 25 {
		many = append(many, echo("m"+strings.Repeat("x", i)))
	}
	if err := r.Register(many...); err != nil {
		t.Fatal(err)
	}
	_, err = r.Load().LookupAgent("nope")
	wantKind(t, err, svc.KindRegistry, "and 7 more")
}

// Replace swaps everything at once; a snapshot taken before keeps its
// definitions, and a Replace that fails changes nothing.
func TestReplace(t *testing.T) {
	var replaced [][2]*registry.Snapshot
	r := newRegistry(t, func(old, next *registry.Snapshot) { replaced = append(replaced, [2]*registry.Snapshot{old, next}) })
	if err := r.Register(echo("a")); err != nil {
		t.Fatal(err)
	}
	before := r.Load()
	if err := r.Replace([]svc.Agent{echo("b"), echo("c")}, []svc.Group{pipeline("bc", "b", "c")}); err != nil {
		t.Fatal(err)
	}
	after := r.Load()
	if _, ok := before.Agent("a"); !ok {
		t.Fatal("the old snapshot lost its agent")
	}
	if _, ok := after.Agent("a"); ok || !slices.Equal(after.AgentNames(), []string{"b", "c"}) {
		t.Fatalf("after Replace: agents %q", after.AgentNames())
	}
	if len(replaced) != 1 || replaced[0][0] != before || replaced[0][1] != after {
		t.Fatalf("OnReplace saw %v, want the old and the new snapshot once", replaced)
	}

	err := r.Replace([]svc.Agent{echo("d")}, []svc.Group{pipeline("dx", "d", "x")})
	if err == nil {
		t.Fatal("Replace with a group over an unknown agent succeeded")
	}
	if r.Load() != after || len(replaced) != 1 {
		t.Fatal("a failed Replace changed the registry")
	}
	err = r.Replace([]svc.Agent{echo("d"), {Name: "bad", Model: "nosuch:model"}}, nil)
	if err == nil || r.Load() != after {
		t.Fatalf("Replace with an agent that does not compile: %v, and the registry changed: %v", err, r.Load() != after)
	}
}

// A team's coordinator is compiled with the delegate tool, which the
// catalog lists as a builtin beside the agents' own tools.
func TestTeamAndCatalog(t *testing.T) {
	r := newRegistry(t, nil)
	now := tools.MustFunc("now", "the time", svc.AccessRead, func(context.Context, struct{}) (string, error) { return "noon", nil })
	boss := echo("boss")
	boss.Tools = []svc.Tool{now}
	if err := r.Register(boss, echo("w1"), echo("w2")); err != nil {
		t.Fatal(err)
	}
	team := svc.Group{Name: "crew", Kind: svc.GroupTeam, Coordinator: "boss", Delegates: []string{"w1", "w2"}}
	if err := r.RegisterGroups(team); err != nil {
		t.Fatal(err)
	}
	s := r.Load()
	g, _ := s.Group("crew")
	if g.Team == nil || g.Team.Tools["delegate"] == nil {
		t.Fatalf("team coordinator without the delegate tool: %+v", g.Team)
	}
	if c, _ := s.Agent("boss"); c.Tools["delegate"] != nil {
		t.Fatal("the registered agent got the team's delegate tool")
	}
	byName := map[string]svc.ToolDescriptor{}
	for _, d := range s.Tools([]registry.ServerTool{{Agent: "w1", Server: "fs", Tool: now}}) {
		byName[d.Name+"/"+d.Source] = d
	}
	if d := byName["delegate/builtin"]; !slices.Equal(d.Agents, []string{"boss"}) || d.Access != "read" {
		t.Errorf("delegate: %+v", d)
	}
	if d := byName["now/function"]; !slices.Equal(d.Agents, []string{"boss"}) {
		t.Errorf("now as a function tool: %+v", d)
	}
	if d := byName["now/mcp"]; d.Server != "fs" || !slices.Equal(d.Agents, []string{"w1"}) {
		t.Errorf("now as an MCP tool: %+v", d)
	}
	if len(byName) != 3 {
		t.Errorf("catalog %v, want three entries", byName)
	}
}

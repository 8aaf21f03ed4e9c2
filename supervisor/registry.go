package supervisor

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"sort"
	"strings"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/agent"
	"github.com/svc-dev/svc/group"
)

// registry is one immutable snapshot of the definitions: agents and the
// groups over them. Writers build a new snapshot and swap it in, so a run
// resolves every name it needs from the snapshot it started with.
type registry struct {
	byName     map[string]*agent.Compiled
	names      []string
	groups     map[string]*compiledGroup
	groupNames []string
}

// compiledGroup is a registered group: its checked graph, or for a team the
// coordinator compiled with its delegate tool.
type compiledGroup struct {
	def   svc.Group
	graph *group.Graph
	team  *agent.Compiled
}

func (r *registry) hasAgent(name string) bool { _, ok := r.byName[name]; return ok }

func (r *registry) withAgents(agents []*agent.Compiled) (*registry, error) {
	next := &registry{byName: maps.Clone(r.byName), groups: r.groups, groupNames: r.groupNames}
	for _, c := range agents {
		if _, dup := next.byName[c.Def.Name]; dup {
			return nil, svc.Errorf(svc.KindSpecValidation, "agent %s is already registered", c.Def.Name)
		}
		next.byName[c.Def.Name] = c
	}
	next.names = sortedKeys(next.byName)
	return next, nil
}

func sortedKeys[V any](m map[string]V) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Register compiles and adds agents. The runtime keeps its own copy of
// each definition; registering a name that exists is an error (use Replace).
func (rt *Runtime) Register(agents ...svc.Agent) error {
	rt.regMu.Lock()
	defer rt.regMu.Unlock()
	compiled, err := rt.compile(agents)
	if err != nil {
		return err
	}
	next, err := rt.agents.Load().withAgents(compiled)
	if err != nil {
		return err
	}
	rt.agents.Store(next)
	return nil
}

// RegisterGroups checks and adds groups over the registered agents.
func (rt *Runtime) RegisterGroups(groups ...svc.Group) error {
	rt.regMu.Lock()
	defer rt.regMu.Unlock()
	cur := rt.agents.Load()
	next := &registry{byName: cur.byName, names: cur.names, groups: maps.Clone(cur.groups)}
	if err := rt.addGroups(next, groups); err != nil {
		return err
	}
	rt.agents.Store(next)
	return nil
}

// addGroups compiles groups against next's agents and adds them to next.
func (rt *Runtime) addGroups(next *registry, groups []svc.Group) error {
	for _, g := range groups {
		if _, dup := next.groups[g.Name]; dup {
			return svc.Errorf(svc.KindSpecValidation, "group %s is defined twice", g.Name)
		}
		cg, err := rt.compileGroup(g, next)
		if err != nil {
			return err
		}
		next.groups[g.Name] = cg
	}
	next.groupNames = sortedKeys(next.groups)
	return nil
}

// Replace swaps the whole set of agents and groups atomically: runs in
// flight finish on the definitions they started with. On error nothing
// changes.
func (rt *Runtime) Replace(agents []svc.Agent, groups []svc.Group) error {
	rt.regMu.Lock()
	defer rt.regMu.Unlock()
	compiled, err := rt.compile(agents)
	if err != nil {
		return err
	}
	empty := &registry{byName: map[string]*agent.Compiled{}, groups: map[string]*compiledGroup{}}
	next, err := empty.withAgents(compiled)
	if err != nil {
		return err
	}
	next.groups = make(map[string]*compiledGroup, len(groups))
	if err := rt.addGroups(next, groups); err != nil {
		return err
	}
	old := rt.agents.Swap(next)
	rt.retireServers(old, next)
	return nil
}

func (rt *Runtime) compile(agents []svc.Agent) ([]*agent.Compiled, error) {
	out := make([]*agent.Compiled, 0, len(agents))
	for _, a := range agents {
		c, err := rt.compileAgent(a)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// compileAgent compiles a with what the runtime provides: its models, its
// prices and its builtin tools. Every agent the runtime runs is compiled
// here, spawned children included.
func (rt *Runtime) compileAgent(a svc.Agent) (*agent.Compiled, error) {
	return rt.compileAgentFor(a, a.Name)
}

// compileGroup checks g against the agents of reg; a team also gets its
// coordinator compiled with the delegate tool.
func (rt *Runtime) compileGroup(g svc.Group, reg *registry) (*compiledGroup, error) {
	gr, err := group.Compile(g, reg.hasAgent)
	if err != nil {
		return nil, err
	}
	cg := &compiledGroup{def: gr.Def, graph: gr}
	if gr.Def.EffectiveKind() != svc.GroupTeam {
		return cg, nil
	}
	coord := reg.byName[gr.Def.Coordinator].Def.Clone()
	coord.Tools = append(slices.Clone(coord.Tools), newDelegateTool(rt, gr.Def))
	team, err := rt.compileAgent(coord)
	if err != nil {
		var e *svc.Error
		if errors.As(err, &e) {
			return nil, &svc.Error{Kind: svc.KindTopology, Message: "group " + g.Name + ": coordinator: " + e.Message, Err: err}
		}
		return nil, err
	}
	cg.team = team
	return cg, nil
}

// Groups lists the registered group names, sorted.
func (rt *Runtime) Groups(context.Context) ([]string, error) {
	return slices.Clone(rt.agents.Load().groupNames), nil
}

func (rt *Runtime) lookupGroup(reg *registry, name string) (*compiledGroup, error) {
	g, ok := reg.groups[name]
	if !ok {
		return nil, &svc.Error{Kind: svc.KindRegistry, Message: reg.unknownGroup(name)}
	}
	return g, nil
}

// Group returns a copy of a registered group's definition.
func (rt *Runtime) Group(name string) (svc.Group, bool) {
	g, ok := rt.agents.Load().groups[name]
	if !ok {
		return svc.Group{}, false
	}
	return g.def.Clone(), true
}

// GroupTopology describes a registered group.
func (rt *Runtime) GroupTopology(_ context.Context, name string) (svc.Topology, error) {
	g, err := rt.lookupGroup(rt.agents.Load(), name)
	if err != nil {
		return svc.Topology{}, err
	}
	return g.graph.Topology(), nil
}

// maxListedNames bounds the names an unknown-name error lists.
const maxListedNames = 20

// unknownAgent says what to do about a name that is no agent: run the
// group of that name, or pick one of the registered agents.
func (r *registry) unknownAgent(name string) string {
	if _, ok := r.groups[name]; ok {
		return fmt.Sprintf("unknown agent %q: %s is a group: POST /groups/%s/run (RunGroup in Go)", name, name, url.PathEscape(name))
	}
	return fmt.Sprintf("unknown agent %q (%s)", name, listNames("registered agents", r.names))
}

// unknownGroup is unknownAgent for groups.
func (r *registry) unknownGroup(name string) string {
	if _, ok := r.byName[name]; ok {
		return fmt.Sprintf("unknown group %q: %s is an agent: POST /agents/%s/run (Run in Go)", name, name, url.PathEscape(name))
	}
	return fmt.Sprintf("unknown group %q (%s)", name, listNames("registered groups", r.groupNames))
}

// unknownTarget says what to submit instead of a target that is not of
// the kind asked for ("" for either).
func (r *registry) unknownTarget(name string, kind svc.TargetKind, isAgent, isGroup bool) string {
	switch {
	case kind == svc.TargetAgent && isGroup:
		return fmt.Sprintf("unknown agent target %q: %s is a group: submit it with kind %q", name, name, svc.TargetGroup)
	case kind == svc.TargetGroup && isAgent:
		return fmt.Sprintf("unknown group target %q: %s is an agent: submit it with kind %q", name, name, svc.TargetAgent)
	case kind == svc.TargetAgent:
		return fmt.Sprintf("unknown agent target %q (%s)", name, listNames("registered agents", r.names))
	case kind == svc.TargetGroup:
		return fmt.Sprintf("unknown group target %q (%s)", name, listNames("registered groups", r.groupNames))
	}
	return fmt.Sprintf("unknown target %q (%s; %s)", name, listNames("registered agents", r.names), listNames("registered groups", r.groupNames))
}

// listNames is "what: a, b, c", at most maxListedNames of them, or "no
// what" when there are none.
func listNames(what string, names []string) string {
	if len(names) == 0 {
		return "no " + what
	}
	shown := names[:min(len(names), maxListedNames)]
	out := what + ": " + strings.Join(shown, ", ")
	if more := len(names) - len(shown); more > 0 {
		out += fmt.Sprintf(" and %d more", more)
	}
	return out
}

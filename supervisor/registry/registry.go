// Package registry owns the definitions a runtime knows by name: the
// compiled agents, the checked groups over them (a team with its
// coordinator), the messages that say what to run instead of an unknown
// name, and the catalog of the tools they have. A Registry holds one
// immutable Snapshot at a time; writers build the next one and swap it in,
// so a run resolves every name it needs from the snapshot it started with.
//
// Compiling an agent binds what the runtime provides (models, prices, MCP
// servers, the spawn_agents tool) and a team's delegate tool starts runs,
// so both are given to New by the runtime (package supervisor).
package registry

import (
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/agent"
	"github.com/svc-dev/svc/group"
)

// Config is what a Registry needs of its runtime.
type Config struct {
	// Compile compiles an agent with what the runtime provides.
	Compile func(svc.Agent) (*agent.Compiled, error)
	// Delegate returns the delegate tool of a team, which its coordinator
	// is compiled with.
	Delegate func(svc.Group) svc.Tool
	// OnReplace, when set, is called by Replace with the snapshot it
	// replaced and the new one, before the next writer may start: the
	// runtime retires the MCP servers no agent declares any more.
	OnReplace func(old, next *Snapshot)
}

// Registry holds the current Snapshot. Its writers are serialised; readers
// never wait.
type Registry struct {
	cfg Config
	mu  sync.Mutex // serialises writers
	cur atomic.Pointer[Snapshot]
}

// New returns an empty registry.
func New(cfg Config) *Registry {
	r := &Registry{cfg: cfg}
	r.cur.Store(empty())
	return r
}

func empty() *Snapshot {
	return &Snapshot{agents: map[string]*agent.Compiled{}, groups: map[string]*Group{}}
}

// Load returns the current snapshot.
func (r *Registry) Load() *Snapshot { return r.cur.Load() }

// Register compiles and adds agents. The registry keeps its own copy of
// each definition; registering a name that exists is an error (use
// Replace). On error nothing changes.
func (r *Registry) Register(agents ...svc.Agent) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	compiled, err := r.compile(agents)
	if err != nil {
		return err
	}
	next, err := r.cur.Load().withAgents(compiled)
	if err != nil {
		return err
	}
	r.cur.Store(next)
	return nil
}

// RegisterGroups checks and adds groups over the registered agents. On
// error nothing changes.
func (r *Registry) RegisterGroups(groups ...svc.Group) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.cur.Load()
	next := &Snapshot{agents: cur.agents, names: cur.names, groups: maps.Clone(cur.groups)}
	if err := r.addGroups(next, groups); err != nil {
		return err
	}
	r.cur.Store(next)
	return nil
}

// Replace swaps the whole set of agents and groups atomically: runs in
// flight finish on the definitions they started with. On error nothing
// changes.
func (r *Registry) Replace(agents []svc.Agent, groups []svc.Group) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	compiled, err := r.compile(agents)
	if err != nil {
		return err
	}
	next, err := empty().withAgents(compiled)
	if err != nil {
		return err
	}
	next.groups = make(map[string]*Group, len(groups))
	if err := r.addGroups(next, groups); err != nil {
		return err
	}
	old := r.cur.Swap(next)
	if r.cfg.OnReplace != nil {
		r.cfg.OnReplace(old, next)
	}
	return nil
}

func (r *Registry) compile(agents []svc.Agent) ([]*agent.Compiled, error) {
	out := make([]*agent.Compiled, 0, len(agents))
	for _, a := range agents {
		c, err := r.cfg.Compile(a)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// addGroups compiles groups against next's agents and adds them to next.
func (r *Registry) addGroups(next *Snapshot, groups []svc.Group) error {
	for _, g := range groups {
		if _, dup := next.groups[g.Name]; dup {
			return svc.Errorf(svc.KindSpecValidation, "group %s is defined twice", g.Name)
		}
		cg, err := r.compileGroup(g, next)
		if err != nil {
			return err
		}
		next.groups[g.Name] = cg
	}
	next.groupNames = sortedKeys(next.groups)
	return nil
}

// compileGroup checks g against the agents of next; a team also gets its
// coordinator compiled with the delegate tool.
func (r *Registry) compileGroup(g svc.Group, next *Snapshot) (*Group, error) {
	gr, err := group.Compile(g, next.hasAgent)
	if err != nil {
		return nil, err
	}
	cg := &Group{Def: gr.Def, Graph: gr}
	if gr.Def.EffectiveKind() != svc.GroupTeam {
		return cg, nil
	}
	coord := next.agents[gr.Def.Coordinator].Def.Clone()
	cg.delegate = r.cfg.Delegate(gr.Def)
	coord.Tools = append(slices.Clone(coord.Tools), cg.delegate)
	team, err := r.cfg.Compile(coord)
	if err != nil {
		var e *svc.Error
		if errors.As(err, &e) {
			return nil, &svc.Error{Kind: svc.KindTopology, Message: "group " + g.Name + ": coordinator: " + e.Message, Err: err}
		}
		return nil, err
	}
	cg.Team = team
	return cg, nil
}

// Snapshot is one immutable set of definitions: agents and the groups over
// them. Nothing it returns may be changed.
type Snapshot struct {
	agents     map[string]*agent.Compiled
	names      []string
	groups     map[string]*Group
	groupNames []string
}

// Group is a registered group: its checked graph, or for a team the
// coordinator compiled with its delegate tool.
type Group struct {
	Def   svc.Group
	Graph *group.Graph
	// Team is a team's coordinator, with the delegate tool; nil for a
	// graph.
	Team *agent.Compiled
	// delegate is the tool Team got, a builtin in the catalog.
	delegate svc.Tool
}

func (s *Snapshot) hasAgent(name string) bool { _, ok := s.agents[name]; return ok }

func (s *Snapshot) withAgents(agents []*agent.Compiled) (*Snapshot, error) {
	next := &Snapshot{agents: maps.Clone(s.agents), groups: s.groups, groupNames: s.groupNames}
	for _, c := range agents {
		if _, dup := next.agents[c.Def.Name]; dup {
			return nil, svc.Errorf(svc.KindSpecValidation, "agent %s is already registered", c.Def.Name)
		}
		next.agents[c.Def.Name] = c
	}
	next.names = sortedKeys(next.agents)
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

// Agent returns the compiled agent of that name.
func (s *Snapshot) Agent(name string) (*agent.Compiled, bool) {
	c, ok := s.agents[name]
	return c, ok
}

// LookupAgent is Agent with a RegistryError that says what to run instead
// of an unknown name.
func (s *Snapshot) LookupAgent(name string) (*agent.Compiled, error) {
	c, ok := s.agents[name]
	if !ok {
		return nil, &svc.Error{Kind: svc.KindRegistry, Agent: name, Message: s.unknownAgent(name)}
	}
	return c, nil
}

// Agents returns the compiled agents by name. The map is the snapshot's
// own: read it, never change it.
func (s *Snapshot) Agents() map[string]*agent.Compiled { return s.agents }

// AgentNames returns the agent names, sorted (the snapshot's own slice).
func (s *Snapshot) AgentNames() []string { return s.names }

// Group returns the registered group of that name.
func (s *Snapshot) Group(name string) (*Group, bool) {
	g, ok := s.groups[name]
	return g, ok
}

// LookupGroup is Group with a RegistryError that says what to run instead
// of an unknown name.
func (s *Snapshot) LookupGroup(name string) (*Group, error) {
	g, ok := s.groups[name]
	if !ok {
		return nil, &svc.Error{Kind: svc.KindRegistry, Message: s.unknownGroup(name)}
	}
	return g, nil
}

// GroupNames returns the group names, sorted (the snapshot's own slice).
func (s *Snapshot) GroupNames() []string { return s.groupNames }

// Target resolves a submission's target: kind is svc.TargetAgent,
// svc.TargetGroup or "" for either, and the answer is the kind the target
// is. An unknown target is a RegistryError saying what to submit instead;
// a bad kind, or a name that is both without a kind, a SpecValidationError.
func (s *Snapshot) Target(name string, kind svc.TargetKind) (svc.TargetKind, error) {
	_, isAgent := s.agents[name]
	_, isGroup := s.groups[name]
	switch {
	case kind != "" && kind != svc.TargetAgent && kind != svc.TargetGroup:
		return "", svc.Errorf(svc.KindSpecValidation, "kind %q: want agent or group", kind)
	case kind == svc.TargetAgent && !isAgent, kind == svc.TargetGroup && !isGroup, !isAgent && !isGroup:
		return "", &svc.Error{Kind: svc.KindRegistry, Message: s.unknownTarget(name, kind, isAgent, isGroup)}
	case kind == "" && isAgent && isGroup:
		return "", svc.Errorf(svc.KindSpecValidation, "target %q is both an agent and a group: say which with kind", name)
	case kind == "" && isAgent:
		return svc.TargetAgent, nil
	case kind == "":
		return svc.TargetGroup, nil
	}
	return kind, nil
}

// maxListedNames bounds the names an unknown-name error lists.
const maxListedNames = 20

// unknownAgent says what to do about a name that is no agent: run the
// group of that name, or pick one of the registered agents.
func (s *Snapshot) unknownAgent(name string) string {
	if _, ok := s.groups[name]; ok {
		return fmt.Sprintf("unknown agent %q: %s is a group: POST /groups/%s/run (RunGroup in Go)", name, name, url.PathEscape(name))
	}
	return fmt.Sprintf("unknown agent %q (%s)", name, listNames("registered agents", s.names))
}

// unknownGroup is unknownAgent for groups.
func (s *Snapshot) unknownGroup(name string) string {
	if _, ok := s.agents[name]; ok {
		return fmt.Sprintf("unknown group %q: %s is an agent: POST /agents/%s/run (Run in Go)", name, name, url.PathEscape(name))
	}
	return fmt.Sprintf("unknown group %q (%s)", name, listNames("registered groups", s.groupNames))
}

// unknownTarget says what to submit instead of a target that is not of
// the kind asked for ("" for either).
func (s *Snapshot) unknownTarget(name string, kind svc.TargetKind, isAgent, isGroup bool) string {
	switch {
	case kind == svc.TargetAgent && isGroup:
		return fmt.Sprintf("unknown agent target %q: %s is a group: submit it with kind %q", name, name, svc.TargetGroup)
	case kind == svc.TargetGroup && isAgent:
		return fmt.Sprintf("unknown group target %q: %s is an agent: submit it with kind %q", name, name, svc.TargetAgent)
	case kind == svc.TargetAgent:
		return fmt.Sprintf("unknown agent target %q (%s)", name, listNames("registered agents", s.names))
	case kind == svc.TargetGroup:
		return fmt.Sprintf("unknown group target %q (%s)", name, listNames("registered groups", s.groupNames))
	}
	return fmt.Sprintf("unknown target %q (%s; %s)", name, listNames("registered agents", s.names), listNames("registered groups", s.groupNames))
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

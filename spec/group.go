package spec

import (
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/group"
)

var groupKeys = []string{
	"version", "name", "kind", "nodes", "edges", "coordinator", "delegates", "max_rounds",
}

var (
	nodeKeys = []string{"agent"}
	edgeKeys = []string{"from", "to", "when", "input", "fan_out", "max_concurrency"}
	// graphOnly and teamOnly are the keys one kind uses and the other
	// ignores: naming one for the wrong kind is a mistake worth reporting.
	graphOnly = []string{"nodes", "edges"}
	teamOnly  = []string{"coordinator", "delegates", "max_rounds"}
)

// decodedGroup is a group as written and where each of its keys is, so
// that the errors of group.Compile, which know keys but not lines, can be
// reported at the right line.
type decodedGroup struct {
	group    svc.Group
	nameLine int
	// at maps key paths ("nodes.billing", "edges[2].when", "delegates[0]")
	// to their YAML nodes.
	at   map[string]*yaml.Node
	root *yaml.Node
}

// line returns the line of key, or of its nearest enclosing key that has
// one ("edges[2].when" falls back to "edges[2]", then "edges"), or of the
// group's name (or first line) for "" and for keys not in the file.
func (g *decodedGroup) line(key string) int {
	for k := key; k != ""; k = parentKey(k) {
		if n, ok := g.at[k]; ok {
			return n.Line
		}
	}
	return g.nameLine
}

// parentKey drops the last component of a key path: "edges[2].when" →
// "edges[2]" → "edges"; "nodes.billing" → "nodes"; "name" → "".
func parentKey(key string) string {
	if strings.HasSuffix(key, "]") {
		if i := strings.LastIndexByte(key, '['); i >= 0 {
			return key[:i]
		}
	}
	if i := strings.LastIndexByte(key, '.'); i >= 0 {
		return key[:i]
	}
	return ""
}

// groupDecoder turns one group file into an svc.Group.
type groupDecoder struct {
	*decoder
	out *decodedGroup
	fs  map[string]field
}

// decodeGroup decodes the group spec data, read from file. It checks the
// file's shape (keys, types, what each kind needs); what the group means
// (agents that exist, edges between nodes, cycles, CEL) is group.Compile's
// to check, which the caller does once every agent is known. The group is
// usable only when there are no errors.
func decodeGroup(file string, data []byte) (*decodedGroup, []*Error) {
	root, perr := parseMapping(file, data, "a group spec: a mapping starting with version: 1")
	if perr != nil {
		return nil, []*Error{perr}
	}
	d := &groupDecoder{
		decoder: newDecoder(file, len(data)),
		out:     &decodedGroup{at: map[string]*yaml.Node{}, root: root, nameLine: root.Line},
	}
	d.fs = d.fields(root, "", groupKeys)
	for k, f := range d.fs {
		d.out.at[k] = f.val
	}
	d.version(root, d.fs)

	g := &d.out.group
	stem := stemOf(file)
	g.Name = stem
	if f, ok := d.get("name"); ok {
		d.out.nameLine = f.val.Line
		if name, ok := d.str(f.val, "name"); ok {
			g.Name = name
			if name != stem {
				d.fail(f.val, "name", "%q does not match the file name %s: a group's file is named after it", name, filepath.Base(file))
			}
		}
	}
	if !d.failed("name") && !svc.ValidName(g.Name) {
		msg := "%q: use letters, digits, '_', '-' and '.', starting with a letter or digit"
		if _, ok := d.fs["name"]; !ok {
			msg += " (the name comes from the file name)"
		}
		d.fail(d.at("name"), "name", msg, g.Name)
	}

	g.Kind = svc.GroupGraph
	if f, ok := d.get("kind"); ok {
		if s, ok := d.str(f.val, "kind"); ok {
			switch s {
			case svc.GroupGraph, svc.GroupTeam:
				g.Kind = s
			default:
				d.fail(f.val, "kind", "%q: want graph or team", s)
				g.Kind = "" // unknown: check neither kind's keys
			}
		}
	}
	switch g.Kind {
	case svc.GroupGraph:
		d.wrongKind(teamOnly, svc.GroupGraph, svc.GroupTeam)
		d.graph(g)
	case svc.GroupTeam:
		d.wrongKind(graphOnly, svc.GroupTeam, svc.GroupGraph)
		d.team(g)
	}
	return d.out, d.finish()
}

// get returns a key's field when the key is present and not null.
func (d *groupDecoder) get(key string) (field, bool) {
	f, ok := d.fs[key]
	if !ok || isNull(f.val) {
		return field{}, false
	}
	return f, true
}

// at is the node to report a top-level key's problem at: its value, or the
// top of the file when the key is missing.
func (d *groupDecoder) at(key string) *yaml.Node {
	if f, ok := d.fs[key]; ok {
		return f.val
	}
	return d.out.root
}

func (d *groupDecoder) wrongKind(keys []string, kind, other string) {
	for _, k := range keys {
		if f, ok := d.get(k); ok {
			d.fail(f.key, k, "not used by kind: %s (it is for kind: %s)", kind, other)
		}
	}
}

// graph decodes nodes (a mapping, kept in document order) and edges.
func (d *groupDecoder) graph(g *svc.Group) {
	f, ok := d.get("nodes")
	if !ok {
		d.fail(d.at("nodes"), "nodes", "missing: a graph needs nodes, e.g. `nodes: {triage: {agent: triage}}`")
	} else if m := resolve(f.val); m.Kind != yaml.MappingNode {
		d.fail(f.val, "nodes", "want a mapping of node names to {agent: NAME}, got %s", describe(f.val))
	} else if len(m.Content) == 0 {
		d.fail(f.val, "nodes", "empty: a graph needs at least one node")
	} else {
		g.Nodes = d.nodes(m)
	}
	if f, ok := d.get("edges"); ok {
		g.Edges = d.edges(f.val)
	}
}

func (d *groupDecoder) nodes(m *yaml.Node) []svc.GroupNode {
	var out []svc.GroupNode
	seen := map[string]int{} // name → line
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		name, ok := mapKey(d.decoder, k, "nodes", seen)
		if !ok {
			continue
		}
		seen[name] = k.Line
		key := "nodes." + name
		d.out.at[key] = k
		if !svc.ValidName(name) {
			d.fail(k, key, "%q is not a valid node name: use letters, digits, '_', '-' and '.', starting with a letter or digit", name)
			continue
		}
		nm := resolve(v)
		if nm.Kind != yaml.MappingNode {
			d.fail(v, key, "want {agent: NAME}, got %s", describe(v))
			continue
		}
		fs := d.fields(nm, key, nodeKeys)
		af, ok := fs["agent"]
		if !ok {
			d.fail(nm, key+".agent", "missing: name the agent the node runs")
			continue
		}
		d.out.at[key+".agent"] = af.val
		agent, ok := d.str(af.val, key+".agent")
		if !ok {
			continue
		}
		out = append(out, svc.GroupNode{Name: name, Agent: agent})
	}
	return out
}

func (d *groupDecoder) edges(n *yaml.Node) []svc.GroupEdge {
	r := resolve(n)
	if r.Kind != yaml.SequenceNode {
		d.fail(n, "edges", "want a list of edges ({from: A, to: B}), got %s", describe(n))
		return nil
	}
	out := make([]svc.GroupEdge, 0, len(r.Content))
	for i, e := range r.Content {
		path := fmt.Sprintf("edges[%d]", i)
		d.out.at[path] = e
		m := resolve(e)
		if m.Kind != yaml.MappingNode {
			d.fail(e, path, "want a mapping with from and to, got %s", describe(e))
			continue
		}
		fs := d.fields(m, path, edgeKeys)
		get := func(k string) (*yaml.Node, bool) {
			f, ok := fs[k]
			if !ok || isNull(f.val) {
				return nil, false
			}
			d.out.at[path+"."+k] = f.val
			return f.val, true
		}
		var edge svc.GroupEdge
		for _, k := range []string{"from", "to"} {
			v, ok := get(k)
			if !ok {
				d.fail(m, path+"."+k, "missing: an edge goes from one node to another")
				continue
			}
			if s, ok := d.str(v, path+"."+k); ok {
				if k == "from" {
					edge.From = s
				} else {
					edge.To = s
				}
			}
		}
		for _, x := range []struct {
			key string
			dst *string
		}{{"when", &edge.When}, {"input", &edge.Input}, {"fan_out", &edge.FanOut}} {
			v, ok := get(x.key)
			if !ok {
				continue
			}
			if s, ok := d.str(v, path+"."+x.key); ok {
				if strings.TrimSpace(s) == "" {
					d.fail(v, path+"."+x.key, "empty: write a CEL expression, or leave the key out")
					continue
				}
				*x.dst = s
			}
		}
		if v, ok := get("max_concurrency"); ok {
			if c, ok := d.intValue(v, path+".max_concurrency"); ok {
				switch {
				case c < 1:
					d.fail(v, path+".max_concurrency", "%d: want at least 1 (leave it out for the default)", c)
				case edge.FanOut == "" && !d.failed(path+".fan_out"):
					d.fail(v, path+".max_concurrency", "only a fan_out edge runs items concurrently: add fan_out or remove max_concurrency")
				default:
					edge.MaxConcurrency = c
				}
			}
		}
		out = append(out, edge)
	}
	return out
}

// team decodes coordinator, delegates and max_rounds.
func (d *groupDecoder) team(g *svc.Group) {
	if f, ok := d.get("coordinator"); ok {
		g.Coordinator, _ = d.str(f.val, "coordinator")
	} else {
		d.fail(d.at("coordinator"), "coordinator", "missing: a team needs the agent that coordinates it")
	}
	if f, ok := d.get("delegates"); ok {
		items := d.strList(f.val, "delegates")
		seen := map[string]bool{}
		for _, it := range items {
			d.out.at[it.Key] = it.Node
			if seen[it.Value] {
				d.fail(it.Node, it.Key, "delegate %s is listed twice", it.Value)
				continue
			}
			seen[it.Value] = true
			g.Delegates = append(g.Delegates, it.Value)
		}
		if len(items) == 0 && !d.failed("delegates") {
			d.fail(f.val, "delegates", "empty: a team needs at least one delegate")
		}
	} else {
		d.fail(d.at("delegates"), "delegates", "missing: list the agents the coordinator may delegate to")
	}
	if f, ok := d.get("max_rounds"); ok {
		if v, ok := d.intValue(f.val, "max_rounds"); ok {
			if v < 1 {
				d.fail(f.val, "max_rounds", "%d: want at least 1 (leave it out for the default, %d)", v, svc.DefaultMaxRounds)
			} else {
				g.MaxRounds = v
			}
		}
	}
}

// compileGroup checks what a well-formed group file means, with
// group.Compile, and reports each problem at the line of the key it names.
// The errors are TopologyErrors (and so SpecValidationErrors) that keep
// the *group.Error as their cause.
func compileGroup(file string, dec *decodedGroup, hasAgent func(string) bool) []*Error {
	_, err := group.Compile(dec.group, hasAgent)
	if err == nil {
		return nil
	}
	var out []*Error
	for _, e := range flatten(err) {
		var ge *group.Error
		if errors.As(e, &ge) {
			out = append(out, &Error{File: file, Line: dec.line(ge.Key), Key: ge.Key, Msg: ge.Msg, cause: ge, kind: svc.KindTopology})
			continue
		}
		// Not one of Compile's own errors: still about this group, so
		// still reported against its file, under the kind it has.
		kind := svc.KindSpecValidation
		if errors.Is(e, svc.ErrTopology) {
			kind = svc.KindTopology
		}
		out = append(out, &Error{File: file, Line: dec.nameLine, Msg: e.Error(), cause: e, kind: kind})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Line < out[j].Line })
	return out
}

// flatten lists the errors an errors.Join holds, recursively.
func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}

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
	"version", "name", "kind", "nodes", "edges", "coordinator", "delegates", "max_rounds", "mcp",
}

var (
	nodeKeys = []string{"agent"}
	edgeKeys = []string{"from", "to", "when", "input", "fan_out", "max_concurrency"}
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

// decodeGroup decodes the group spec data, read from file. It checks only
// the file's shape: known keys of the right types, version, the name
// matching the file, no empty expressions and no explicit zeros (a file
// leaves a key out for the default). The rules of a group (valid names, a
// known kind and what it needs, edges between nodes, cycles, CEL, agents
// that exist) are group.Compile's, the one place they live for groups
// built in Go too; the caller runs it once every agent is known and
// reports its errors at the lines of the keys they name. The group is
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

	g.Kind = svc.GroupGraph
	if f, ok := d.get("kind"); ok {
		if s, ok := d.str(f.val, "kind"); ok {
			g.Kind = s // group.Compile knows the kinds
		}
	}
	// Every key is decoded whatever the kind: naming one the kind does
	// not use is a mistake group.Compile reports.
	d.graph(g)
	d.team(g)
	if f, ok := d.get("mcp"); ok {
		g.MCP = d.exposure(f.val)
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

// graph decodes nodes (a mapping, kept in document order) and edges.
func (d *groupDecoder) graph(g *svc.Group) {
	if f, ok := d.get("nodes"); ok {
		if m := resolve(f.val); m.Kind != yaml.MappingNode {
			d.fail(f.val, "nodes", "want a mapping of node names to {agent: NAME}, got %s", describe(f.val))
		} else {
			g.Nodes = d.nodes(m)
		}
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
		nm := resolve(v)
		if nm.Kind != yaml.MappingNode {
			d.fail(v, key, "want {agent: NAME}, got %s", describe(v))
			continue
		}
		fs := d.fields(nm, key, nodeKeys)
		node := svc.GroupNode{Name: name}
		if af, ok := fs["agent"]; ok {
			d.out.at[key+".agent"] = af.val
			if node.Agent, ok = d.str(af.val, key+".agent"); !ok {
				continue
			}
		}
		out = append(out, node)
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
				continue // group.Compile: "from is required"
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
				if c == 0 {
					// 0 is how Go asks for the default; a file leaves the key out.
					d.fail(v, path+".max_concurrency", "0: want at least 1 (leave it out for the default)")
				}
				edge.MaxConcurrency = c
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
	}
	if f, ok := d.get("delegates"); ok {
		for _, it := range d.strList(f.val, "delegates") {
			d.out.at[it.Key] = it.Node
			g.Delegates = append(g.Delegates, it.Value)
		}
	}
	if f, ok := d.get("max_rounds"); ok {
		if v, ok := d.intValue(f.val, "max_rounds"); ok {
			if v == 0 {
				// 0 is how Go asks for the default; a file leaves the key out.
				d.fail(f.val, "max_rounds", "0: want at least 1 (leave it out for the default, %d)", svc.DefaultMaxRounds)
			}
			g.MaxRounds = v
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
			msg := ge.Msg
			if _, written := dec.at["name"]; ge.Key == "name" && !written {
				msg += " (the name comes from the file name)"
			}
			out = append(out, &Error{File: file, Line: dec.line(ge.Key), Key: ge.Key, Msg: msg, cause: ge, kind: svc.KindTopology})
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

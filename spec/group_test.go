package spec

import (
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/group"
)

// supportYAML is the support group of docs/specs.md with a fan-out edge added.
const supportYAML = `version: 1
name: support            # optional, = file stem
kind: graph
nodes:                   # mapping, order kept
  triage: {agent: triage}
  billing: {agent: billing_expert}
  items:
    agent: worker
edges:
  - {from: triage, to: billing, when: 'output.category == "billing"'}
  - {from: triage, to: items, fan_out: 'output.items', max_concurrency: 10, input: 'item'}
`

const teamYAML = `version: 1
kind: team
coordinator: lead
delegates: [researcher, writer]
max_rounds: 4
`

// groupAgents are agent files for the agents the groups above use.
func groupAgents(files map[string]string) map[string]string {
	for _, a := range []string{"triage", "billing_expert", "worker", "lead", "researcher", "writer", "tech"} {
		files["specs/agents/"+a+".yaml"] = "version: 1\nmodel: test:echo\n"
	}
	return files
}

func TestLoadGroups(t *testing.T) {
	writeTree(t, groupAgents(map[string]string{
		"specs/groups/support.yaml": supportYAML,
		"specs/groups/crew.yml":     teamYAML,
		// Agents and groups have separate namespaces.
		"specs/groups/triage.yaml": "version: 1\nnodes: {only: {agent: triage}}\n",
	}))
	set, err := Load("specs", Env{})
	if err != nil {
		t.Fatal(err)
	}
	want := []svc.Group{
		{Name: "crew", Kind: svc.GroupTeam, Coordinator: "lead", Delegates: []string{"researcher", "writer"}, MaxRounds: 4},
		{
			Name: "support", Kind: svc.GroupGraph,
			Nodes: []svc.GroupNode{{Name: "triage", Agent: "triage"}, {Name: "billing", Agent: "billing_expert"}, {Name: "items", Agent: "worker"}},
			Edges: []svc.GroupEdge{
				{From: "triage", To: "billing", When: `output.category == "billing"`},
				{From: "triage", To: "items", FanOut: "output.items", MaxConcurrency: 10, Input: "item"},
			},
		},
		{Name: "triage", Kind: svc.GroupGraph, Nodes: []svc.GroupNode{{Name: "only", Agent: "triage"}}},
	}
	if !reflect.DeepEqual(set.Groups, want) {
		t.Errorf("groups =\n%#v\nwant\n%#v", set.Groups, want)
	}
	wantFiles := map[string]string{"crew": "specs/groups/crew.yml", "support": "specs/groups/support.yaml", "triage": "specs/groups/triage.yaml"}
	if !reflect.DeepEqual(set.GroupFiles, wantFiles) {
		t.Errorf("GroupFiles = %v", set.GroupFiles)
	}
	if set.Files["triage"] != "specs/agents/triage.yaml" || len(set.Files) != 7 {
		t.Errorf("Files = %v, want the agents' files", set.Files)
	}
	// What was loaded is what a runtime compiles.
	for _, g := range set.Groups {
		if _, err := group.Compile(g, func(string) bool { return true }); err != nil {
			t.Errorf("%s: %v", g.Name, err)
		}
	}
}

// TestGroupRoundTrip writes the loaded groups back out as YAML and loads
// them again: the spec format can say everything a Group holds.
func TestGroupRoundTrip(t *testing.T) {
	writeTree(t, groupAgents(map[string]string{
		"specs/groups/support.yaml": supportYAML,
		"specs/groups/crew.yaml":    teamYAML,
	}))
	first, err := Load("specs", Env{})
	if err != nil {
		t.Fatal(err)
	}
	files := groupAgents(map[string]string{})
	for _, g := range first.Groups {
		files["specs/groups/"+g.Name+".yaml"] = groupYAML(g)
	}
	writeTree(t, files)
	second, err := Load("specs", Env{})
	if err != nil {
		t.Fatalf("reloading the written groups: %v", err)
	}
	if !reflect.DeepEqual(first.Groups, second.Groups) {
		t.Errorf("round trip changed the groups:\n%#v\n%#v", first.Groups, second.Groups)
	}
}

// groupYAML writes g in the block style a person would.
func groupYAML(g svc.Group) string {
	var b strings.Builder
	q := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
	b.WriteString("version: 1\nname: " + g.Name + "\nkind: " + g.Kind + "\n")
	if g.Kind == svc.GroupTeam {
		b.WriteString("coordinator: " + g.Coordinator + "\ndelegates:\n")
		for _, d := range g.Delegates {
			b.WriteString("  - " + d + "\n")
		}
		if g.MaxRounds != 0 {
			b.WriteString("max_rounds: " + strconv.Itoa(g.MaxRounds) + "\n")
		}
		return b.String()
	}
	b.WriteString("nodes:\n")
	for _, n := range g.Nodes {
		b.WriteString("  " + n.Name + ":\n    agent: " + n.Agent + "\n")
	}
	if len(g.Edges) > 0 {
		b.WriteString("edges:\n")
	}
	for _, e := range g.Edges {
		b.WriteString("  - from: " + e.From + "\n    to: " + e.To + "\n")
		if e.When != "" {
			b.WriteString("    when: " + q(e.When) + "\n")
		}
		if e.FanOut != "" {
			b.WriteString("    fan_out: " + q(e.FanOut) + "\n")
		}
		if e.Input != "" {
			b.WriteString("    input: " + q(e.Input) + "\n")
		}
		if e.MaxConcurrency != 0 {
			b.WriteString("    max_concurrency: " + strconv.Itoa(e.MaxConcurrency) + "\n")
		}
	}
	return b.String()
}

// TestBadGroupShapes covers what the decoder itself rejects: keys, types
// and what each kind needs. Each case breaks one thing and must give
// exactly that one error, at its line and key.
func TestBadGroupShapes(t *testing.T) {
	cases := []struct {
		name string
		yaml string
		line int
		key  string
		msg  string
	}{
		{"missing version", "nodes: {a: {agent: x}}\n", 1, "version", "missing: add `version: 1`"},
		{"version 2", "version: 2\nnodes: {a: {agent: x}}\n", 1, "version", "want 1, got the integer 2"},
		{"unknown key near miss", "version: 1\nnodes: {a: {agent: x}}\nedgse: []\n", 3, "edgse", `unknown key; did you mean "edges"?`},
		{"unknown key", "version: 1\nnodes: {a: {agent: x}}\n\nbananas: 1\n", 4, "bananas", "unknown key (known keys: version, name, kind, nodes,"},
		{"empty file", "", 1, "", "empty file: want a group spec"},
		{"a list", "- 1\n", 1, "", "want a group spec: a mapping starting with version: 1, got a list"},
		{"syntax", "version: 1\nnodes: {a: [\n", 3, "", "invalid YAML"},
		{"name mismatch", "version: 1\nname: other\nnodes: {a: {agent: x}}\n", 2, "name", `"other" does not match the file name x.yaml`},
		{"name not a string", "version: 1\nname: 7\nnodes: {a: {agent: x}}\n", 2, "name", "want a string, got the integer 7"},
		{"kind not a string", "version: 1\nkind: [graph]\nnodes: {a: {agent: x}}\n", 2, "kind", "want a string, got a list"},

		{"nodes a list", "version: 1\nnodes: [a, b]\n", 2, "nodes", "want a mapping of node names to {agent: NAME}, got a list"},
		{"node not a mapping", "version: 1\nnodes:\n  a: {agent: x}\n  b: y\n", 4, "nodes.b", `want {agent: NAME}, got the string "y"`},
		{"node agent not a string", "version: 1\nnodes:\n  a: {agent: 3}\n", 3, "nodes.a.agent", "want a string, got the integer 3"},
		{"node unknown key", "version: 1\nnodes:\n  a: {agent: x, agnet: y}\n", 3, "nodes.a.agnet", `unknown key; did you mean "agent"?`},
		{"node other key", "version: 1\nnodes:\n  a: {agent: x, model: y}\n", 3, "nodes.a.model", "unknown key (known keys: agent)"},
		{"node repeated", "version: 1\nnodes:\n  a: {agent: x}\n  a: {agent: y}\n", 4, "nodes.a", "repeated key"},

		{"edges not a list", "version: 1\nnodes: {a: {agent: x}}\nedges: {from: a}\n", 3, "edges", "want a list of edges ({from: A, to: B}), got a mapping"},
		{"edge not a mapping", "version: 1\nnodes: {a: {agent: x}}\nedges:\n  - a->b\n", 4, "edges[0]", `want a mapping with from and to, got the string "a->b"`},
		{"edge from not a string", "version: 1\nnodes: {a: {agent: x}, b: {agent: x}}\nedges:\n  - from: [a]\n    to: b\n", 4, "edges[0].from", "want a string, got a list"},
		{"edge unknown key", "version: 1\nnodes: {a: {agent: x}, b: {agent: x}}\nedges:\n  - from: a\n    to: b\n    if: 'true'\n", 6, "edges[0].if", "unknown key"},
		{"edge empty when", "version: 1\nnodes: {a: {agent: x}, b: {agent: x}}\nedges:\n  - {from: a, to: b, when: ''}\n", 4, "edges[0].when", "empty: write a CEL expression"},
		{"edge when not a string", "version: 1\nnodes: {a: {agent: x}, b: {agent: x}}\nedges:\n  - {from: a, to: b, when: true}\n", 4, "edges[0].when", "want a string, got the boolean true"},
		{"max_concurrency zero", "version: 1\nnodes: {a: {agent: x}, b: {agent: x}}\nedges:\n  - {from: a, to: b, fan_out: output, max_concurrency: 0}\n", 4, "edges[0].max_concurrency", "0: want at least 1"},
		{"max_concurrency a string", "version: 1\nnodes: {a: {agent: x}, b: {agent: x}}\nedges:\n  - {from: a, to: b, fan_out: output, max_concurrency: lots}\n", 4, "edges[0].max_concurrency", `want an integer, got the string "lots"`},

		{"team delegates not a list", "version: 1\nkind: team\ncoordinator: lead\ndelegates: a\n", 4, "delegates", `want a list of strings, got the string "a"`},
		{"team delegate not a string", "version: 1\nkind: team\ncoordinator: lead\ndelegates: [a, {b: 1}]\n", 4, "delegates[1]", "want a string, got a mapping"},
		{"team max_rounds zero", "version: 1\nkind: team\ncoordinator: lead\ndelegates: [a]\nmax_rounds: 0\n", 5, "max_rounds", "0: want at least 1 (leave it out for the default, 8)"},
		{"team max_rounds a float", "version: 1\nkind: team\ncoordinator: lead\ndelegates: [a]\nmax_rounds: 2.5\n", 5, "max_rounds", "want an integer, got the number 2.5"},
		{"merge key", "version: 1\nnodes:\n  <<: {a: {agent: x}}\n", 3, "nodes", "merge keys (<<) are not supported"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, errs := decodeGroup("groups/x.yaml", []byte(c.yaml))
			if len(errs) != 1 {
				t.Fatalf("%d errors, want 1:%s", len(errs), dumpErrors(errs))
			}
			e := errs[0]
			if e.File != "groups/x.yaml" || e.Line != c.line || e.Key != c.key || !strings.HasPrefix(e.Msg, c.msg) {
				t.Errorf("got %v (line %d, key %q)\nwant line %d, key %q, message starting %q", e, e.Line, e.Key, c.line, c.key, c.msg)
			}
			if errors.Is(e, svc.ErrTopology) || !errors.Is(e, svc.ErrSpecValidation) {
				t.Errorf("%v: a shape error is a SpecValidationError, not a TopologyError", e)
			}
		})
	}
}

// The rules of a group are group.Compile's, for YAML and Go alike: a file
// that breaks one gets Compile's error (a TopologyError) at the line of
// the key it names, and nothing from the decoder besides.
func TestGroupRulesComeFromCompile(t *testing.T) {
	cases := []struct {
		name string
		file string // default x.yaml
		yaml string
		line int
		key  string
		msg  string
	}{
		{"bad kind", "", "version: 1\nkind: swarm\nnodes: {a: {agent: x}}\n", 2, "kind", `"swarm": want graph or team`},
		{"name from a bad file name", "my group.yaml", "version: 1\nnodes: {a: {agent: x}}\n", 1, "name", `"my group" is not a valid group name: use letters, digits, '_', '-' and '.', starting with a letter or digit (the name comes from the file name)`},
		{"no nodes", "", "version: 1\n", 1, "nodes", "a graph needs at least one node"},
		{"null nodes", "", "version: 1\nnodes: ~\n", 2, "nodes", "a graph needs at least one node"},
		{"empty nodes", "", "version: 1\nnodes: {}\n", 2, "nodes", "a graph needs at least one node"},
		{"node without agent", "", "version: 1\nnodes:\n  a: {}\n", 3, "nodes.a.agent", "agent is required"},
		{"node bad name", "", "version: 1\nnodes:\n  'a b': {agent: x}\n", 3, "nodes.a b", `"a b" is not a valid node name`},
		{"edge without to", "", "version: 1\nnodes: {a: {agent: x}}\nedges:\n  - {from: a}\n", 4, "edges[0].to", "to is required"},
		{"max_concurrency without fan_out", "", "version: 1\nnodes: {a: {agent: x}, b: {agent: x}}\nedges:\n  - {from: a, to: b, max_concurrency: 4}\n", 4, "edges[0].max_concurrency", "set without fan_out"},
		{"max_concurrency negative", "", "version: 1\nnodes: {a: {agent: x}, b: {agent: x}}\nedges:\n  - {from: a, to: b, fan_out: output, max_concurrency: -2}\n", 4, "edges[0].max_concurrency", "-2: want 0 (the default"},
		{"graph with team keys", "", "version: 1\nnodes: {a: {agent: x}}\ncoordinator: a\n", 3, "coordinator", "only a team has a coordinator"},
		{"team without coordinator", "", "version: 1\nkind: team\ndelegates: [a]\n", 1, "coordinator", "coordinator is required"},
		{"team without delegates", "", "version: 1\nkind: team\ncoordinator: lead\n", 1, "delegates", "a team needs at least one delegate"},
		{"team empty delegates", "", "version: 1\nkind: team\ncoordinator: lead\ndelegates: []\n", 4, "delegates", "a team needs at least one delegate"},
		{"team delegate twice", "", "version: 1\nkind: team\ncoordinator: lead\ndelegates:\n  - a\n  - a\n", 6, "delegates[1]", `"a" is already delegates[0]`},
		{"team bad max_rounds", "", "version: 1\nkind: team\ncoordinator: lead\ndelegates: [a]\nmax_rounds: -1\n", 5, "max_rounds", "-1: want 0 (the default, 8) or more"},
		{"team with nodes", "", "version: 1\nkind: team\ncoordinator: lead\ndelegates: [a]\nnodes: {a: {agent: x}}\n", 5, "nodes", "a team has no nodes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			file := c.file
			if file == "" {
				file = "x.yaml"
			}
			writeTree(t, map[string]string{"specs/groups/" + file: c.yaml})
			res, err := Validate("specs", Env{Agents: []string{"x", "a", "lead"}})
			if err != nil {
				t.Fatal(err)
			}
			errs := specErrors(t, res[0].Err)
			if len(errs) != 1 {
				t.Fatalf("%d errors, want 1:%s", len(errs), dumpErrors(errs))
			}
			e := errs[0]
			if e.File != "specs/groups/"+file || e.Line != c.line || e.Key != c.key || !strings.HasPrefix(e.Msg, c.msg) {
				t.Errorf("got %v (line %d, key %q)\nwant line %d, key %q, message starting %q", e, e.Line, e.Key, c.line, c.key, c.msg)
			}
			var ge *group.Error
			if !errors.Is(e, svc.ErrTopology) || !errors.As(e, &ge) {
				t.Errorf("%v: want group.Compile's TopologyError", e)
			}
		})
	}
}

func TestGroupNullsMeanUnset(t *testing.T) {
	dec, errs := decodeGroup("groups/g.yaml", []byte("version: 1\nname: ~\nkind: ~\nnodes: {a: {agent: x}}\nedges: ~\ncoordinator: ~\n"))
	if len(errs) > 0 {
		t.Fatalf("errors:%s", dumpErrors(errs))
	}
	want := svc.Group{Name: "g", Kind: svc.GroupGraph, Nodes: []svc.GroupNode{{Name: "a", Agent: "x"}}}
	if !reflect.DeepEqual(dec.group, want) {
		t.Errorf("group = %#v", dec.group)
	}
}

func TestDuplicateGroupNames(t *testing.T) {
	writeTree(t, groupAgents(map[string]string{
		"specs/groups/support.yaml": "version: 1\nnodes: {a: {agent: triage}}\n",
		"specs/groups/support.yml":  "version: 1\n\nname: support\nnodes: {a: {agent: triage}}\n",
	}))
	res, err := Validate("specs", Env{})
	if err != nil {
		t.Fatal(err)
	}
	last := res[len(res)-1]
	errs := specErrors(t, last.Err)
	if len(errs) != 1 || errs[0].Error() != "specs/groups/support.yml:3: name: group support is already defined in specs/groups/support.yaml" {
		t.Fatalf("%s:%s", last.File, dumpErrors(errs))
	}
}

func TestValidateReportsGroupsAfterAgents(t *testing.T) {
	writeTree(t, map[string]string{
		"specs/agents/a.yaml":   "version: 1\nmodel: test:echo\n",
		"specs/agents/b.yaml":   "version: 1\nmodel: nocolon\n",
		"specs/groups/z.yaml":   "version: 1\nnodes: {n: {agent: a}}\n",
		"specs/groups/m.yml":    "version: 1\nnodes: {n: {agent: b}}\n", // b's file is broken, but b exists
		"specs/groups/bad.yaml": "version: 1\nnodes: {n: {agent: nobody}}\n",
		"specs/groups/.#z.yaml": "lock file",
		"specs/groups/notes.md": "not a spec",
	})
	res, err := Validate("specs", Env{})
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, r := range res {
		files = append(files, r.File)
	}
	want := []string{"specs/agents/a.yaml", "specs/agents/b.yaml", "specs/groups/bad.yaml", "specs/groups/m.yml", "specs/groups/z.yaml"}
	if !slices.Equal(files, want) {
		t.Fatalf("files %q, want %q", files, want)
	}
	for _, r := range res {
		bad := r.File == "specs/agents/b.yaml" || r.File == "specs/groups/bad.yaml"
		if bad != (r.Err != nil) {
			t.Errorf("%s: %v", r.File, r.Err)
		}
	}
	if err := res[2].Err; !strings.HasPrefix(err.Error(), "specs/groups/bad.yaml:2: ") || !errors.Is(err, svc.ErrTopology) {
		t.Errorf("bad.yaml: %v", err)
	}
}

func TestGroupsUseAgentsFromEnv(t *testing.T) {
	writeTree(t, map[string]string{"specs/groups/g.yaml": "version: 1\nnodes: {n: {agent: native}}\n"})
	if _, err := Load("specs", Env{}); err == nil {
		t.Fatal("a group of an unknown agent loaded")
	}
	set, err := Load("specs", Env{Agents: []string{"native"}})
	if err != nil || len(set.Groups) != 1 {
		t.Fatalf("Load = %+v, %v", set, err)
	}
}

// TestGroupTopologyErrors covers each validation error of a group through
// a YAML file: the error names the file and the line of the node or edge
// at fault, and is a TopologyError (so a SpecValidationError) that keeps
// group.Compile's error.
func TestGroupTopologyErrors(t *testing.T) {
	type want struct {
		line int
		key  string
		msg  string // a substring of the message
	}
	cases := []struct {
		name string
		yaml string
		want []want
	}{
		{"unknown agent", `version: 1
nodes:
  a: {agent: a}
  b: {agent: ghost}
edges:
  - {from: a, to: b}
`, []want{{4, "nodes.b.agent", `unknown agent "ghost"`}}},
		{"unknown agent, block style", `version: 1
nodes:
  a:
    agent: ghost
`, []want{{4, "nodes.a.agent", `unknown agent "ghost"`}}},
		{"unknown node in an edge", `version: 1
nodes:
  a: {agent: a}
  b: {agent: b}
edges:
  - from: a
    to: b
  - from: a
    to: c
`, []want{{9, "edges[1].to", `unknown node "c"`}}},
		{"cycle", `version: 1
nodes:
  start: {agent: a}
  x: {agent: b}
  y: {agent: c}
  end: {agent: d}
edges:
  - {from: start, to: x}
  - {from: x, to: y}
  - {from: y, to: x}
  - {from: y, to: end}
`, []want{{10, "edges[2]", "cycle: x → y → x"}}},
		{"no entry node", `version: 1
name: g
nodes:
  a: {agent: a}
  b: {agent: b}
  c: {agent: c}
edges:
  - {from: a, to: b}
  - {from: b, to: a}
  - {from: b, to: c}
`, []want{{2, "", "no entry node"}, {9, "edges[1]", "cycle: a → b → a"}}},
		{"no terminal node", `version: 1
nodes:
  a: {agent: a}
  b: {agent: b}
edges:
  - {from: a, to: b}
  - {from: b, to: a}
`, []want{{1, "", "no entry node"}, {1, "", "no terminal node"}, {7, "edges[1]", "cycle: a → b → a"}}},
		{"no terminal node with an entry", `version: 1
nodes:
  a: {agent: a}
  b: {agent: b}
  c: {agent: c}
edges:
  - {from: a, to: b}
  - {from: b, to: c}
  - {from: c, to: b}
`, []want{{1, "", "no terminal node"}, {9, "edges[2]", "cycle: b → c → b"}}},
		{"fan-out feeding fan-out", `version: 1
nodes:
  a: {agent: a}
  b: {agent: b}
  c: {agent: c}
edges:
  - {from: a, to: b, fan_out: output.items}
  - from: b
    to: c
    fan_out: output.parts
`, []want{{10, "edges[1].fan_out", "fan-out feeding fan-out"}}},
		{"CEL that does not compile", `version: 1
nodes:
  a: {agent: a}
  b: {agent: b}
edges:
  - from: a
    to: b
    when: 'output.category =='
`, []want{{8, "edges[0].when", "does not compile"}}},
		{"CEL with an unknown variable", `version: 1
nodes: {a: {agent: a}, b: {agent: b}}
edges:
  - {from: a, to: b, input: 'item.x'}
`, []want{{4, "edges[0].input", "`item` is bound only in the input of a fan_out edge"}}},
		{"when that is not a bool", `version: 1
nodes: {a: {agent: a}, b: {agent: b}}
edges:
  - {from: a, to: b,
     when: '"yes"'}
`, []want{{5, "edges[0].when", "gives string, want bool"}}},
		{"fan_out that is not a list", `version: 1
nodes: {a: {agent: a}, b: {agent: b}}
edges:
  - {from: a, to: b, fan_out: 'size(output)'}
`, []want{{4, "edges[0].fan_out", "gives int, want a list"}}},
		{"self-loop", `version: 1
nodes: {a: {agent: a}, b: {agent: b}}
edges:
  - {from: a, to: b}
  - {from: b, to: b}
`, []want{{5, "edges[1]", `self-loop on node "b"`}}},
		{"too much concurrency", `version: 1
nodes: {a: {agent: a}, b: {agent: b}}
edges:
  - {from: a, to: b, fan_out: output, max_concurrency: 20000}
`, []want{{4, "edges[0].max_concurrency", "20000: want"}}},
		{"team with an unknown delegate", `version: 1
kind: team
coordinator: a
delegates:
  - b
  - ghost
`, []want{{6, "delegates[1]", `unknown agent "ghost"`}}},
		{"team with an unknown coordinator", `version: 1
kind: team
coordinator: ghost
delegates: [a]
`, []want{{3, "coordinator", `unknown agent "ghost"`}}},
		{"team coordinating itself", `version: 1
kind: team
coordinator: a
delegates: [b, a]
`, []want{{4, "delegates[1]", "cannot be its own delegate"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			writeTree(t, map[string]string{
				"specs/agents/a.yaml": "version: 1\nmodel: test:echo\n",
				"specs/agents/b.yaml": "version: 1\nmodel: test:echo\n",
				"specs/agents/c.yaml": "version: 1\nmodel: test:echo\n",
				"specs/agents/d.yaml": "version: 1\nmodel: test:echo\n",
				"specs/groups/g.yaml": c.yaml,
			})
			set, err := Load("specs", Env{})
			if set != nil || err == nil {
				t.Fatal("Load accepted the group")
			}
			if !errors.Is(err, svc.ErrTopology) || !errors.Is(err, svc.ErrSpecValidation) || svc.KindOf(err) != svc.KindTopology {
				t.Errorf("err %v: want a TopologyError that is a SpecValidationError", err)
			}
			errs := specErrors(t, err)
			if len(errs) != len(c.want) {
				t.Fatalf("%d errors, want %d:%s", len(errs), len(c.want), dumpErrors(errs))
			}
			for i, w := range c.want {
				e := errs[i]
				if e.File != "specs/groups/g.yaml" || e.Line != w.line || e.Key != w.key || !strings.Contains(e.Msg, w.msg) {
					t.Errorf("error %d: %v (line %d, key %q)\nwant line %d, key %q, a message with %q", i, e, e.Line, e.Key, w.line, w.key, w.msg)
				}
				var ge *group.Error
				if !errors.As(e, &ge) || ge.Key != e.Key || ge.Group != "g" {
					t.Errorf("error %d: the *group.Error is lost: %#v", i, ge)
				}
				if info := svc.ErrorInfoOf(e); info.Type != "TopologyError" || !strings.HasPrefix(info.Message, "specs/groups/g.yaml:") {
					t.Errorf("ErrorInfoOf = %+v", info)
				}
			}
			// Validate says the same about the file.
			res, verr := Validate("specs", Env{})
			if verr != nil || len(res) != 5 || res[4].File != "specs/groups/g.yaml" || res[4].Err == nil {
				t.Fatalf("Validate = %+v, %v", res, verr)
			}
			if got := specErrors(t, res[4].Err); len(got) != len(errs) || got[0].Error() != errs[0].Error() {
				t.Errorf("Validate reports%s\nLoad reports%s", dumpErrors(got), dumpErrors(errs))
			}
		})
	}
}

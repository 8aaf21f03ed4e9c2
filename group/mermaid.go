package group

import (
	"fmt"
	"slices"
	"strings"

	"github.com/svc-dev/svc"
)

// Topology describes the group as GET /groups/{name}/topology serves it:
// nodes and edges as written, entry and terminal nodes, team fields, and a
// Mermaid flowchart. Lists are never nil, so they marshal as []. A team's
// entry and terminal node is its coordinator, and its max_rounds is the
// effective value.
func (g *Graph) Topology() svc.Topology {
	d := g.Def
	t := svc.Topology{
		Name:     d.Name,
		Kind:     d.EffectiveKind(),
		Nodes:    nonNil(slices.Clone(d.Nodes)),
		Edges:    nonNil(slices.Clone(d.Edges)),
		Entry:    nonNil(slices.Clone(g.Entry)),
		Terminal: nonNil(slices.Clone(g.Terminal)),
		Mermaid:  Mermaid(d),
	}
	if t.Kind == svc.GroupTeam {
		t.Entry = []string{d.Coordinator}
		t.Terminal = []string{d.Coordinator}
		t.Coordinator = d.Coordinator
		t.Delegates = slices.Clone(d.Delegates)
		t.MaxRounds = d.MaxRounds
		if t.MaxRounds == 0 {
			t.MaxRounds = svc.DefaultMaxRounds
		}
	}
	return t
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// Mermaid renders g as a Mermaid flowchart ("flowchart TD") to paste into
// docs. Graph nodes read `id["name (agent)"]`; edges are labelled with
// their when expression and "fan_out: expr", and fan-out edges are drawn
// thick (==>). A team draws its coordinator with an edge labelled
// "delegate" to each delegate. Node ids are derived from the names, made
// safe for Mermaid ("n_" prefix, other characters as '_', a numeric suffix
// on collision); labels escape what Mermaid would parse. The output
// depends only on g, and any group renders, valid or not.
func Mermaid(g svc.Group) string {
	var b strings.Builder
	b.WriteString("flowchart TD\n")
	ids := mermaidIDs{byName: map[string]string{}, used: map[string]bool{}}
	if g.EffectiveKind() == svc.GroupTeam {
		coord := ids.id(g.Coordinator)
		fmt.Fprintf(&b, "    %s[\"%s (coordinator)\"]\n", coord, mermaidText(g.Coordinator))
		for _, d := range g.Delegates {
			if _, seen := ids.byName[d]; seen {
				continue
			}
			fmt.Fprintf(&b, "    %s[\"%s\"]\n", ids.id(d), mermaidText(d))
		}
		for _, d := range g.Delegates {
			fmt.Fprintf(&b, "    %s -->|\"delegate\"| %s\n", coord, ids.id(d))
		}
		return b.String()
	}
	for _, n := range g.Nodes {
		if _, seen := ids.byName[n.Name]; seen {
			continue
		}
		fmt.Fprintf(&b, "    %s[\"%s (%s)\"]\n", ids.id(n.Name), mermaidText(n.Name), mermaidText(n.Agent))
	}
	for _, e := range g.Edges {
		var label []string
		if e.When != "" {
			label = append(label, e.When)
		}
		if e.FanOut != "" {
			label = append(label, "fan_out: "+e.FanOut)
		}
		arrow := "-->"
		if e.FanOut != "" {
			arrow = "==>"
		}
		from, to := ids.id(e.From), ids.id(e.To)
		if len(label) == 0 {
			fmt.Fprintf(&b, "    %s %s %s\n", from, arrow, to)
			continue
		}
		fmt.Fprintf(&b, "    %s %s|\"%s\"| %s\n", from, arrow, mermaidText(strings.Join(label, "; ")), to)
	}
	return b.String()
}

// mermaidIDs hands out one stable id per name, in order of first use.
type mermaidIDs struct {
	byName map[string]string
	used   map[string]bool
}

func (m *mermaidIDs) id(name string) string {
	if id, ok := m.byName[name]; ok {
		return id
	}
	// The prefix keeps ids off Mermaid's keywords (end, graph, style...)
	// and off a leading digit.
	base := "n_" + strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_':
			return r
		}
		return '_'
	}, name)
	id := base
	for i := 2; m.used[id]; i++ {
		id = fmt.Sprintf("%s_%d", base, i)
	}
	m.byName[name] = id
	m.used[id] = true
	return id
}

// mermaidText escapes s for a quoted Mermaid label with its entity codes:
// quotes would end the label, '<' and '&' would be read as HTML, '|' ends
// an edge label, '#' starts an entity and '`' a markdown string; line
// breaks become spaces.
var mermaidReplacer = strings.NewReplacer(
	"#", "#35;",
	`"`, "#quot;",
	"<", "#lt;",
	">", "#gt;",
	"&", "#amp;",
	"|", "#124;",
	"`", "#96;",
	"\r\n", " ",
	"\n", " ",
	"\r", " ",
	"\t", " ",
)

func mermaidText(s string) string { return mermaidReplacer.Replace(s) }

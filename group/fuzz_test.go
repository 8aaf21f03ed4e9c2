package group_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/group"
)

// FuzzCompile builds groups from arbitrary names and expressions (as a
// YAML file or an HTTP client may send them) and evaluates whatever
// compiles over arbitrary JSON: nothing may panic, every error must be a
// *group.Error, and every value produced must be JSON.
func FuzzCompile(f *testing.F) {
	f.Add("a", "b", `output.category == "billing"`, "", "", 0, `{"category":"billing"}`)
	f.Add("a", "b", "", `output.items`, `{"i": item, "m": metadata.k}`, 4, `{"items":[1,2.5,"x",null,{"a":[]}]}`)
	f.Add("b", "a", "output", "", "input", 0, `true`)
	f.Add("a", "c", `size(output) > 3`, `output.split(",")`, "", 10001, `"a,b,c,d"`)
	f.Add("a.b", "end", `item`, `[1.0/0.0]`, `{1.5: 2}`, -1, `{`)
	f.Add("a", "b", `lists.range(1000).map(x, lists.range(1000))`, `[output]`, `timestamp("2024-01-01T00:00:00Z")`, 1, `9007199254740993`)
	f.Fuzz(func(t *testing.T, from, to, when, fanOut, input string, maxConc int, output string) {
		g := svc.Group{
			Name:  "g",
			Nodes: []svc.GroupNode{{Name: "a", Agent: "x"}, {Name: "b", Agent: "y"}, {Name: "c", Agent: "z"}},
			Edges: []svc.GroupEdge{
				{From: "a", To: "b", When: when, FanOut: fanOut, Input: input, MaxConcurrency: maxConc},
				{From: from, To: to},
			},
		}
		_ = group.Mermaid(g)
		gr, err := group.Compile(g, nil)
		if err != nil {
			if gr != nil {
				t.Fatal("Compile returned a graph and an error")
			}
			checkErrors(t, err)
			return
		}
		_ = gr.Topology()
		v := group.Vars{
			Output:   json.RawMessage(output),
			Input:    json.RawMessage(output),
			Metadata: map[string]string{"k": output},
			Item:     json.RawMessage(output),
		}
		for _, n := range gr.Order {
			for _, e := range gr.Nodes[n].Out {
				if _, err := e.Fires(v); err != nil {
					checkErrors(t, err)
				}
				if e.IsFanOut() {
					items, err := e.Items(v)
					if err != nil {
						checkErrors(t, err)
					}
					for _, it := range items {
						if !json.Valid(it) {
							t.Fatalf("Items gave invalid JSON %q", it)
						}
					}
				}
				in, err := e.BuildInput(v)
				if err != nil {
					checkErrors(t, err)
					continue
				}
				// Without an Input expression the value passes through
				// untouched, valid or not; with one it must be JSON.
				if e.Input != "" && !json.Valid(in) {
					t.Fatalf("BuildInput gave invalid JSON %q", in)
				}
			}
		}
	})
}

func checkErrors(t *testing.T, err error) {
	t.Helper()
	list := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		list = j.Unwrap()
	}
	for _, e := range list {
		var ge *group.Error
		if !errors.As(e, &ge) || !errors.Is(e, svc.ErrTopology) {
			t.Fatalf("error %v (%T) is not a *group.Error", e, e)
		}
		if strings.TrimSpace(ge.Msg) == "" {
			t.Fatalf("error with an empty message: %+v", ge)
		}
	}
}

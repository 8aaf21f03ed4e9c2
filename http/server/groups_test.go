package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/http/server"
)

func TestGroupList(t *testing.T) {
	srv, _ := newRouter(t)
	r := do(t, srv, "GET", "/groups", "")
	var names []string
	if r.status != 200 || json.Unmarshal(r.body, &names) != nil {
		t.Fatalf("GET /groups = %d %s", r.status, r.body)
	}
	if want := []string{"both", "empty", "err", "pair", "split"}; !slices.Equal(names, want) {
		t.Errorf("GET /groups = %q, want %q", names, want)
	}
	r = do(t, srv, "POST", "/groups", "{}")
	problem(t, r, 405)
	if got := r.header.Values("Allow"); len(got) != 1 || got[0] != "GET" {
		t.Errorf("405 Allow = %q, want [GET]", got)
	}
}

func TestGroupTopology(t *testing.T) {
	srv, _ := newRouter(t)

	r := do(t, srv, "GET", "/groups/split/topology", "")
	if r.status != 200 {
		t.Fatalf("GET topology = %d %s", r.status, r.body)
	}
	// The wire names, checked on the raw JSON.
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(r.body, &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"name", "kind", "nodes", "edges", "entry", "terminal", "mermaid"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("topology lacks %q: %s", k, r.body)
		}
	}
	var topo svc.Topology
	if err := json.Unmarshal(r.body, &topo); err != nil {
		t.Fatal(err)
	}
	if topo.Name != "split" || topo.Kind != svc.GroupGraph || len(topo.Nodes) != 3 || len(topo.Edges) != 2 ||
		!slices.Equal(topo.Entry, []string{"a"}) || !slices.Equal(topo.Terminal, []string{"b", "c"}) {
		t.Errorf("topology %+v", topo)
	}
	if topo.Edges[0].When != `output != ""` {
		t.Errorf("condition %q, want it as written", topo.Edges[0].When)
	}
	if !strings.Contains(topo.Mermaid, "a --> b") {
		t.Errorf("mermaid %q", topo.Mermaid)
	}

	p := problem(t, do(t, srv, "GET", "/groups/nope/topology", ""), 404)
	if p.Error != "RegistryError" || !strings.Contains(p.Detail, "nope") {
		t.Errorf("topology of nope: %+v", p)
	}
	// A name that needs escaping arrives unescaped.
	if p := problem(t, do(t, srv, "GET", "/groups/a%20b/topology", ""), 404); !strings.Contains(p.Detail, "group a b ") {
		t.Errorf("escaped group name reached the backend as %q", p.Detail)
	}
	r = do(t, srv, "POST", "/groups/pair/topology", "{}")
	problem(t, r, 405)
	if got := r.header.Values("Allow"); len(got) != 1 || got[0] != "GET" {
		t.Errorf("405 Allow = %q, want [GET]", got)
	}
}

// nilLists has no groups, and answers any topology with nil lists: what a
// backend may well return for a group it has not finished describing.
type nilLists struct{ *fakeBackend }

func (nilLists) Groups(context.Context) ([]string, error) { return nil, nil }

func (nilLists) GroupTopology(_ context.Context, name string) (svc.Topology, error) {
	return svc.Topology{Name: name, Kind: svc.GroupGraph}, nil
}

// TestGroupNilLists checks that empty lists are arrays on the wire, never
// null.
func TestGroupNilLists(t *testing.T) {
	rt, err := server.NewRouter(nilLists{&fakeBackend{}})
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, rt)
	if r := do(t, srv, "GET", "/groups", ""); r.status != 200 || strings.TrimSpace(string(r.body)) != "[]" {
		t.Errorf("GET /groups = %d %s, want []", r.status, r.body)
	}
	r := do(t, srv, "GET", "/groups/x/topology", "")
	var raw map[string]json.RawMessage
	if r.status != 200 || json.Unmarshal(r.body, &raw) != nil {
		t.Fatalf("GET topology = %d %s", r.status, r.body)
	}
	for _, k := range []string{"nodes", "edges", "entry", "terminal"} {
		if string(raw[k]) != "[]" {
			t.Errorf("%s = %s, want []", k, raw[k])
		}
	}
}

func TestGroupRunShapes(t *testing.T) {
	srv, f := newRouter(t)

	r := do(t, srv, "POST", "/groups/pair/run", `{"id":"t1","input":{"x":[1,"y"]},"metadata":{"k":"v"}}`)
	if r.status != 200 {
		t.Fatalf("run pair = %d %s", r.status, r.body)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(r.body, &raw); err != nil {
		t.Fatal(err)
	}
	if _, ok := raw["group"]; ok {
		t.Errorf("one terminal answered with a group envelope: %s", r.body)
	}
	var res svc.AgentResult
	if err := json.Unmarshal(r.body, &res); err != nil {
		t.Fatal(err)
	}
	if !res.Success || res.AgentName != "echo" || string(res.Output) != `{"x":[1,"y"]}` {
		t.Errorf("pair result %s", r.body)
	}
	if task, _ := f.seen(); task.ID != "t1" || task.Metadata["k"] != "v" {
		t.Errorf("task not passed whole: %+v", task)
	}

	r = do(t, srv, "POST", "/groups/split/run", `{"task":{"input":"hi"},"request_id":"rid-split"}`)
	if r.status != 200 {
		t.Fatalf("run split = %d %s", r.status, r.body)
	}
	if err := json.Unmarshal(r.body, &raw); err != nil || string(raw["group"]) != "true" {
		t.Fatalf("several terminals answered without \"group\": true: %s", r.body)
	}
	var g svc.GroupResult
	if err := json.Unmarshal(r.body, &g); err != nil {
		t.Fatal(err)
	}
	if !g.Success || g.Metadata.TraceID != "rid-split" || g.Metadata.GroupName != "split" ||
		!slices.Equal(slices.Sorted(maps.Keys(g.Outputs)), []string{"b", "c"}) {
		t.Errorf("split result %s", r.body)
	}
	for leaf, out := range g.Outputs {
		if string(out.Output) != `"hi"` {
			t.Errorf("output of %s = %s", leaf, out.Output)
		}
	}

	p := problem(t, do(t, srv, "POST", "/groups/nope/run", `{"input":1}`, "X-Request-Id", "rid-nope"), 404)
	if p.Error != "RegistryError" || p.RequestID != "rid-nope" {
		t.Errorf("run nope: %+v", p)
	}
	r = do(t, srv, "GET", "/groups/pair/run", "")
	problem(t, r, 405)
	if got := r.header.Values("Allow"); len(got) != 1 || got[0] != "POST" {
		t.Errorf("405 Allow = %q, want [POST]", got)
	}
}

// TestGroupRunErrors checks that a group run's errors go through the one
// table, like an agent run's.
func TestGroupRunErrors(t *testing.T) {
	srv, _ := newRouter(t)
	for _, tc := range []struct {
		kind   svc.Kind
		status int
	}{
		{svc.KindTopology, 400},
		{svc.KindCondition, 500}, // a condition failing on a run's data
		{svc.KindAllAgentsFailed, 500},
		{svc.KindSpecValidation, 400},
		{svc.KindBudgetExceeded, 429},
		{svc.KindDepthLimit, 429},
		{svc.KindTimeout, 504},
		{svc.KindCancelled, 409},
		{svc.KindShuttingDown, 503},
		{svc.KindModel, 502},
	} {
		t.Run(string(tc.kind), func(t *testing.T) {
			body := fmt.Sprintf(`{"input":%q}`, tc.kind)
			p := problem(t, do(t, srv, "POST", "/groups/err/run", body, "X-Request-Id", "rid-g"), tc.status)
			if p.Error != string(tc.kind) || p.Detail != "boom: "+string(tc.kind) || p.RequestID != "rid-g" || p.Reason != "because" {
				t.Errorf("problem = %+v", p)
			}
		})
	}
}

// TestGroupRunBackendBug checks that a RunResult with no envelope or with
// both is a logged 500, never a 200 with null or an ambiguous body.
func TestGroupRunBackendBug(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	srv, _ := newRouter(t, server.WithLogger(zap.New(core)))
	for _, name := range []string{"empty", "both"} {
		logs.TakeAll()
		p := problem(t, do(t, srv, "POST", "/groups/"+name+"/run", `{"input":1}`), 500)
		if p.Error != "AgentRuntimeError" || p.Detail != "internal server error" {
			t.Errorf("%s: %+v", name, p)
		}
		if e := logs.FilterMessage("internal error").All(); len(e) != 1 || !strings.Contains(fmt.Sprint(e[0].ContextMap()["error"]), name) {
			t.Errorf("%s: not logged: %+v", name, e)
		}
	}
}

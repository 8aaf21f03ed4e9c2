package group_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/group"
)

// compileEdge compiles a two-node graph with e as its only edge (from a to
// b) and returns the compiled edge.
func compileEdge(t *testing.T, e svc.GroupEdge) *group.Edge {
	t.Helper()
	e.From, e.To = "a", "b"
	gr, err := group.Compile(svc.Group{Name: "g", Nodes: nodes("a", "b"), Edges: []svc.GroupEdge{e}}, nil)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return gr.Nodes["a"].Out[0]
}

// wantErr checks that err is an *Error with the key and a message that
// contains msg.
func wantErr(t *testing.T, err error, key, msg string) {
	t.Helper()
	var ge *group.Error
	if !errors.As(err, &ge) {
		t.Fatalf("error %v is not a *group.Error", err)
	}
	if ge.Group != "g" || ge.Key != key || !strings.Contains(ge.Msg, msg) {
		t.Fatalf("error = {%q %q %q}, want key %q and a message containing %q", ge.Group, ge.Key, ge.Msg, key, msg)
	}
	// Evaluation happens during a run: the run failed, the request (and
	// the group) did not.
	if !errors.Is(err, svc.ErrCondition) || errors.Is(err, svc.ErrTopology) || errors.Is(err, svc.ErrSpecValidation) || svc.KindOf(err) != svc.KindCondition {
		t.Errorf("runtime error %v (%s) is not a ConditionError, or also a TopologyError", err, svc.KindOf(err))
	}
}

func raw(s string) json.RawMessage { return json.RawMessage(s) }

func TestFires(t *testing.T) {
	tests := []struct {
		name    string
		when    string
		vars    group.Vars
		want    bool
		wantErr string // message fragment; key is edges[0].when
	}{
		{"no condition", "", group.Vars{}, true, ""},
		{"string field true", `output.category == "billing"`, group.Vars{Output: raw(`{"category":"billing"}`)}, true, ""},
		{"string field false", `output.category == "billing"`, group.Vars{Output: raw(`{"category":"tech"}`)}, false, ""},
		{"upstream input", `input.lang == "fr"`, group.Vars{Input: raw(`{"lang":"fr"}`)}, true, ""},
		{"metadata", `metadata.tier == "gold"`, group.Vars{Metadata: map[string]string{"tier": "gold"}}, true, ""},
		{"metadata absent", `"tier" in metadata`, group.Vars{}, false, ""},
		{"number against int literal", `output.n > 3`, group.Vars{Output: raw(`{"n": 5}`)}, true, ""},
		{"number equality", `output.n == 5`, group.Vars{Output: raw(`{"n": 5}`)}, true, ""},
		{"int against double literal", `output.score >= 0.8`, group.Vars{Output: raw(`{"score": 1}`)}, true, ""},
		{"has", `has(output.error)`, group.Vars{Output: raw(`{"ok": true}`)}, false, ""},
		{"bare bool output", `output`, group.Vars{Output: raw(`true`)}, true, ""},
		{"null output", `output == null`, group.Vars{}, true, ""},
		{"string extension", `output.text.lowerAscii().contains("urgent")`, group.Vars{Output: raw(`{"text":"URGENT: help"}`)}, true, ""},
		{"list size", `size(output.items) > 1`, group.Vars{Output: raw(`{"items":[1,2]}`)}, true, ""},
		{"unused variables are not decoded", `metadata.x == "1"`, group.Vars{Output: raw(`not json`), Input: raw(`{`), Metadata: map[string]string{"x": "1"}}, true, ""},
		{"missing key", `output.missing == 1`, group.Vars{Output: raw(`{}`)}, false, "evaluating output.missing == 1: no such key: missing"},
		{"not a bool at run time", `output.flag`, group.Vars{Output: raw(`{"flag":"yes"}`)}, false, "output.flag gave string, want bool"},
		{"output not JSON", `output.ok`, group.Vars{Output: raw(`{"ok":`)}, false, "output is not JSON"},
		{"input not JSON", `input.ok`, group.Vars{Input: raw(`nope`)}, false, "input is not JSON"},
		{"trailing data", `output.ok`, group.Vars{Output: raw(`{"ok":true} {}`)}, false, "output is not JSON: data after the JSON value"},
		{"big integer compares", `output.id == 9007199254740993`, group.Vars{Output: raw(`{"id": 9007199254740993}`)}, true, ""},
		{"runaway", `lists.range(100000).map(x, lists.range(1000).map(y, y)).size() > 0`, group.Vars{}, false, "cost limit exceeded"},
		{"overflow", `int(output.n) * 9223372036854775807 > 0`, group.Vars{Output: raw(`{"n": 2}`)}, false, "overflow"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := compileEdge(t, svc.GroupEdge{When: tt.when})
			got, err := e.Fires(tt.vars)
			if tt.wantErr != "" {
				wantErr(t, err, "edges[0].when", tt.wantErr)
				return
			}
			if err != nil {
				t.Fatalf("Fires: %v", err)
			}
			if got != tt.want {
				t.Fatalf("Fires = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestItems(t *testing.T) {
	tests := []struct {
		name    string
		fanOut  string
		vars    group.Vars
		want    []string
		wantErr string // key is edges[0].fan_out
	}{
		{"objects", `output.items`, group.Vars{Output: raw(`{"items":[{"id":1},{"id":2}]}`)}, []string{`{"id":1}`, `{"id":2}`}, ""},
		{"every JSON shape, integers kept", `output`, group.Vars{Output: raw(`[1, 2.5, "x", null, true, {"a":[1,-0.5]}, 1e3]`)},
			[]string{`1`, `2.5`, `"x"`, `null`, `true`, `{"a":[1,-0.5]}`, `1000`}, ""},
		{"big integers stay exact", `output.ids`, group.Vars{Output: raw(`{"ids":[9007199254740993, -9007199254740993, 18446744073709551615, 9007199254740992, 12345678901234567890123]}`)},
			[]string{`9007199254740993`, `-9007199254740993`, `18446744073709551615`, `9007199254740992`, `1.2345678901234568e+22`}, ""},
		{"split", `output.text.split(",")`, group.Vars{Output: raw(`{"text":"a,b"}`)}, []string{`"a"`, `"b"`}, ""},
		{"ints", `lists.range(3)`, group.Vars{}, []string{`0`, `1`, `2`}, ""},
		{"computed", `output.map(x, x * 2.0)`, group.Vars{Output: raw(`[1, 1.5]`)}, []string{`2`, `3`}, ""},
		{"from metadata", `metadata.langs.split(" ")`, group.Vars{Metadata: map[string]string{"langs": "fr de"}}, []string{`"fr"`, `"de"`}, ""},
		{"empty", `output.items`, group.Vars{Output: raw(`{"items":[]}`)}, []string{}, ""},
		{"not a list at run time", `output.items`, group.Vars{Output: raw(`{"items":"abc"}`)}, nil, "output.items gave string, want a list"},
		{"item not JSON", `[1.0, 0.0/0.0]`, group.Vars{}, nil, "item 1: NaN is not a JSON number"},
		{"missing key", `output.items`, group.Vars{Output: raw(`{}`)}, nil, "no such key: items"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := compileEdge(t, svc.GroupEdge{FanOut: tt.fanOut})
			if !e.IsFanOut() {
				t.Fatal("IsFanOut = false on a fan_out edge")
			}
			items, err := e.Items(tt.vars)
			if tt.wantErr != "" {
				wantErr(t, err, "edges[0].fan_out", tt.wantErr)
				return
			}
			if err != nil {
				t.Fatalf("Items: %v", err)
			}
			got := make([]string, len(items))
			for i, it := range items {
				got[i] = string(it)
			}
			if items == nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Items = %q (nil %v), want %q", got, items == nil, tt.want)
			}
		})
	}
}

func TestItemsOnPlainEdge(t *testing.T) {
	e := compileEdge(t, svc.GroupEdge{})
	if e.IsFanOut() {
		t.Fatal("IsFanOut = true on a plain edge")
	}
	_, err := e.Items(group.Vars{})
	wantErr(t, err, "edges[0].fan_out", "edge does not fan out")
}

func TestBuildInput(t *testing.T) {
	tests := []struct {
		name    string
		edge    svc.GroupEdge
		vars    group.Vars
		want    string
		wantErr string // key is edges[0].input
	}{
		{"output passes through as is", svc.GroupEdge{}, group.Vars{Output: raw(`{ "n" : 3.0 }`)}, `{ "n" : 3.0 }`, ""},
		{"fan-out item passes through", svc.GroupEdge{FanOut: "output"}, group.Vars{Output: raw(`[1]`), Item: raw(`{"id": 7}`)}, `{"id": 7}`, ""},
		{"field", svc.GroupEdge{Input: `output.ticket`}, group.Vars{Output: raw(`{"ticket":{"text":"hi"}}`)}, `{"text":"hi"}`, ""},
		{"integer round trip", svc.GroupEdge{Input: `{"n": output.n}`}, group.Vars{Output: raw(`{"n": 3}`)}, `{"n":3}`, ""},
		{"integral double", svc.GroupEdge{Input: `{"n": output.n * 2.0}`}, group.Vars{Output: raw(`{"n": 3}`)}, `{"n":6}`, ""},
		{"fraction", svc.GroupEdge{Input: `output.n / 2.0`}, group.Vars{Output: raw(`{"n": 3}`)}, `1.5`, ""},
		{"int result", svc.GroupEdge{Input: `{"count": size(output.items)}`}, group.Vars{Output: raw(`{"items":[1,2]}`)}, `{"count":2}`, ""},
		{"big int keeps precision", svc.GroupEdge{Input: `9007199254740993`}, group.Vars{}, `9007199254740993`, ""},
		{"uint", svc.GroupEdge{Input: `3u`}, group.Vars{}, `3`, ""},
		{"item, input and metadata", svc.GroupEdge{FanOut: "output", Input: `{"item": item, "lang": input.lang, "tier": metadata.tier}`},
			group.Vars{Output: raw(`[1]`), Input: raw(`{"lang":"fr"}`), Metadata: map[string]string{"tier": "gold"}, Item: raw(`{"id":1}`)},
			`{"item":{"id":1},"lang":"fr","tier":"gold"}`, ""},
		{"keys sorted, HTML not escaped", svc.GroupEdge{Input: `{"z": "<b>&</b>", "a": null}`}, group.Vars{}, `{"a":null,"z":"<b>&</b>"}`, ""},
		{"bytes as base64", svc.GroupEdge{Input: `b"hi"`}, group.Vars{}, `"aGk="`, ""},
		{"timestamp", svc.GroupEdge{Input: `timestamp("2024-01-02T03:04:05Z")`}, group.Vars{}, `"2024-01-02T03:04:05Z"`, ""},
		{"duration", svc.GroupEdge{Input: `duration("1m30s")`}, group.Vars{}, `"90s"`, ""},
		{"non-string keys", svc.GroupEdge{Input: `{1: "a", true: "b"}`}, group.Vars{}, `{"1":"a","true":"b"}`, ""},
		{"null output", svc.GroupEdge{Input: `{"was": output}`}, group.Vars{}, `{"was":null}`, ""},
		{"missing key", svc.GroupEdge{Input: `output.missing`}, group.Vars{Output: raw(`{}`)}, "", "evaluating output.missing: no such key: missing"},
		{"not JSON: number out of range", svc.GroupEdge{Input: `output`}, group.Vars{Output: raw(`1e400`)}, "", "output: +Inf is not a JSON number"},
		{"not JSON: infinity", svc.GroupEdge{Input: `1.0 / 0.0`}, group.Vars{}, "", "1.0 / 0.0: +Inf is not a JSON number"},
		{"not JSON: double key", svc.GroupEdge{Input: `{1.5: "a"}`}, group.Vars{}, "", "a map key of type double is not a JSON object key"},
		{"item not JSON", svc.GroupEdge{FanOut: "output", Input: `item`}, group.Vars{Item: raw(`{`)}, "", "item is not JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := compileEdge(t, tt.edge)
			got, err := e.BuildInput(tt.vars)
			if tt.wantErr != "" {
				wantErr(t, err, "edges[0].input", tt.wantErr)
				return
			}
			if err != nil {
				t.Fatalf("BuildInput: %v", err)
			}
			if string(got) != tt.want {
				t.Fatalf("BuildInput = %s, want %s", got, tt.want)
			}
		})
	}
}

// One compiled graph serves many runs at once.
func TestConcurrentEvaluation(t *testing.T) {
	gr, err := group.Compile(svc.Group{
		Name:  "g",
		Nodes: nodes("a", "b", "c"),
		Edges: []svc.GroupEdge{
			{From: "a", To: "b", When: `int(output.n) % 2 == 0`},
			{From: "a", To: "c", FanOut: `lists.range(int(output.n))`, Input: `{"i": item, "of": output.n, "who": metadata.who}`},
		},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	when, fan := gr.Nodes["a"].Out[0], gr.Nodes["a"].Out[1]
	const workers, rounds = 8, 200
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for r := range rounds {
				n := w*rounds + r
				v := group.Vars{Output: raw(fmt.Sprintf(`{"n": %d}`, n%7)), Metadata: map[string]string{"who": fmt.Sprint(w)}}
				fires, err := when.Fires(v)
				if err != nil || fires != (n%7%2 == 0) {
					errs <- fmt.Errorf("Fires(%d) = %v, %v", n%7, fires, err)
					return
				}
				items, err := fan.Items(v)
				if err != nil || len(items) != n%7 {
					errs <- fmt.Errorf("Items(%d) = %d items, %v", n%7, len(items), err)
					return
				}
				for i, it := range items {
					v.Item = it
					in, err := fan.BuildInput(v)
					want := fmt.Sprintf(`{"i":%d,"of":%d,"who":"%d"}`, i, n%7, w)
					if err != nil || string(in) != want {
						errs <- fmt.Errorf("BuildInput = %s, %v; want %s", in, err, want)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

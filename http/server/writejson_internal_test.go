package server

import (
	"context"
	"encoding/json"
	"errors"
	"iter"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"testing"

	svc "github.com/svc-dev/svc"
)

// TestWriteJSONIsMarshal: writeJSON's answer, now encoded into a pooled
// buffer, is json.Marshal's bytes and a newline, for results with HTML
// characters, unicode, raw outputs with spaces, failures and nested
// values, written one after another (so a reused buffer shows).
func TestWriteJSONIsMarshal(t *testing.T) {
	values := []any{
		svc.AgentResult{AgentName: "echo", TaskID: "t", Success: true, Output: json.RawMessage(` { "text" : "<b>&amp;</b> \u2028 é 😀" } `),
			Metadata: svc.ResultMetadata{TraceID: "bench", Model: "test:echo", Attempts: 1, Backend: "local", TokensUsed: 4, DurationMS: 0.05, CostUSD: 1e-7, ModelsTried: []string{"a", "<b>"}}},
		svc.AgentResult{AgentName: "a\"b\\c\x01", Error: &svc.ErrorInfo{Type: "ModelError", Message: "bad \xff utf-8 <script>", Reason: "r"}},
		svc.AgentResult{},
		[]svc.AgentResult{{AgentName: "x", Output: json.RawMessage(`[1, 2.50, "\u00e9"]`)}, {AgentName: "y"}},
		[]string{},
		map[string]string{"status": "ok", "<": ">"},
		svc.AgentResult{AgentName: "short"},
	}
	for i, v := range values {
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, '\n')
		rec := httptest.NewRecorder()
		if err := writeJSON(rec, 200, v); err != nil {
			t.Fatal(err)
		}
		if got := rec.Body.String(); got != string(want) {
			t.Errorf("value %d:\n got %s\nwant %s", i, got, want)
		}
		if cl := rec.Header().Get("Content-Length"); cl != strconv.Itoa(len(want)) {
			t.Errorf("value %d: Content-Length %s, want %d", i, cl, len(want))
		}
	}
	// An encoding error is returned before anything is written.
	rec := httptest.NewRecorder()
	err := writeJSON(rec, 200, svc.AgentResult{Output: json.RawMessage(`{bad`)})
	var me *json.MarshalerError
	if !errors.As(err, &me) || rec.Body.Len() != 0 {
		t.Errorf("writeJSON of invalid output: %v, wrote %q", err, rec.Body.String())
	}
}

// TestAppendAgentResultIsMarshal: the run answer's encoder writes
// json.Marshal's bytes for results of every shape (escaping, unicode,
// invalid UTF-8, floats in both notations, optional fields), and declines
// (so that json.Marshal answers) what it would not write the same.
func TestAppendAgentResultIsMarshal(t *testing.T) {
	strs := []string{"", "plain", `q"b\s`, "<script>&</script>", "ctl \x00\x01\b\f\n\r\t\x1f\x7f", "é 日本語 😀 \u2028 \u2029",
		"bad \xff\xfe utf-8", "\xe2\x80", "ends in \xe2"}
	floats := []float64{0, 0.05, 1, -2.5, 1e-6, 9.99e-7, 1e-7, 1e20, 1e21, 123456789.125, -1e-300, math.MaxFloat64, math.SmallestNonzeroFloat64, math.Copysign(0, -1)}
	outputs := []json.RawMessage{nil, {}, json.RawMessage(`null`), json.RawMessage(`{"text":"hello world"}`), json.RawMessage(`[1,2.50,"\u00e9",{"a":[]}]`),
		json.RawMessage(`"a\"b\\"`), json.RawMessage("\"bad \xff\""), json.RawMessage(`"é 😀"`),
		// Not plain: compacted or escaped by encoding/json.
		json.RawMessage(` {"a" : 1} `), json.RawMessage(`"<b>"`), json.RawMessage("\"\u2028\""), json.RawMessage(`{"a":"&"}`), json.RawMessage("[1,\n2]"),
	}
	var cases []svc.AgentResult
	for i, s := range strs {
		cases = append(cases, svc.AgentResult{AgentName: s, TaskID: strs[(i+1)%len(strs)], Success: i%2 == 0,
			Error:    &svc.ErrorInfo{Type: s, Message: strs[(i+2)%len(strs)], Reason: strs[(i+3)%len(strs)]},
			Metadata: svc.ResultMetadata{TraceID: s, Model: s, Backend: s, ModelsTried: []string{s, "x"}, CostUnknown: i%3 == 0}})
	}
	for i, f := range floats {
		cases = append(cases, svc.AgentResult{Metadata: svc.ResultMetadata{DurationMS: f, CostUSD: floats[(i+1)%len(floats)], TokensUsed: int64(i) - 3, Attempts: i}})
	}
	for _, o := range outputs {
		cases = append(cases, svc.AgentResult{AgentName: "echo", Success: true, Output: o, Metadata: svc.ResultMetadata{ModelsTried: []string{}}})
	}
	cases = append(cases, svc.AgentResult{Metadata: svc.ResultMetadata{TokensUsed: math.MinInt64, Attempts: math.MaxInt}},
		svc.AgentResult{Error: &svc.ErrorInfo{}})
	fast := 0
	for _, r := range cases {
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := appendAgentResult([]byte("prefix"), &r)
		if !ok {
			continue
		}
		fast++
		if string(got) != "prefix"+string(want) {
			t.Errorf("%+v:\n got %s\nwant prefix%s", r, got, want)
		}
	}
	if fast < len(cases)-6 {
		t.Errorf("the encoder took %d of %d results", fast, len(cases))
	}
	// What encoding/json refuses is declined.
	for _, r := range []svc.AgentResult{{Output: json.RawMessage(`{bad`)}, {Metadata: svc.ResultMetadata{DurationMS: math.NaN()}},
		{Metadata: svc.ResultMetadata{CostUSD: math.Inf(1)}}} {
		if _, ok := appendAgentResult(nil, &r); ok {
			t.Errorf("encoded %+v", r)
		}
	}
}

// TestWriteResultsIsEncode: a gather's answer, written as it is encoded
// past resultsBuffered, is byte for byte what json.Encoder writes for the
// whole slice, whatever its size: empty, small (sent whole, with a
// Content-Length) and larger than the buffered part (chunked), with
// results the fast encoder declines among them.
func TestWriteResultsIsEncode(t *testing.T) {
	writeResults := func(w http.ResponseWriter, results []svc.AgentResult) error {
		return gatherList(context.Background(), w, sliceStreamer(results), "echo", slices.Values(make([]svc.TaskSpec, len(results))), len(results), 1)
	}
	many := func(n int) []svc.AgentResult {
		rs := make([]svc.AgentResult, n)
		for i := range rs {
			rs[i] = svc.AgentResult{AgentName: "echo", TaskID: strconv.Itoa(i), Success: true, Output: json.RawMessage(`{"n":` + strconv.Itoa(i) + `,"t":"<&>"}`),
				Metadata: svc.ResultMetadata{TraceID: "tr", Model: "test:echo", Attempts: 1}}
			if i%1000 == 7 {
				rs[i].Output = json.RawMessage(` { "spaced" : [1, 2] } `) // not compact: json.Marshal encodes it
			}
		}
		return rs
	}
	for _, c := range []struct {
		results []svc.AgentResult
		whole   bool
	}{{nil, true}, {many(3), true}, {many(20_000), false}} {
		want, err := json.Marshal(c.results)
		if err != nil {
			t.Fatal(err)
		}
		if c.results == nil {
			want = []byte("[]")
		}
		want = append(want, '\n')
		rec := httptest.NewRecorder()
		if err := writeResults(rec, c.results); err != nil {
			t.Fatal(err)
		}
		if got := rec.Body.String(); got != string(want) {
			t.Fatalf("%d results: the answer differs from json.Marshal's (%d bytes, want %d)", len(c.results), len(got), len(want))
		}
		if cl := rec.Header().Get("Content-Length"); (cl == strconv.Itoa(len(want))) != c.whole || (cl == "") == c.whole {
			t.Errorf("%d results (%d bytes): Content-Length %q, want it set: %v", len(c.results), len(want), cl, c.whole)
		}
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type %q", ct)
		}
	}
	// An encoding error within the buffered part is returned before
	// anything is written.
	rec := httptest.NewRecorder()
	err := writeResults(rec, []svc.AgentResult{{Output: json.RawMessage(`{bad`)}})
	var me *json.MarshalerError
	if !errors.As(err, &me) || rec.Body.Len() != 0 {
		t.Errorf("writeResults of invalid output: %v, wrote %q", err, rec.Body.String())
	}
}

// sliceStreamer is a streamed gather whose results are given, in order.
type sliceStreamer []svc.AgentResult

func (s sliceStreamer) GatherStream(context.Context, string, iter.Seq[svc.TaskSpec], int) iter.Seq2[svc.GatherItem, error] {
	return func(yield func(svc.GatherItem, error) bool) {
		for i, r := range s {
			if !yield(svc.GatherItem{Index: i, Result: r}, nil) {
				return
			}
		}
	}
}

package server

import (
	"encoding/json"
	"errors"
	"net/http/httptest"
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

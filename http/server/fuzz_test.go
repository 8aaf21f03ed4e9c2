package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"strings"
	"testing"
	"unicode/utf8"

	svc "github.com/svc-dev/svc"
)

var runSeeds = []string{
	`{"input":1}`,
	`{"id":"t","input":{"a":[1,2,"x"]},"request_id":"r","metadata":{"k":"v"}}`,
	`{"task":{"input":"hi","request_id":"a"},"request_id":"b"}`,
	`{"task":null}`,
	`{"inptu":1}`,
	`{"input":1,"id":7}`,
	`{"input": 1,}`,
	`{"input":1} x`,
	`[1]`,
	``,
	`{"input":null}`,
	`{"task":{"input":1},"Task":{}}`,
	`{"INPUT":"case"}`,
	"{\"input\":\"\xff\"}",
	`{"input":"\ud800"}`,
	`{"input":"\ud83d\ude00","request_id":"ok"}`,
	`{"input":"\\ud800"}`,
	`{"input":{"a":1,"a":2}}`,
	`{"input":[{"a":1},{"a":2}]}`,
	`{"input":1e400}`,
	`{"input":1,"request_id":"a b"}`,
	`{"input":1,"request_id":""}`,
	`{"task":{"input":1,"request_id":""}}`,
	`{"task":{"input":1},"request_id":"\u00e9"}`,
}

// FuzzDecodeRunBody checks that any body either decodes to a task with an
// input that survives a round trip, or is refused with a
// SpecValidationError; never anything else, never a panic.
func FuzzDecodeRunBody(f *testing.F) {
	for _, s := range runSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		task, envID, err := decodeRunBody(data)
		if err != nil {
			if !errors.Is(err, svc.ErrSpecValidation) || StatusOf(err) != 400 {
				t.Fatalf("error %v (%T) is not a 400 SpecValidationError", err, err)
			}
			return
		}
		if len(task.Input) == 0 || string(task.Input) == "null" || !json.Valid(task.Input) {
			t.Fatalf("accepted input %q", task.Input)
		}
		// What is accepted comes out as it went in: UTF-8, no surrogate
		// escape that decodes to U+FFFD, no key that shadows another, no
		// number a reader cannot hold, and request ids a header could carry.
		if !utf8.Valid(data) {
			t.Fatalf("accepted invalid UTF-8: %q", data)
		}
		if i, esc := loneSurrogate(data); i >= 0 {
			t.Fatalf("accepted the lone surrogate %s in %q", esc, data)
		}
		if !uniqueKeysAndFiniteNumbers(t, task.Input) {
			t.Fatalf("accepted input %s with a duplicate key or an overflowing number", task.Input)
		}
		for _, id := range []string{task.RequestID, envID} {
			if id != "" && !ValidRequestID(id) {
				t.Fatalf("accepted request id %q", id)
			}
		}
		if envID != "" && !bytes.Contains(data, []byte(`"task"`)) {
			t.Fatalf("envelope request id %q from a body without a task key", envID)
		}
		enc, err := json.Marshal(task)
		if err != nil {
			t.Fatalf("re-encoding %+v: %v", task, err)
		}
		again, envID2, err := decodeRunBody(enc)
		if err != nil || envID2 != "" {
			t.Fatalf("re-decoding %s: %v %q", enc, err, envID2)
		}
		if again.ID != task.ID || again.RequestID != task.RequestID || !maps.Equal(again.Metadata, task.Metadata) ||
			compact(t, again.Input) != compact(t, task.Input) {
			t.Fatalf("round trip changed the task: %+v -> %+v", task, again)
		}
	})
}

// uniqueKeysAndFiniteNumbers is an oracle independent of checkTokens:
// decoding into an ordered walk of json.RawMessage members, it reports
// whether no object in v repeats a key and every number fits a float64.
func uniqueKeysAndFiniteNumbers(t *testing.T, v json.RawMessage) bool {
	t.Helper()
	switch v[0] {
	case '{':
		dec := json.NewDecoder(bytes.NewReader(v))
		_, _ = dec.Token()
		seen := map[string]bool{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				t.Fatal(err)
			}
			if seen[k.(string)] {
				return false
			}
			seen[k.(string)] = true
			var m json.RawMessage
			if err := dec.Decode(&m); err != nil {
				t.Fatal(err)
			}
			if !uniqueKeysAndFiniteNumbers(t, m) {
				return false
			}
		}
		return true
	case '[':
		var items []json.RawMessage
		if err := json.Unmarshal(v, &items); err != nil {
			t.Fatal(err)
		}
		for _, it := range items {
			if !uniqueKeysAndFiniteNumbers(t, it) {
				return false
			}
		}
		return true
	case '"', 't', 'f', 'n':
		return true
	}
	var f float64
	return json.Unmarshal(v, &f) == nil
}

func compact(t *testing.T, raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		t.Fatal(err)
	}
	// json.Marshal writes a RawMessage compacted and HTML-escaped ("&" as
	// "\u0026"): the same JSON value, so both sides are escaped alike.
	var esc bytes.Buffer
	json.HTMLEscape(&esc, b.Bytes())
	return esc.String()
}

// FuzzDecodeGatherBody checks that an accepted gather has tasks, each with
// an input, and a concurrency in range; and that a refusal is a 400.
func FuzzDecodeGatherBody(f *testing.F) {
	for _, s := range []string{
		`{"tasks":[{"input":1}],"max_concurrency":3}`,
		`{"tasks":[]}`,
		`{"tasks":[{"input":1},{"id":"x"}]}`,
		`{"tasks":[{"input":1}],"max_concurrency":10001}`,
		`{"tasks":[{"input":1}],"max_concurrency":-5}`,
		`{"tasks":[{"input":1}],"max_concurrency":0}`,
		`{"tasks":[{"input":1}],"max_concurrency":null}`,
		`{"tasks":null}`,
		`{"tasks":[{"input":1}]} {}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := decodeGatherBody(data)
		if err != nil {
			if !errors.Is(err, svc.ErrSpecValidation) || StatusOf(err) != 400 {
				t.Fatalf("error %v (%T) is not a 400 SpecValidationError", err, err)
			}
			return
		}
		if len(req.Tasks) == 0 || req.MaxConcurrency < 1 || req.MaxConcurrency > svc.MaxGatherConcurrency {
			t.Fatalf("accepted %+v", req)
		}
		for _, task := range req.Tasks {
			if len(task.Input) == 0 || string(task.Input) == "null" {
				t.Fatalf("accepted a task without input: %+v", task)
			}
		}
	})
}

// FuzzBearerToken checks the Authorization parser: an accepted token is
// non-empty and trimmed, and only the Bearer scheme is accepted.
func FuzzBearerToken(f *testing.F) {
	for _, s := range []string{"Bearer abc", "bearer abc", "Basic abc", "Bearer", "Bearer  ", " Bearer x", "BEARER a b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		tok, ok := bearerToken(h)
		if !ok {
			return
		}
		if tok == "" || tok != strings.TrimSpace(tok) || !strings.EqualFold(h[:6], "bearer") {
			t.Fatalf("bearerToken(%q) = %q", h, tok)
		}
	})
}

package server

import (
	"reflect"
	"testing"
)

// fastBodies are bodies of every shape the run's fast path meets: plain
// ones it takes, and ones it must hand to decodeRunBody (escapes, case
// variants, nulls, wrong types, errors).
var fastBodies = []string{
	`{"input":{"text":"hello world"},"request_id":"bench"}`,
	` {"input" : [1, 2 ,{"a":"}"}] , "id":"x" } `,
	"\t{\n\"input\":\n\"h\u00e9llo \u2028 <tag> & \\\"q\\\" \\u00e9 \\ud83d\\ude00\"\n}\n",
	`{"input":"日本語","id":"タスク","request_id":"r-1"}`,
	`{"input":1,"metadata":{"k":"v","k2":"\u00e9"},"token_budget":100}`,
	`{"input":1,"metadata":null,"token_budget":0}`,
	`{"input":1,"token_budget":-1}`,
	`{"input":1,"token_budget":1.5}`,
	`{"input":1,"token_budget":1e30}`,
	`{"input":1,"metadata":{"k":1}}`,
	`{"input":1,"id":null}`,
	`{"input":1,"id":"a\"b"}`,
	`{"input":1,"id":7}`,
	`{"input":true}`, `{"input":false}`, `{"input":-0.5e-3}`, `{"input":"x"}`, `{"input":[]}`, `{"input":{}}`,
	`{"input":null}`, `{}`, `{"id":"x"}`,
	`{"task":{"input":"hi","request_id":"a"},"request_id":"b"}`,
	`{"task":{"input":"hi"}}`,
	`{"task":{"input":"hi"},"request_id":null}`,
	`{"task":null}`, `{"task":1}`, `{"task":{}}`, `{"task":{"input":1},"extra":1}`,
	`{"request_id":"b","task":{"input":{"k":[{}]}}}`,
	`{"task":{"input":1,"Input":2}}`,
	`{"task":{"input":1,"request_id":"a b"}}`,
	`{"inp\u0075t":1}`, `{"input":1,"request_\u0069d":"x"}`,
	`{"Input":1}`, `{"INPUT":1,"input":2}`,
	`{"input":1,"input":2}`, `{"input":{"a":1,"a":2}}`,
	`{"input":1e400}`, "{\"input\":\"\xff\"}", `{"input":"\ud800"}`,
	`{"input":1,"request_id":"a b"}`,
	`{"input":1,"request_id":""}`, `{"task":{"input":1},"request_id":""}`, `{"task":{"input":1,"request_id":""},"request_id":"b"}`,
	`{"input":1,"request_id":null}`, `{"task":{"input":1,"request_id":null}}`,
	`{"input":1} x`, `{"input":1,}`, `[1]`, `"s"`, ``, `   `, `null`,
}

// TestDecodeRunBodyFastAgrees: whenever the fast path takes a body, the
// strict decoder takes it too and decodes the same task and request id;
// the bodies it must not take (anything refused) go to the strict one.
func TestDecodeRunBodyFastAgrees(t *testing.T) {
	taken := 0
	for _, body := range append(fastBodies, runSeeds...) {
		if checkFastAgrees(t, []byte(body)) {
			taken++
		}
	}
	if taken < 15 {
		t.Errorf("the fast path took only %d bodies", taken)
	}
	for _, body := range []string{
		`{"input":{"text":"hello world"},"request_id":"bench"}`,
		`{"task":{"input":"hi","request_id":"a"},"request_id":"b"}`,
		`{"input":"日本語","id":"タスク","request_id":"r-1"}`,
	} {
		if _, _, ok := decodeRunBodyFast([]byte(body)); !ok {
			t.Errorf("the fast path refused %s", body)
		}
	}
}

// checkFastAgrees fails t when decodeRunBodyFast and decodeRunBody
// disagree about data, and reports whether the fast path took it.
func checkFastAgrees(t *testing.T, data []byte) bool {
	t.Helper()
	task, id, ok := decodeRunBodyFast(data)
	if !ok {
		return false
	}
	want, wantID, err := decodeRunBody(data)
	if err != nil {
		t.Errorf("fast path took %q, which decodeRunBody refuses: %v", data, err)
		return true
	}
	if !reflect.DeepEqual(task, want) || id != wantID {
		t.Errorf("%q: fast path decoded %+v, %q; decodeRunBody %+v, %q", data, task, id, want, wantID)
	}
	return true
}

// FuzzDecodeRunBodyFast: the fast path agrees with decodeRunBody on any
// body.
func FuzzDecodeRunBodyFast(f *testing.F) {
	for _, s := range append(fastBodies, runSeeds...) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkFastAgrees(t, data)
	})
}

package rollup

import (
	"encoding/json"
	"math"
	"reflect"
	"testing"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/eventstore/internal/evcodec"
)

// FuzzPayload feeds evcodec.Decode what could be in a payload column of a
// file another process wrote: it must not panic, and what it accepts must
// survive another round trip unchanged.
func FuzzPayload(f *testing.F) {
	for _, s := range []string{`{}`, `null`, `{"a":1,"b":[1,"x",null],"c":{"d":true}}`, `[]`, `"x"`, `{"a":1e400}`, `{`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := evcodec.Decode(b)
		if err != nil {
			return
		}
		if p == nil {
			t.Fatal("decodePayload returned a nil payload without an error")
		}
		again, err := evcodec.Decode(evcodec.Encode(p))
		if err != nil {
			t.Fatalf("re-decoding %s: %v", evcodec.Encode(p), err)
		}
		if !reflect.DeepEqual(p, again) {
			t.Fatalf("round trip changed %#v into %#v", p, again)
		}
		// The SQLite store extracts facts before the round trip, the
		// memory store after: they must be the same.
		for _, typ := range svc.EventTypes {
			ev := svc.RuntimeEvent{EventType: typ, Payload: p}
			if before, after := FactsOf(&ev), FactsOf(&svc.RuntimeEvent{EventType: typ, Payload: again}); before != after {
				t.Fatalf("%s facts %+v before the round trip, %+v after", typ, before, after)
			}
		}
	})
}

// TestFactsSurviveRoundTrip checks what the fuzz target cannot reach from
// JSON: payloads built in process, holding Go values.
func TestFactsSurviveRoundTrip(t *testing.T) {
	payloads := []svc.Payload{
		{"tokens_used": int64(1<<53 + 1), "model": "m", "duration_ms": float32(0.1), "tool_name": "x\xffy"},
		{"tokens_used": json.Number("12.5"), "duration_ms": json.Number("bad"), "error": "TimeoutError: x"},
		{"tokens_used": uint8(7), "duration_ms": math.Inf(1), "error_type": "ModelError", "runtime_id": 5},
		{"tokens_used": -3, "duration_ms": 1e300, "reason": "cancelled", "tool_name": 12},
		{"tokens_used": "many", "duration_ms": int16(-2), "runtime_id": "w1"},
		{"tokens_used": float64(1 << 41), "duration_ms": 0.0005, "model": []string{"x"}},
	}
	for _, p := range payloads {
		for _, typ := range svc.EventTypes {
			ev := svc.RuntimeEvent{EventType: typ, AgentName: "a", Payload: p}
			stored := evcodec.Normalize(ev)
			if before, after := FactsOf(&ev), FactsOf(&stored); before != after {
				t.Errorf("%s %v: facts %+v before the round trip, %+v after", typ, p, before, after)
			}
		}
	}
}

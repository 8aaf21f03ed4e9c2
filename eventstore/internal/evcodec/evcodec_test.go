package evcodec

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/svc-dev/svc"
)

// payloadValues are values of every kind a payload may hold: those the
// fast encoder writes (at the edges of encoding/json's number and string
// forms) and those it must leave to encoding/json.
var payloadValues = []any{
	nil, true, false, "", "local", "test:echo", "a b~}{", `quo"te`, `back\slash`, "<html>", "a&b", "tab\t",
	"ünï", "\u2028", "bad \xff utf-8", "ctl\x01",
	0.0, math.Copysign(0, -1), 0.042, 1.5, -2.25, 12345678.125, 1e-6, 9.99e-7, 1e-7, 1.5e-300, 1e20, 1e21,
	-1e21, 123456789e15, math.MaxFloat64, math.SmallestNonzeroFloat64, math.NaN(), math.Inf(1),
	0, 1, -1, math.MaxInt64, math.MinInt64, int64(128), int64(-7), int32(5), uint64(9), float32(0.1),
	[]any{1.0, "x"}, map[string]any{"k": 1.0}, []string{"a"}, struct{ A int }{1}, func() {},
}

// TestEncodePayloadMatchesJSON checks that the fast encoder, wherever it
// answers, writes byte for byte what encoding/json writes, and that
// Encode is encoding/json's form for every payload.
func TestEncodePayloadMatchesJSON(t *testing.T) {
	check := func(p svc.Payload) {
		t.Helper()
		want := EncodeJSON(p)
		if got := Encode(p); !bytes.Equal(got, want) {
			t.Fatalf("Encode(%#v) = %s, want %s", p, got, want)
		}
		if got, ok := appendFlatPayload(nil, p); ok && !bytes.Equal(got, want) {
			t.Fatalf("appendFlatPayload(%#v) = %s, want %s", p, got, want)
		}
	}
	check(nil)
	check(svc.Payload{})
	for _, v := range payloadValues {
		check(svc.Payload{"v": v})
	}
	keys := []string{"duration_ms", "tokens_used", "backend", "model", "a", "B", "z", "<k>", "ü", "", "tool_name"}
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		p := svc.Payload{}
		for range r.IntN(maxFlatKeys + 3) {
			p[keys[r.IntN(len(keys))]+fmt.Sprint(r.IntN(3))] = payloadValues[r.IntN(len(payloadValues))]
		}
		check(p)
	}
	for v := range 2000 {
		f := r.NormFloat64() * math.Pow(10, float64(r.IntN(60)-30))
		check(svc.Payload{"f": f, "i": int64(v) * r.Int64N(1<<40)})
	}
}

// TestEncodePayloadFastPath checks that the runtime's own events take the
// fast encoder (so that the write path's figure holds).
func TestEncodePayloadFastPath(t *testing.T) {
	for _, p := range []svc.Payload{
		{"backend": "local", "trust_level": "medium"},
		{"duration_ms": 0.042, "tokens_used": int64(12), "backend": "local", "model": "test:echo"},
	} {
		if _, ok := appendFlatPayload(nil, p); !ok {
			t.Errorf("appendFlatPayload(%v) took the slow path", p)
		}
	}
}

// FuzzEncodePayload compares the fast encoder with encoding/json on
// fuzzed strings and numbers.
func FuzzEncodePayload(f *testing.F) {
	f.Add("local", "test:echo", 0.042, int64(3))
	f.Add("<&>", "\u2028\xff", 1e21, int64(-1))
	f.Fuzz(func(t *testing.T, k, s string, x float64, n int64) {
		p := svc.Payload{k: s, k + "f": x, k + "n": n, "b": true, "z": nil}
		if want, got := EncodeJSON(p), Encode(p); !bytes.Equal(got, want) {
			t.Fatalf("Encode(%#v) = %s, want %s", p, got, want)
		}
	})
}

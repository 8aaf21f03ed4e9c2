package server

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// tokensOK is the fast path of checkTokens: it must never pass a body
// that checkTokens refuses, and it must pass the ordinary bodies (or the
// fast path is never taken).
func TestTokensOK(t *testing.T) {
	long := strings.Repeat("9", 400)
	for _, tc := range []struct {
		body string
		ok   bool
	}{
		{`{"input":{"text":"hello world"},"request_id":"bench"}`, true},
		{`{"task":{"input":[1,2,{"a":true,"b":null}],"metadata":{"k":"v"}},"request_id":"r"}`, true},
		{` { "a" : 1 , "b" : [ "a" , "a" ] , "c" : { "a" : 1 } } `, true},
		{`{"a":"{\"a\":1,\"a\":2}","b":"\\"}`, true},
		{`[{"a":1},{"a":1}]`, true},
		{`{"a":1.5e3,"b":-0.25E-300,"c":12345678901234567890}`, true},
		{`{"a":1,"a":2}`, false},
		{`{"x":{"a":1,"b":{"c":[1,{"d":1,"d":2}]}}}`, false},
		{`{"a":1,"\u0061":2}`, false},
		{`{"a":1e309}`, false},
		{`{"a":-1E400}`, false},
		{`{"a":` + long + `}`, false},
		{`[` + long + `.5]`, false},
	} {
		if !json.Valid([]byte(tc.body)) {
			t.Fatalf("test body %s is not JSON", tc.body)
		}
		if got := tokensOK([]byte(tc.body)); got != tc.ok {
			t.Errorf("tokensOK(%s) = %v, want %v", tc.body, got, tc.ok)
		}
		if slow := checkTokens([]byte(tc.body)) == nil; tc.ok && !slow {
			t.Errorf("checkTokens refuses %s, which tokensOK passes", tc.body)
		}
	}
}

// FuzzTokensOK: whatever valid JSON tokensOK passes has no duplicate key
// and no overflowing number (the independent oracle of FuzzDecodeRunBody),
// and checkTokens passes it too.
func FuzzTokensOK(f *testing.F) {
	for _, s := range append(runSeeds, `{"a":1,"a":2}`, `{"a":{"b":1,"b":1}}`, `{"a":1e999}`, `{"a":"\u0061","\u0061":1}`) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) {
			return
		}
		if !tokensOK(data) {
			return
		}
		if !uniqueKeysAndFiniteNumbers(t, bytes.TrimSpace(data)) {
			t.Fatalf("tokensOK passed %s, which has a duplicate key or an overflowing number", data)
		}
		if err := checkTokens(data); err != nil {
			t.Fatalf("tokensOK passed %s, which checkTokens refuses: %v", data, err)
		}
	})
}

// BenchmarkCheckJSONText is the body check of every run request (issue
// 15): the one-pass fast path against the token walk it skips.
func BenchmarkCheckJSONText(b *testing.B) {
	body := []byte(`{"input":{"text":"hello world"},"request_id":"bench"}`)
	b.Run("fast_path", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := checkJSONText(body); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("token_walk", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := checkTokens(body); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decodeRunBody", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := decodeRunBody(body); err != nil {
				b.Fatal(err)
			}
		}
	})
}

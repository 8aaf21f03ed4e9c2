// Package evcodec is how the event stores keep an event: its payload as
// JSON (a hand-written encoder for the flat payloads the runtime emits,
// encoding/json for the rest) and its timestamp to the microsecond, so
// that every backend returns the same values for the same event.
package evcodec

import (
	"encoding/json"
	"math"
	"strconv"
	"time"

	"github.com/svc-dev/svc"
)

// appendFlatPayload appends p's JSON to b, byte for byte what
// encoding/json writes for it (keys sorted, the same number forms), when
// p is flat and plain: at most maxFlatKeys keys, and values that are nil,
// booleans, finite float64s, ints, int64s or plain strings (see
// plainString), as the runtime's own events are. Otherwise it returns
// ok false and Encode takes encoding/json's reflection, which
// costs several times more and was most of the payload's share of the
// write path (BENCHMARKS.md, issue 15).
func appendFlatPayload(b []byte, p svc.Payload) (_ []byte, ok bool) {
	if len(p) > maxFlatKeys {
		return b, false
	}
	var arr [maxFlatKeys]string
	keys := arr[:0]
	for k, v := range p {
		if !plainString(k) || !flatValue(v) {
			return b, false
		}
		// Insertion sort: a handful of keys.
		i := len(keys)
		keys = append(keys, k)
		for ; i > 0 && keys[i-1] > k; i-- {
			keys[i] = keys[i-1]
		}
		keys[i] = k
	}
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, k...)
		b = append(b, '"', ':')
		switch v := p[k].(type) {
		case nil:
			b = append(b, "null"...)
		case bool:
			b = strconv.AppendBool(b, v)
		case string:
			b = append(b, '"')
			b = append(b, v...)
			b = append(b, '"')
		case int:
			b = strconv.AppendInt(b, int64(v), 10)
		case int64:
			b = strconv.AppendInt(b, v, 10)
		case float64:
			b = appendFloat(b, v)
		}
	}
	return append(b, '}'), true
}

// maxFlatKeys bounds the payloads appendFlatPayload sorts the keys of on
// the stack; the runtime's events have fewer.
const maxFlatKeys = 16

// flatValue reports whether appendFlatPayload writes v.
func flatValue(v any) bool {
	switch v := v.(type) {
	case nil, bool, int, int64:
		return true
	case string:
		return plainString(v)
	case float64:
		return !math.IsNaN(v) && !math.IsInf(v, 0)
	}
	return false
}

// plainString reports whether encoding/json writes s as it is between
// quotes: printable ASCII but for the characters it escapes (the quote,
// the backslash, and <, > and & which it escapes for HTML).
func plainString(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20, c > 0x7e, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

// appendFloat is encoding/json's form of a finite float64: the shortest
// decimal that reads back the same, in exponent form only below 1e-6 or
// from 1e21, with a two-digit negative exponent shortened (1e-07 → 1e-7).
func appendFloat(b []byte, f float64) []byte {
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

// Append returns p's JSON (Encode's), appended to buf when
// the fast encoder writes it, and buf as it is then. The payload stays
// valid when buf is appended to later: appends never write into it.
func Append(buf []byte, p svc.Payload) (payload, _ []byte) {
	start := len(buf)
	if b, ok := appendFlatPayload(buf, p); ok {
		return b[start:len(b):len(b)], b
	}
	return EncodeJSON(p), buf
}

// NormTime is the stored form of a timestamp: microsecond precision, UTC.
func NormTime(t time.Time) time.Time { return time.UnixMicro(t.UnixMicro()).UTC() }

// Encode returns the JSON form of p. Values JSON cannot encode are
// written as null rather than failing the event (see the package doc).
func Encode(p svc.Payload) []byte {
	if b, ok := appendFlatPayload(nil, p); ok {
		return b
	}
	return EncodeJSON(p)
}

// EncodeJSON is Encode by encoding/json, for any payload.
func EncodeJSON(p svc.Payload) []byte {
	if p == nil {
		return []byte("{}")
	}
	if b, err := json.Marshal(p); err == nil {
		return b
	}
	safe := make(map[string]any, len(p))
	for k, v := range p {
		if _, err := json.Marshal(v); err != nil {
			v = nil
		}
		safe[k] = v
	}
	b, err := json.Marshal(safe)
	if err != nil {
		// Unreachable: every value left encodes on its own.
		return []byte("{}")
	}
	return b
}

// Decode reads what Encode wrote.
func Decode(b []byte) (svc.Payload, error) {
	p := svc.Payload{}
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, err
	}
	if p == nil { // the JSON was null
		p = svc.Payload{}
	}
	return p, nil
}

// Normalize returns ev as a store returns it.
func Normalize(ev svc.RuntimeEvent) svc.RuntimeEvent {
	ev.Timestamp = NormTime(ev.Timestamp)
	p, err := Decode(Encode(ev.Payload))
	if err != nil {
		p = svc.Payload{} // unreachable: Encode writes valid JSON
	}
	ev.Payload = p
	return ev
}

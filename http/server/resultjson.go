package server

import (
	"encoding/json"
	"math"
	"strconv"
	"unicode/utf8"

	svc "github.com/svc-dev/svc"
)

// appendAgentResult appends json.Marshal(r) to dst: the answer of every
// run, encoded without reflection and without svc.AgentResult.MarshalJSON
// encoding it twice over (it marshals a copy, which encoding/json then
// validates and compacts again; issue 15). ok is false when r holds
// something this encoder does not write exactly as encoding/json does (an
// output that is not compact, safe JSON, a NaN or infinite number): the
// caller then uses json.Marshal, which also reports the errors.
// TestAppendAgentResultIsMarshal compares the two, and
// TestAppendAgentResultWritesEveryField does with every field of the
// type set: a field added to svc.AgentResult needs its line here.
func appendAgentResult(dst []byte, r *svc.AgentResult) ([]byte, bool) {
	if !plainJSON(r.Output) {
		return dst, false
	}
	m := &r.Metadata
	dst = append(dst, `{"agent_name":`...)
	dst = appendJSONString(dst, r.AgentName)
	dst = append(dst, `,"task_id":`...)
	dst = appendJSONString(dst, r.TaskID)
	dst = append(dst, `,"success":`...)
	dst = strconv.AppendBool(dst, r.Success)
	dst = append(dst, `,"output":`...)
	if len(r.Output) == 0 {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, r.Output...)
	}
	dst = append(dst, `,"error":`...)
	if e := r.Error; e == nil {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, `{"type":`...)
		dst = appendJSONString(dst, e.Type)
		dst = append(dst, `,"message":`...)
		dst = appendJSONString(dst, e.Message)
		if e.Reason != "" {
			dst = append(dst, `,"reason":`...)
			dst = appendJSONString(dst, e.Reason)
		}
		dst = append(dst, '}')
	}
	dst = append(dst, `,"metadata":{"trace_id":`...)
	dst = appendJSONString(dst, m.TraceID)
	dst = append(dst, `,"duration_ms":`...)
	var ok bool
	if dst, ok = appendJSONFloat(dst, m.DurationMS); !ok {
		return dst, false
	}
	dst = append(dst, `,"tokens_used":`...)
	dst = strconv.AppendInt(dst, m.TokensUsed, 10)
	dst = append(dst, `,"cost_usd":`...)
	if dst, ok = appendJSONFloat(dst, m.CostUSD); !ok {
		return dst, false
	}
	dst = append(dst, `,"model":`...)
	dst = appendJSONString(dst, m.Model)
	dst = append(dst, `,"attempts":`...)
	dst = strconv.AppendInt(dst, int64(m.Attempts), 10)
	dst = append(dst, `,"backend":`...)
	dst = appendJSONString(dst, m.Backend)
	if len(m.ModelsTried) > 0 {
		dst = append(dst, `,"models_tried":[`...)
		for i, s := range m.ModelsTried {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendJSONString(dst, s)
		}
		dst = append(dst, ']')
	}
	if m.CostUnknown {
		dst = append(dst, `,"cost_unknown":true`...)
	}
	if m.CachedTokens != 0 {
		dst = append(dst, `,"cached_tokens":`...)
		dst = strconv.AppendInt(dst, m.CachedTokens, 10)
	}
	return append(dst, "}}"...), true
}

// plainJSON reports whether raw is empty, or valid JSON that encoding/json
// would write as it is: no white space outside strings, and no character
// it escapes inside them (<, >, &, U+2028, U+2029).
func plainJSON(raw json.RawMessage) bool {
	if len(raw) == 0 {
		return true
	}
	inString := false
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; {
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case !inString && (c == ' ' || c == '\t' || c == '\n' || c == '\r'):
			return false
		case c == '<' || c == '>' || c == '&':
			return false
		case c == 0xE2 && i+2 < len(raw) && raw[i+1] == 0x80 && (raw[i+2] == 0xA8 || raw[i+2] == 0xA9):
			return false
		}
	}
	return json.Valid(raw)
}

// appendJSONFloat is encoding/json's float64 encoding; false for NaN and
// infinities, which it refuses.
func appendJSONFloat(dst []byte, f float64) ([]byte, bool) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return dst, false
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if format == 'e' {
		// e-09 is written e-9
		if n := len(dst); n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst, true
}

const hexDigits = "0123456789abcdef"

// appendJSONString is encoding/json's string encoding, HTML escaping on
// (what json.Marshal does).
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

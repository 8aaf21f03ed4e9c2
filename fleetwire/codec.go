package fleetwire

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/svc-dev/svc"
)

// The item codec of batches: JSON, the same as encoding/json writes and
// reads for Envelope, by hand. A batch of a gather carries hundreds of
// items, and encoding/json's reflection was a fifth of the CPU of a task
// through the fleet (BENCHMARKS.md, issue 36 part 4); this writes each
// field straight into the buffer and reads each known key straight into
// its field. An unknown key is skipped, so a later release may add
// fields. codec_test.go checks both directions against encoding/json.

// appendItem appends e as a JSON object, omitting empty fields as
// Envelope's tags do (depth is always written).
func appendItem(b []byte, e *Envelope) ([]byte, error) {
	b = append(b, '{')
	first := true
	key := func(k string) {
		if !first {
			b = append(b, ',')
		}
		first = false
		b = append(b, '"')
		b = append(b, k...)
		b = append(b, '"', ':')
	}
	str := func(k, v string) {
		if v != "" {
			key(k)
			b = appendString(b, v)
		}
	}
	num := func(k string, v int64, always bool) {
		if v != 0 || always {
			key(k)
			b = strconv.AppendInt(b, v, 10)
		}
	}
	flag := func(k string, v bool) {
		if v {
			key(k)
			b = append(b, "true"...)
		}
	}
	if e.V != 0 {
		num("v", int64(e.V), true)
	}
	str("kind", string(e.Kind))
	str("task_id", e.TaskID)
	str("run_id", e.RunID)
	str("trace_id", e.TraceID)
	str("parent_trace_id", e.ParentTraceID)
	str("span_id", e.SpanID)
	str("agent", e.Agent)
	if len(e.Input) > 0 {
		if !json.Valid(e.Input) {
			return nil, errors.New("envelope: input is not valid JSON")
		}
		key("input")
		b = append(b, e.Input...)
	}
	if len(e.Metadata) > 0 {
		key("metadata")
		b = appendStringMap(b, e.Metadata)
	}
	num("depth", int64(e.Depth), true)
	num("deadline", e.Deadline, false)
	str("reply_to", e.ReplyTo)
	flag("publish_events", e.PublishEvents)
	num("token_budget", e.TokenBudget, false)
	str("relay_to", e.RelayTo)
	num("attempt", int64(e.Attempt), false)
	flag("deltas", e.Deltas)
	num("delta_count", int64(e.DeltaCount), false)
	if e.Result != nil {
		key("result")
		var err error
		if b, err = appendResult(b, e.Result); err != nil {
			return nil, err
		}
	}
	str("runtime_id", e.RuntimeID)
	num("delivery", int64(e.Delivery), false)
	str("key_id", e.KeyID)
	str("sig", e.Sig)
	return append(b, '}'), nil
}

// appendResult appends r as svc.AgentResult's MarshalJSON does.
func appendResult(b []byte, r *svc.AgentResult) ([]byte, error) {
	b = append(b, `{"agent_name":`...)
	b = appendString(b, r.AgentName)
	b = append(b, `,"task_id":`...)
	b = appendString(b, r.TaskID)
	b = append(b, `,"success":`...)
	b = strconv.AppendBool(b, r.Success)
	b = append(b, `,"output":`...)
	if len(r.Output) == 0 {
		b = append(b, "null"...)
	} else {
		if !json.Valid(r.Output) {
			return nil, errors.New("envelope: result output is not valid JSON")
		}
		b = append(b, r.Output...)
	}
	b = append(b, `,"error":`...)
	if r.Error == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, `{"type":`...)
		b = appendString(b, r.Error.Type)
		b = append(b, `,"message":`...)
		b = appendString(b, r.Error.Message)
		if r.Error.Reason != "" {
			b = append(b, `,"reason":`...)
			b = appendString(b, r.Error.Reason)
		}
		b = append(b, '}')
	}
	m := &r.Metadata
	b = append(b, `,"metadata":{"trace_id":`...)
	b = appendString(b, m.TraceID)
	var err error
	b = append(b, `,"duration_ms":`...)
	if b, err = appendFloat(b, m.DurationMS); err != nil {
		return nil, err
	}
	b = append(b, `,"tokens_used":`...)
	b = strconv.AppendInt(b, m.TokensUsed, 10)
	b = append(b, `,"cost_usd":`...)
	if b, err = appendFloat(b, m.CostUSD); err != nil {
		return nil, err
	}
	b = append(b, `,"model":`...)
	b = appendString(b, m.Model)
	b = append(b, `,"attempts":`...)
	b = strconv.AppendInt(b, int64(m.Attempts), 10)
	b = append(b, `,"backend":`...)
	b = appendString(b, m.Backend)
	if len(m.ModelsTried) > 0 {
		b = append(b, `,"models_tried":[`...)
		for i, s := range m.ModelsTried {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, s)
		}
		b = append(b, ']')
	}
	if m.CostUnknown {
		b = append(b, `,"cost_unknown":true`...)
	}
	if m.CachedTokens != 0 {
		b = append(b, `,"cached_tokens":`...)
		b = strconv.AppendInt(b, m.CachedTokens, 10)
	}
	return append(b, '}', '}'), nil
}

func appendFloat(b []byte, f float64) ([]byte, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil, fmt.Errorf("envelope: unsupported number %v", f)
	}
	return strconv.AppendFloat(b, f, 'g', -1, 64), nil
}

func appendStringMap(b []byte, m map[string]string) []byte {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, k)
		b = append(b, ':')
		b = appendString(b, m[k])
	}
	return append(b, '}')
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string; invalid UTF-8 becomes U+FFFD,
// as with encoding/json.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// reader is a cursor over one JSON document.
type reader struct {
	data []byte
	i    int
	// shared holds the strings read by sharedStr: the items of a batch
	// repeat their run, trace, agent, model and backend, which are then
	// allocated once a batch instead of once an item.
	shared map[string]string
}

// maxShared bounds reader.shared.
const maxShared = 64

// sharedStr reads a string (or null) that the items of a batch are likely
// to repeat.
func (r *reader) sharedStr() (string, error) {
	if r.peek() == '"' {
		for j := r.i + 1; j < len(r.data) && j-r.i <= 128; j++ {
			c := r.data[j]
			if c == '\\' || c < 0x20 || c >= utf8.RuneSelf {
				break // the general path
			}
			if c == '"' {
				raw := r.data[r.i+1 : j]
				if s, ok := r.shared[string(raw)]; ok {
					r.i = j + 1
					return s, nil
				}
				s := string(raw)
				if r.shared == nil {
					r.shared = make(map[string]string, 8)
				}
				if len(r.shared) < maxShared {
					r.shared[s] = s
				}
				r.i = j + 1
				return s, nil
			}
		}
	}
	return r.optString()
}

var errSyntax = errors.New("invalid JSON")

func (r *reader) fail(what string) error {
	return fmt.Errorf("%w at offset %d: %s", errSyntax, r.i, what)
}

func (r *reader) ws() {
	for r.i < len(r.data) {
		switch r.data[r.i] {
		case ' ', '\t', '\n', '\r':
			r.i++
		default:
			return
		}
	}
}

// peek is the next non-space byte, 0 at the end.
func (r *reader) peek() byte {
	r.ws()
	if r.i >= len(r.data) {
		return 0
	}
	return r.data[r.i]
}

func (r *reader) expect(c byte) error {
	if r.peek() != c {
		return r.fail("want " + strconv.QuoteRune(rune(c)))
	}
	r.i++
	return nil
}

// literal reads true, false or null.
func (r *reader) literal(word string) bool {
	if len(r.data)-r.i >= len(word) && string(r.data[r.i:r.i+len(word)]) == word {
		r.i += len(word)
		return true
	}
	return false
}

// each calls f with each key of an object, f reading the value. The key
// is only valid during the call (it is not copied when it has no
// escapes: switch string(key) does not allocate).
func (r *reader) each(f func(key []byte) error) error {
	if err := r.expect('{'); err != nil {
		return err
	}
	if r.peek() == '}' {
		r.i++
		return nil
	}
	for {
		k, err := r.key()
		if err != nil {
			return err
		}
		if err := r.expect(':'); err != nil {
			return err
		}
		if err := f(k); err != nil {
			return err
		}
		switch r.peek() {
		case ',':
			r.i++
		case '}':
			r.i++
			return nil
		default:
			return r.fail("want , or }")
		}
	}
}

// key reads an object's key.
func (r *reader) key() ([]byte, error) {
	if r.peek() != '"' {
		return nil, r.fail("want a string")
	}
	for j := r.i + 1; j < len(r.data); j++ {
		switch c := r.data[j]; {
		case c == '"':
			k := r.data[r.i+1 : j]
			r.i = j + 1
			return k, nil
		case c == '\\' || c < 0x20 || c >= utf8.RuneSelf:
			s, err := r.str() // the rare key with escapes or beyond ASCII
			return []byte(s), err
		}
	}
	return nil, r.fail("unterminated string")
}

// str reads a string.
func (r *reader) str() (string, error) {
	if r.peek() != '"' {
		return "", r.fail("want a string")
	}
	r.i++
	start := r.i
	for r.i < len(r.data) {
		c := r.data[r.i]
		switch {
		case c == '"':
			s := string(r.data[start:r.i])
			r.i++
			if !utf8.ValidString(s) {
				return string([]rune(s)), nil // invalid bytes become U+FFFD, as with encoding/json
			}
			return s, nil
		case c == '\\':
			return r.strSlow(start)
		case c < 0x20:
			return "", r.fail("control character in a string")
		}
		r.i++
	}
	return "", r.fail("unterminated string")
}

// strSlow reads the rest of a string with escapes, from start.
func (r *reader) strSlow(start int) (string, error) {
	out := append([]byte(nil), r.data[start:r.i]...)
	for r.i < len(r.data) {
		c := r.data[r.i]
		switch {
		case c == '"':
			r.i++
			if !utf8.Valid(out) {
				return string([]rune(string(out))), nil
			}
			return string(out), nil
		case c < 0x20:
			return "", r.fail("control character in a string")
		case c != '\\':
			out = append(out, c)
			r.i++
			continue
		}
		r.i++
		if r.i >= len(r.data) {
			break
		}
		e := r.data[r.i]
		r.i++
		switch e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			cp, ok := r.hex4()
			if !ok {
				return "", r.fail("bad \\u escape")
			}
			ru := rune(cp)
			if utf16.IsSurrogate(ru) {
				ru = utf8.RuneError
				if len(r.data)-r.i >= 6 && r.data[r.i] == '\\' && r.data[r.i+1] == 'u' {
					save := r.i
					r.i += 2
					lo, ok := r.hex4()
					if dec := utf16.DecodeRune(rune(cp), rune(lo)); ok && dec != utf8.RuneError {
						ru = dec
					} else {
						r.i = save
					}
				}
			}
			out = utf8.AppendRune(out, ru)
		default:
			return "", r.fail("bad escape")
		}
	}
	return "", r.fail("unterminated string")
}

func (r *reader) hex4() (uint16, bool) {
	if len(r.data)-r.i < 4 {
		return 0, false
	}
	n, err := strconv.ParseUint(string(r.data[r.i:r.i+4]), 16, 16)
	if err != nil {
		return 0, false
	}
	r.i += 4
	return uint16(n), true
}

// number reads a JSON number's bytes.
func (r *reader) number() (string, error) {
	r.ws()
	start := r.i
	if r.i < len(r.data) && r.data[r.i] == '-' {
		r.i++
	}
	digits := func() int {
		n := 0
		for r.i < len(r.data) && r.data[r.i] >= '0' && r.data[r.i] <= '9' {
			r.i++
			n++
		}
		return n
	}
	intStart := r.i
	n := digits()
	if n == 0 || (n > 1 && r.data[intStart] == '0') {
		return "", r.fail("bad number")
	}
	if r.i < len(r.data) && r.data[r.i] == '.' {
		r.i++
		if digits() == 0 {
			return "", r.fail("bad number")
		}
	}
	if r.i < len(r.data) && (r.data[r.i] == 'e' || r.data[r.i] == 'E') {
		r.i++
		if r.i < len(r.data) && (r.data[r.i] == '+' || r.data[r.i] == '-') {
			r.i++
		}
		if digits() == 0 {
			return "", r.fail("bad number")
		}
	}
	return string(r.data[start:r.i]), nil
}

func (r *reader) int64() (int64, error) {
	if r.peek() == 'n' && r.literal("null") {
		return 0, nil
	}
	s, err := r.number()
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, r.fail("want an integer, got " + s)
	}
	return n, nil
}

func (r *reader) int() (int, error) {
	n, err := r.int64()
	return int(n), err
}

func (r *reader) float() (float64, error) {
	if r.peek() == 'n' && r.literal("null") {
		return 0, nil
	}
	s, err := r.number()
	if err != nil {
		return 0, err
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, r.fail("number out of range")
	}
	return f, nil
}

func (r *reader) bool() (bool, error) {
	switch {
	case r.peek() == 't' && r.literal("true"):
		return true, nil
	case r.peek() == 'f' && r.literal("false"):
		return false, nil
	case r.peek() == 'n' && r.literal("null"):
		return false, nil
	}
	return false, r.fail("want a boolean")
}

// optString reads a string or null.
func (r *reader) optString() (string, error) {
	if r.peek() == 'n' && r.literal("null") {
		return "", nil
	}
	return r.str()
}

// skip reads any value, checking its syntax.
func (r *reader) skip() error {
	switch c := r.peek(); {
	case c == '{':
		return r.each(func([]byte) error { return r.skip() })
	case c == '[':
		return r.elems(r.skip)
	case c == '"':
		_, err := r.str()
		return err
	case c == 't' && r.literal("true"), c == 'f' && r.literal("false"), c == 'n' && r.literal("null"):
		return nil
	default:
		_, err := r.number()
		return err
	}
}

// raw reads any value and returns a copy of its bytes ("null" for null,
// as encoding/json fills a json.RawMessage).
func (r *reader) raw() ([]byte, error) {
	r.ws()
	start := r.i
	if err := r.skip(); err != nil {
		return nil, err
	}
	return slices.Clone(r.data[start:r.i]), nil
}

// elems calls f for each element of an array (null reads as none).
func (r *reader) elems(f func() error) error {
	if r.peek() == 'n' && r.literal("null") {
		return nil
	}
	if err := r.expect('['); err != nil {
		return err
	}
	if r.peek() == ']' {
		r.i++
		return nil
	}
	for {
		if err := f(); err != nil {
			return err
		}
		switch r.peek() {
		case ',':
			r.i++
		case ']':
			r.i++
			return nil
		default:
			return r.fail("want , or ]")
		}
	}
}

// decodeItems reads a JSON array of envelopes.
func decodeItems(data []byte) ([]Envelope, error) {
	r := &reader{data: data}
	var items []Envelope
	err := r.elems(func() error {
		items = append(items, Envelope{})
		return readEnvelope(r, &items[len(items)-1])
	})
	if err != nil {
		return nil, err
	}
	if r.peek() != 0 {
		return nil, r.fail("data after the array")
	}
	return items, nil
}

// readEnvelope reads one envelope object into e. Keys match exactly (a
// hand-written peer writes them as Envelope's tags do).
func readEnvelope(r *reader, e *Envelope) error {
	if r.peek() == 'n' && r.literal("null") {
		return nil
	}
	return r.each(func(k []byte) error {
		var err error
		switch string(k) {
		case "v":
			e.V, err = r.int()
		case "kind":
			var s string
			s, err = r.optString()
			e.Kind = MsgKind(s)
		case "task_id":
			e.TaskID, err = r.optString()
		case "run_id":
			e.RunID, err = r.sharedStr()
		case "trace_id":
			e.TraceID, err = r.sharedStr()
		case "parent_trace_id":
			e.ParentTraceID, err = r.sharedStr()
		case "span_id":
			e.SpanID, err = r.optString()
		case "agent":
			e.Agent, err = r.sharedStr()
		case "input":
			e.Input, err = r.raw()
		case "metadata":
			e.Metadata, err = readStringMap(r)
		case "depth":
			e.Depth, err = r.int()
		case "deadline":
			e.Deadline, err = r.int64()
		case "reply_to":
			e.ReplyTo, err = r.sharedStr()
		case "publish_events":
			e.PublishEvents, err = r.bool()
		case "token_budget":
			e.TokenBudget, err = r.int64()
		case "relay_to":
			e.RelayTo, err = r.optString()
		case "attempt":
			e.Attempt, err = r.int()
		case "deltas":
			e.Deltas, err = r.bool()
		case "delta_count":
			e.DeltaCount, err = r.int()
		case "result":
			if r.peek() == 'n' && r.literal("null") {
				e.Result = nil
				return nil
			}
			e.Result = &svc.AgentResult{}
			err = readResult(r, e.Result)
		case "runtime_id":
			e.RuntimeID, err = r.sharedStr()
		case "delivery":
			e.Delivery, err = r.int()
		case "key_id":
			e.KeyID, err = r.optString()
		case "sig":
			e.Sig, err = r.optString()
		default:
			err = r.skip()
		}
		return err
	})
}

func readStringMap(r *reader) (map[string]string, error) {
	if r.peek() == 'n' && r.literal("null") {
		return nil, nil
	}
	m := map[string]string{}
	err := r.each(func(k []byte) error {
		v, err := r.optString()
		m[string(k)] = v
		return err
	})
	return m, err
}

func readResult(r *reader, res *svc.AgentResult) error {
	return r.each(func(k []byte) error {
		var err error
		switch string(k) {
		case "agent_name":
			res.AgentName, err = r.sharedStr()
		case "task_id":
			res.TaskID, err = r.optString()
		case "success":
			res.Success, err = r.bool()
		case "output":
			res.Output, err = r.raw()
		case "error":
			if r.peek() == 'n' && r.literal("null") {
				res.Error = nil
				return nil
			}
			info := &svc.ErrorInfo{}
			res.Error = info
			err = r.each(func(k []byte) error {
				var err error
				switch string(k) {
				case "type":
					info.Type, err = r.optString()
				case "message":
					info.Message, err = r.optString()
				case "reason":
					info.Reason, err = r.optString()
				default:
					err = r.skip()
				}
				return err
			})
		case "metadata":
			err = readMetadata(r, &res.Metadata)
		default:
			err = r.skip()
		}
		return err
	})
}

func readMetadata(r *reader, m *svc.ResultMetadata) error {
	if r.peek() == 'n' && r.literal("null") {
		return nil
	}
	return r.each(func(k []byte) error {
		var err error
		switch string(k) {
		case "trace_id":
			m.TraceID, err = r.sharedStr()
		case "duration_ms":
			m.DurationMS, err = r.float()
		case "tokens_used":
			m.TokensUsed, err = r.int64()
		case "cost_usd":
			m.CostUSD, err = r.float()
		case "model":
			m.Model, err = r.sharedStr()
		case "attempts":
			m.Attempts, err = r.int()
		case "backend":
			m.Backend, err = r.sharedStr()
		case "models_tried":
			m.ModelsTried = nil
			err = r.elems(func() error {
				s, err := r.optString()
				m.ModelsTried = append(m.ModelsTried, s)
				return err
			})
		case "cost_unknown":
			m.CostUnknown, err = r.bool()
		case "cached_tokens":
			m.CachedTokens, err = r.int64()
		default:
			err = r.skip()
		}
		return err
	})
}

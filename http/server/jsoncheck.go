package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	svc "github.com/svc-dev/svc"
)

// checkJSONText refuses a syntactically valid JSON text that encoding/json
// would accept but not keep: invalid UTF-8 and unpaired surrogate escapes
// (both silently become U+FFFD, or are echoed raw in a json.RawMessage),
// duplicate object keys at any depth (the last one silently wins), and
// numbers beyond the range of a float64 (kept verbatim in an input, where
// most JSON readers fail on them). Every refusal is a SpecValidationError
// naming the offset, and the key for a duplicate. data must already be
// known to be one valid JSON value.
func checkJSONText(data []byte) error {
	if i := invalidUTF8(data); i >= 0 {
		return svc.Errorf(svc.KindSpecValidation, "invalid UTF-8 at offset %d: JSON text must be UTF-8", i)
	}
	if i, esc := loneSurrogate(data); i >= 0 {
		return svc.Errorf(svc.KindSpecValidation, "unpaired surrogate %s at offset %d: a \\uD800-\\uDFFF escape must be half of a pair", esc, i)
	}
	if tokensOK(data) {
		return nil
	}
	return checkTokens(data)
}

// tokensOK is checkTokens' fast path for the common case, a body with
// nothing to refuse: one pass over the bytes, no tokens, no paths, a key
// set only for objects with more than a few keys. It answers true only
// when data has no duplicate key and no number that overflows a float64;
// false means "perhaps", and checkTokens then finds the problem and names
// it. data must be one valid JSON value. Decoding a run's body with
// checkTokens alone cost more than the run (issue 15).
func tokensOK(data []byte) bool {
	// stack holds the open objects and arrays, innermost last; keys the
	// keys of the open objects, each object's from its start on. Both
	// start in arrays on the stack, so a small body costs no allocation.
	type open struct {
		object bool
		start  int // the object's first key in keys
	}
	var stackBuf [16]open
	var keysBuf [32][]byte
	stack, keys := stackBuf[:0], keysBuf[:0]
	expectKey := false
	for i := 0; i < len(data); i++ {
		c := data[i]
		switch c {
		case ' ', '\t', '\r', '\n', ',', ':':
		case '{':
			stack = append(stack, open{object: true, start: len(keys)})
			expectKey = true
			continue
		case '[':
			stack = append(stack, open{start: len(keys)})
		case '}', ']':
			keys = keys[:stack[len(stack)-1].start]
			stack = stack[:len(stack)-1]
		case '"':
			j := i + 1
			escaped := false
			for ; j < len(data) && data[j] != '"'; j++ {
				if data[j] == '\\' {
					escaped = true
					j++
				}
			}
			if expectKey {
				if escaped {
					return false // "a" and "\u0061" are one key: let checkTokens decode them
				}
				k := data[i+1 : j]
				mine := keys[stack[len(stack)-1].start:]
				if len(mine) >= 64 || slices.ContainsFunc(mine, func(o []byte) bool { return bytes.Equal(o, k) }) {
					return false
				}
				keys = append(keys, k)
			}
			i = j
		case 't', 'f', 'n':
			for i+1 < len(data) && data[i+1] >= 'a' && data[i+1] <= 'z' {
				i++
			}
		default: // a number
			j := i
			exp := false
			for j < len(data) && strings.IndexByte("+-.0123456789eE", data[j]) >= 0 {
				if data[j] == 'e' || data[j] == 'E' {
					exp = true
				}
				j++
			}
			// Without an exponent a float64 overflows only past 309
			// digits.
			if exp || j-i > 300 {
				if f, err := strconv.ParseFloat(string(data[i:j]), 64); err != nil && math.IsInf(f, 0) {
					return false
				}
			}
			i = j - 1
		}
		// After a value or a key, a key comes next only after a comma in
		// an object: the ',' case leaves expectKey set below.
		expectKey = c == ',' && len(stack) > 0 && stack[len(stack)-1].object ||
			(expectKey && (c == ' ' || c == '\t' || c == '\r' || c == '\n'))
	}
	return true
}

// invalidUTF8 returns the offset of the first byte of data that is not
// part of valid UTF-8 (surrogate code points encoded directly included),
// or -1.
func invalidUTF8(data []byte) int {
	if utf8.Valid(data) {
		return -1
	}
	for i := 0; i < len(data); {
		if data[i] < utf8.RuneSelf {
			i++
			continue
		}
		r, n := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return -1
}

// loneSurrogate returns the offset and text of the first \u escape of a
// surrogate that is not half of a high-low pair, or -1. In valid JSON a
// backslash only occurs in a string, where it starts an escape, so the
// bytes can be scanned without tracking strings.
func loneSurrogate(data []byte) (int, string) {
	for i := 0; i < len(data); i++ {
		if data[i] != '\\' {
			continue
		}
		if i+1 >= len(data) || data[i+1] != 'u' {
			i++ // skip the escaped character, which may be a backslash
			continue
		}
		r, ok := hex4(data[i+2:])
		if !ok {
			i++
			continue
		}
		switch {
		case r >= 0xD800 && r <= 0xDBFF:
			if i+11 < len(data) && data[i+6] == '\\' && data[i+7] == 'u' {
				if lo, ok := hex4(data[i+8:]); ok && lo >= 0xDC00 && lo <= 0xDFFF {
					i += 11
					continue
				}
			}
			return i, string(data[i : i+6])
		case r >= 0xDC00 && r <= 0xDFFF:
			return i, string(data[i : i+6])
		}
		i += 5
	}
	return -1, ""
}

// hex4 decodes the four hex digits at the start of b.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	n, err := strconv.ParseUint(string(b[:4]), 16, 32)
	return rune(n), err == nil
}

// frame is one open object or array of checkTokens' walk.
type frame struct {
	object bool
	keys   map[string]struct{}
	key    bool   // an object's next token is a key
	name   string // the path of this value, for messages
	index  int    // an array's next element
}

// checkTokens walks data's tokens, refusing duplicate keys in any object
// and numbers that overflow a float64.
func checkTokens(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var stack []*frame
	// child returns the path of the value about to start, and marks it
	// consumed in its parent.
	var lastKey string
	child := func() string {
		if len(stack) == 0 {
			return ""
		}
		top := stack[len(stack)-1]
		if top.object {
			top.key = true
			return joinPath(top.name, lastKey)
		}
		p := top.name + "[" + strconv.Itoa(top.index) + "]"
		top.index++
		return p
	}
	for {
		start := dec.InputOffset()
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return jsonError(data, err, dec.InputOffset())
		}
		if len(stack) > 0 {
			if top := stack[len(stack)-1]; top.object && top.key {
				if d, ok := tok.(json.Delim); ok && d == '}' {
					stack = stack[:len(stack)-1]
					continue
				}
				k, _ := tok.(string)
				if _, dup := top.keys[k]; dup {
					where := ""
					if top.name != "" {
						where = " in " + top.name
					}
					return svc.Errorf(svc.KindSpecValidation, "duplicate key %q%s at offset %d", k, where, keyOffset(data, start))
				}
				top.keys[k] = struct{}{}
				top.key = false
				lastKey = k
				continue
			}
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{':
				stack = append(stack, &frame{object: true, keys: map[string]struct{}{}, key: true, name: child()})
			case '[':
				stack = append(stack, &frame{name: child()})
			default: // ']'; '}' was handled with the keys
				stack = stack[:len(stack)-1]
			}
		case json.Number:
			path := child()
			if f, err := strconv.ParseFloat(string(t), 64); err != nil && math.IsInf(f, 0) {
				where := ""
				if path != "" {
					where = " (" + path + ")"
				}
				return svc.Errorf(svc.KindSpecValidation, "number %s at offset %d%s is out of range: JSON numbers must fit a 64-bit float",
					t, keyOffset(data, start), where)
			}
		default:
			child()
		}
	}
}

// keyOffset returns the offset of the token that starts after start:
// the decoder's offset is before the separator and blanks.
func keyOffset(data []byte, start int64) int64 {
	i := start
	for i < int64(len(data)) && strings.IndexByte(" \t\r\n,:", data[i]) >= 0 {
		i++
	}
	return i
}

func joinPath(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}

// checkRequestID holds a request_id from a body to the rule of the
// X-Request-Id header (ValidRequestID); "" is no request id (a TaskSpec
// cannot tell an empty one from none: see checkRequestIDGiven). field
// names it in the message.
func checkRequestID(id, field string) error {
	if id == "" || ValidRequestID(id) {
		return nil
	}
	return requestIDError(id, field)
}

// checkRequestIDGiven is checkRequestID for a request_id decoded as a
// pointer: nil is none, and an empty one given is as invalid as any other
// id outside the rule.
func checkRequestIDGiven(id *string, field string) error {
	if id == nil || ValidRequestID(*id) {
		return nil
	}
	return requestIDError(*id, field)
}

func requestIDError(id, field string) error {
	return svc.Errorf(svc.KindSpecValidation, "%s %q: want 1 to %d printable ASCII characters without spaces, like %s",
		field, truncate(id, 40), MaxRequestIDLen, RequestIDHeader)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// checkFieldCase refuses a member of obj, an object about to be decoded
// into a value of type t, whose name matches a field of t only when case
// is ignored ("INPUT" for "input"), and does the same in the objects
// nested in it that decode into structs. encoding/json matches names
// without regard to case, so such a key would be taken for the field,
// silently winning over the real one when both are present: a duplicate
// that checkTokens, which compares exact keys, cannot see. path prefixes
// the names in the message ("task.", "tasks[1].").
func checkFieldCase(obj map[string]json.RawMessage, t reflect.Type, path string) error {
	fields := jsonFields(t)
	if fields == nil {
		return nil
	}
	for k, v := range obj {
		if ft, ok := fields[k]; ok {
			if err := checkNestedCase(v, ft, path+k); err != nil {
				return err
			}
			continue
		}
		for name := range fields {
			if strings.EqualFold(k, name) {
				return svc.Errorf(svc.KindSpecValidation, "unknown field %q: field names are case-sensitive; did you mean %q?", path+k, path+name)
			}
		}
	}
	return nil
}

// checkNestedCase applies checkFieldCase to the struct-typed values in
// raw, a value decoding into t: a struct, or a slice or map of them. A
// value of the wrong shape is left to the decoder, which names it.
func checkNestedCase(raw json.RawMessage, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case jsonFields(t) != nil:
		var obj map[string]json.RawMessage
		if json.Unmarshal(raw, &obj) != nil {
			return nil
		}
		return checkFieldCase(obj, t, path+".")
	case t.Kind() == reflect.Slice && jsonFields(derefType(t.Elem())) != nil:
		var items []json.RawMessage
		if json.Unmarshal(raw, &items) != nil {
			return nil
		}
		for i, item := range items {
			if err := checkNestedCase(item, t.Elem(), path+"["+strconv.Itoa(i)+"]"); err != nil {
				return err
			}
		}
	}
	return nil
}

func derefType(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// structFields caches jsonFields: request types are few and fixed.
var structFields sync.Map // reflect.Type → map[string]reflect.Type

// jsonFields maps the JSON names of t's fields to their types, or returns
// nil when t does not decode as a plain struct (not a struct, or one with
// its own UnmarshalJSON). Embedded structs' fields are promoted, as
// encoding/json does.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	if t.Kind() != reflect.Struct || reflect.PointerTo(t).Implements(jsonUnmarshaler) {
		return nil
	}
	if m, ok := structFields.Load(t); ok {
		return m.(map[string]reflect.Type)
	}
	m := map[string]reflect.Type{}
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			for k, v := range jsonFields(derefType(f.Type)) {
				m[k] = v
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		m[name] = f.Type
	}
	structFields.Store(t, m)
	return m
}

var jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()

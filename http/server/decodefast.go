package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"

	svc "github.com/svc-dev/svc"
)

// The run body's fast path (issue 15): a run's body was read into a
// growing buffer, scanned and copied by a json.Decoder, unmarshalled into
// a map of its members, case-checked, and decoded again with a strict
// Decoder, some 40 allocations for a 60-byte body. decodeRunBodyFast
// reads a body that needs none of the checks' messages in one scan for
// validity, one for what checkJSONText refuses and one for its members,
// and takes the fields from their bytes. It answers only when the body is
// plainly acceptable: whatever it does not recognise (an error, an escaped
// key, a case variant, a field it cannot take verbatim) sends the body to
// decodeRunBody, which decides and words the answer as it always did.

// bodyBufs holds the buffers run bodies are read into.
var bodyBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledBody is the largest buffer put back in bodyBufs: a rare large
// body should not pin its memory in the pool.
const maxPooledBody = 64 << 10

// readBodyPooled is readBody into a pooled buffer: call release once the
// body's bytes are no longer used (everything decoded from them is a
// copy).
func readBodyPooled(w http.ResponseWriter, r *http.Request, limit int64) (data []byte, release func(), err error) {
	if err := optionalJSONBody(r); err != nil {
		return nil, nil, err
	}
	buf := bodyBufs.Get().(*bytes.Buffer)
	buf.Reset()
	release = func() {
		if buf.Cap() <= maxPooledBody {
			bodyBufs.Put(buf)
		}
	}
	if n := r.ContentLength; n > 0 && n <= limit {
		buf.Grow(int(n) + 1) // +1: ReadFrom wants room to see EOF
	}
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, limit)); err != nil {
		release()
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return nil, nil, svc.Errorf(svc.KindPayloadTooLarge, "request body exceeds %d bytes", limit)
		}
		if e, ok := errors.AsType[*svc.Error](err); ok {
			return nil, nil, e // the body's own error: BodyDeadline's RequestTimeoutError
		}
		return nil, nil, svc.Wrap(svc.KindSpecValidation, err, "reading the request body")
	}
	return buf.Bytes(), release, nil
}

// decodeRunBodyFast is decodeRunBody for a body it can take without
// doubt; ok false means "ask decodeRunBody". Both decode into the same
// wire types (runEnvelope, wireTask) and check them with the same
// functions: decodeRunBody through encoding/json, this through tables
// made from the same json tags (fastFieldsOf).
func decodeRunBodyFast(data []byte) (task svc.TaskSpec, requestID string, ok bool) {
	if !json.Valid(data) {
		return svc.TaskSpec{}, "", false
	}
	obj := skipSpace(data, 0)
	if data[obj] != '{' || checkJSONText(data) != nil {
		return svc.TaskSpec{}, "", false
	}
	var ms [8]member
	members, ok := objectMembers(data[obj:], ms[:0])
	if !ok {
		return svc.TaskSpec{}, "", false
	}
	var err error
	if m := find(members, "task"); m == nil {
		// A bare TaskSpec.
		var w wireTask
		if !wireTaskFields.take(members, reflect.ValueOf(&w).Elem()) {
			return svc.TaskSpec{}, "", false
		}
		if task, err = w.task(""); err != nil {
			return svc.TaskSpec{}, "", false
		}
		return task, "", true
	}
	// {"task": TaskSpec, "request_id": "..."}
	var env runEnvelope
	if !envelopeFields.take(members, reflect.ValueOf(&env).Elem()) || env.Task == nil {
		return svc.TaskSpec{}, "", false
	}
	if task, err = env.Task.task("task."); err != nil || checkRequestIDGiven(env.RequestID, "request_id") != nil {
		return svc.TaskSpec{}, "", false
	}
	return task, deref(env.RequestID), true
}

// The fast path's tables of the run body's types, made from their json
// tags: a field added to svc.TaskSpec is read by both paths at once.
var (
	wireTaskFields = fastFieldsOf(reflect.TypeFor[wireTask]())
	envelopeFields = fastFieldsOf(reflect.TypeFor[runEnvelope]())
)

// fastField is how the fast path takes one field of a wire type from its
// value's bytes: take is false for a value it does not take as is (an
// escaped string, a null where decodeRunBody has something to say, a
// value of the wrong type), which sends the body to the strict decoder.
type fastField struct {
	name  string // the member's name: the field's json tag
	index []int
	take  func(dst reflect.Value, val []byte) bool
}

// fastFields is a wire type's table.
type fastFields []fastField

// fastFieldsOf makes t's table from its fields' json tags, the ones
// encoding/json reads in decodeRunBody, with its rules: the fields of an
// embedded struct are the outer type's, and an outer field shadows an
// embedded one of the same name (wireTask's request_id). Strings are
// taken when plain, json.RawMessage verbatim unless null, a pointer to a
// string or a struct as that value, anything else through json.Unmarshal.
func fastFieldsOf(t reflect.Type) fastFields {
	var fs fastFields
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" {
			continue // not on the wire (TaskSpec.Invalid)
		}
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			for _, inner := range fastFieldsOf(f.Type) {
				if slices.ContainsFunc(fs, func(o fastField) bool { return o.name == inner.name }) ||
					hasField(t, inner.name) {
					continue // shadowed by a field of t
				}
				inner.index = append([]int{f.Index[0]}, inner.index...)
				fs = append(fs, inner)
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		fs = append(fs, fastField{name: name, index: f.Index, take: takerOf(f.Type)})
	}
	return fs
}

// hasField reports whether t has a field of its own (not embedded) on
// the wire as name.
func hasField(t reflect.Type, name string) bool {
	for f := range t.Fields() {
		if n, _, _ := strings.Cut(f.Tag.Get("json"), ","); n == name && !f.Anonymous {
			return true
		}
	}
	return false
}

// takerOf is how a value of type t is taken from its bytes.
func takerOf(t reflect.Type) func(dst reflect.Value, val []byte) bool {
	switch {
	case t == reflect.TypeFor[json.RawMessage]():
		return func(dst reflect.Value, val []byte) bool {
			if val[0] == 'n' { // null: decodeRunBody says what it means
				return false
			}
			dst.SetBytes(bytes.Clone(val))
			return true
		}
	case t.Kind() == reflect.String:
		return func(dst reflect.Value, val []byte) bool {
			s, ok := plainString(val)
			dst.SetString(s)
			return ok
		}
	case t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.String:
		return func(dst reflect.Value, val []byte) bool {
			s, ok := plainString(val)
			if ok {
				dst.Set(reflect.ValueOf(&s))
			}
			return ok
		}
	case t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct:
		inner := fastFieldsOf(t.Elem())
		return func(dst reflect.Value, val []byte) bool {
			if val[0] != '{' {
				return false
			}
			var ms [8]member
			members, ok := objectMembers(val, ms[:0])
			if !ok {
				return false
			}
			p := reflect.New(t.Elem())
			dst.Set(p)
			return inner.take(members, p.Elem())
		}
	}
	return func(dst reflect.Value, val []byte) bool {
		return json.Unmarshal(val, dst.Addr().Interface()) == nil
	}
}

// take sets dst's fields from members, when each member is one of them,
// spelt exactly, with a value it takes as is.
func (fs fastFields) take(members []member, dst reflect.Value) bool {
next:
	for _, m := range members {
		for i := range fs {
			if string(m.key) == fs[i].name {
				if !fs[i].take(dst.FieldByIndex(fs[i].index), m.val) {
					return false
				}
				continue next
			}
		}
		return false
	}
	return true
}

// plainString is the string a JSON string value without escapes holds;
// false for any other value.
func plainString(v []byte) (string, bool) {
	if len(v) < 2 || v[0] != '"' || bytes.IndexByte(v, '\\') >= 0 {
		return "", false
	}
	return string(v[1 : len(v)-1]), true
}

// member is one member of a JSON object: its key (the bytes between the
// quotes; never escaped, see objectMembers) and its value's bytes.
type member struct {
	key, val []byte
}

// find is the member named key, or nil.
func find(ms []member, key string) *member {
	for i := range ms {
		if string(ms[i].key) == key {
			return &ms[i]
		}
	}
	return nil
}

// objectMembers appends the members of obj, a valid JSON object (and
// nothing after it but space), to ms; false when a key has an escape
// (which only decoding it would compare rightly).
func objectMembers(obj []byte, ms []member) ([]member, bool) {
	i := skipSpace(obj, 1)
	if obj[i] == '}' {
		return ms, true
	}
	for {
		i = skipSpace(obj, i)
		end := skipString(obj, i)
		key := obj[i+1 : end-1]
		if bytes.IndexByte(key, '\\') >= 0 {
			return nil, false
		}
		i = skipSpace(obj, end) + 1 // ':'
		i = skipSpace(obj, i)
		end = skipValue(obj, i)
		ms = append(ms, member{key: key, val: obj[i:end]})
		i = skipSpace(obj, end)
		if obj[i] == '}' {
			return ms, true
		}
		i++ // ','
	}
}

// skipSpace is the index of the first byte of data at or after i that is
// not JSON white space.
func skipSpace(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\r', '\n':
			i++
		default:
			return i
		}
	}
	return i
}

// skipString is the index just after the JSON string starting at i.
func skipString(data []byte, i int) int {
	for i++; i < len(data); i++ {
		switch data[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return i
}

// skipValue is the index just after the valid JSON value starting at i.
func skipValue(data []byte, i int) int {
	switch data[i] {
	case '"':
		return skipString(data, i)
	case '{', '[':
		depth := 0
		for ; i < len(data); i++ {
			switch data[i] {
			case '"':
				i = skipString(data, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
		return i
	}
	// A number, true, false or null: up to the next delimiter.
	for i < len(data) {
		switch data[i] {
		case ',', '}', ']', ' ', '\t', '\r', '\n':
			return i
		}
		i++
	}
	return i
}

package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
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
// doubt; ok false means "ask decodeRunBody".
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
	if m := find(members, "task"); m == nil {
		// A bare TaskSpec.
		if task, ok = taskFast(members); !ok || checkTask(task, "") != nil {
			return svc.TaskSpec{}, "", false
		}
		return task, "", true
	}
	// {"task": TaskSpec, "request_id": "..."}
	for _, m := range members {
		switch string(m.key) {
		case "task":
			if m.val[0] != '{' {
				return svc.TaskSpec{}, "", false
			}
			var ts [8]member
			tm, ok := objectMembers(m.val, ts[:0])
			if !ok {
				return svc.TaskSpec{}, "", false
			}
			if task, ok = taskFast(tm); !ok {
				return svc.TaskSpec{}, "", false
			}
		case "request_id":
			// An empty one is refused: decodeRunBody words it.
			if requestID, ok = plainString(m.val); !ok || requestID == "" {
				return svc.TaskSpec{}, "", false
			}
		default:
			return svc.TaskSpec{}, "", false
		}
	}
	if checkTask(task, "task.") != nil || checkRequestID(requestID, "request_id") != nil {
		return svc.TaskSpec{}, "", false
	}
	return task, requestID, true
}

// taskFast builds a TaskSpec from the members of its object, when each is
// one of its fields, spelt exactly, with a value it takes as is.
func taskFast(members []member) (svc.TaskSpec, bool) {
	var t svc.TaskSpec
	var ok bool
	for _, m := range members {
		switch string(m.key) {
		case "input":
			if m.val[0] == 'n' { // null: decodeRunBody says it is missing
				return svc.TaskSpec{}, false
			}
			t.Input = json.RawMessage(bytes.Clone(m.val))
		case "id":
			if t.ID, ok = plainString(m.val); !ok {
				return svc.TaskSpec{}, false
			}
		case "request_id":
			if t.RequestID, ok = plainString(m.val); !ok || t.RequestID == "" {
				return svc.TaskSpec{}, false
			}
		case "metadata":
			if json.Unmarshal(m.val, &t.Metadata) != nil {
				return svc.TaskSpec{}, false
			}
		case "token_budget":
			if json.Unmarshal(m.val, &t.TokenBudget) != nil {
				return svc.TaskSpec{}, false
			}
		default:
			return svc.TaskSpec{}, false
		}
	}
	return t, t.Input != nil
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

package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"

	svc "github.com/svc-dev/svc"
)

// readBody reads at most limit bytes of r's body, which must be
// application/json (requireJSON) unless it is empty, so that a missing
// body is reported as such. A longer body is a
// PayloadTooLargeError; http.MaxBytesReader also tells net/http to close the
// connection rather than drain the rest.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if err := optionalJSONBody(r); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return nil, svc.Errorf(svc.KindPayloadTooLarge, "request body exceeds %d bytes", limit)
		}
		if e, ok := errors.AsType[*svc.Error](err); ok {
			return nil, e // the body's own error: BodyDeadline's RequestTimeoutError
		}
		return nil, svc.Wrap(svc.KindSpecValidation, err, "reading the request body")
	}
	return data, nil
}

// runEnvelope is the body the HTTP client sends to POST /agents/{name}/run.
type runEnvelope struct {
	Task      *wireTask `json:"task"`
	RequestID *string   `json:"request_id"`
}

// wireTask is a TaskSpec as a body holds it. Its RequestID, over the
// TaskSpec's own, is a pointer, so that an empty request_id ("") is told
// from none and refused like any other invalid id rather than taken for
// absent.
type wireTask struct {
	svc.TaskSpec
	RequestID *string `json:"request_id"`
}

// task checks w (checkTask, and an empty request_id) and returns its
// TaskSpec. path prefixes the names in the message ("task.").
func (w *wireTask) task(path string) (svc.TaskSpec, error) {
	t := w.TaskSpec
	if w.RequestID != nil {
		t.RequestID = *w.RequestID
	}
	if err := checkTask(t, path); err != nil {
		return svc.TaskSpec{}, err
	}
	if err := checkRequestIDGiven(w.RequestID, path+"request_id"); err != nil {
		return svc.TaskSpec{}, err
	}
	return t, nil
}

// decodeRunBody decodes the body of POST /agents/{name}/run: a bare
// TaskSpec, or {"task": TaskSpec, "request_id": "..."} when the top-level
// object has a "task" key. It returns the task and the envelope's
// request_id ("" for a bare TaskSpec). Every error is a SpecValidationError
// whose message names the offending field or offset.
func decodeRunBody(data []byte) (svc.TaskSpec, string, error) {
	obj, err := topLevelObject(data)
	if err != nil {
		return svc.TaskSpec{}, "", err
	}
	if _, wrapped := obj["task"]; wrapped {
		if err := checkFieldCase(obj, reflect.TypeFor[runEnvelope](), ""); err != nil {
			return svc.TaskSpec{}, "", err
		}
		var env runEnvelope
		if err := strictUnmarshal(data, &env); err != nil {
			return svc.TaskSpec{}, "", err
		}
		if env.Task == nil {
			return svc.TaskSpec{}, "", svc.Errorf(svc.KindSpecValidation, "task must be a TaskSpec object, not null")
		}
		task, err := env.Task.task("task.")
		if err != nil {
			return svc.TaskSpec{}, "", err
		}
		if err := checkRequestIDGiven(env.RequestID, "request_id"); err != nil {
			return svc.TaskSpec{}, "", err
		}
		return task, deref(env.RequestID), nil
	}
	// A bare TaskSpec; a "Task" key is a wrapper miscased.
	if err := checkFieldCase(obj, reflect.TypeFor[struct {
		svc.TaskSpec
		Task json.RawMessage `json:"task"`
	}](), ""); err != nil {
		return svc.TaskSpec{}, "", err
	}
	if _, ok := obj["input"]; !ok {
		return svc.TaskSpec{}, "", missingInput(obj)
	}
	var w wireTask
	if err := strictUnmarshal(data, &w); err != nil {
		return svc.TaskSpec{}, "", err
	}
	task, err := w.task("")
	if err != nil {
		return svc.TaskSpec{}, "", err
	}
	return task, "", nil
}

// missingInput is the error for a run body without "input": most often
// the agent's input sent as the body itself, so say what the body is.
func missingInput(obj map[string]json.RawMessage) error {
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, strconv.Quote(k))
	}
	slices.Sort(keys)
	found := "it is empty"
	if len(keys) > 0 {
		found = "it has " + truncate(strings.Join(keys, ", "), 80)
	}
	return svc.Errorf(svc.KindSpecValidation,
		`input is required: the body is a TaskSpec: {"input": …} (or {"task": {"input": …}}), with the agent's input under "input"; %s`, found)
}

// decodeGatherBody decodes the body of POST /agents/{name}/gather and checks
// it: at least one task, each with an input, and max_concurrency in range
// when present (0 included: a 400); absent or null, it is the default.
func decodeGatherBody(data []byte) (svc.GatherRequest, error) {
	body, err := decodeGather(data)
	if err != nil {
		return svc.GatherRequest{}, err
	}
	req := svc.GatherRequest{Tasks: make([]svc.TaskSpec, 0, body.n), MaxConcurrency: body.maxConcurrency}
	for t := range body.tasks() {
		req.Tasks = append(req.Tasks, t)
	}
	return req, nil
}

// gatherBody is a checked JSON gather body whose tasks stay encoded until
// the run takes them (tasks): the 87,000 tasks of a 1 MiB body, decoded
// all at once, held 7.5 MB for the whole gather, which the heap's goal
// multiplied (issue 25).
type gatherBody struct {
	list           taskList
	n              int
	maxConcurrency int
}

// decodeGather decodes and checks a gather body as decodeGatherBody
// does, every task included, so that a bad task refuses the whole body
// before any runs; it keeps the tasks' JSON, not the tasks.
func decodeGather(data []byte) (gatherBody, error) {
	obj, err := topLevelObject(data)
	if err != nil {
		return gatherBody{}, err
	}
	if err := checkFieldCase(obj, reflect.TypeFor[svc.GatherRequest](), ""); err != nil {
		return gatherBody{}, err
	}
	var wire struct {
		Tasks          taskList `json:"tasks"`
		MaxConcurrency int      `json:"max_concurrency"`
	}
	if err := strictUnmarshal(data, &wire); err != nil {
		return gatherBody{}, err
	}
	if wire.Tasks.n == 0 {
		return gatherBody{}, &svc.Error{Kind: svc.KindSpecValidation, Err: svc.ErrNoTasks}
	}
	body := gatherBody{list: wire.Tasks, n: wire.Tasks.n, maxConcurrency: wire.MaxConcurrency}
	if raw, ok := obj["max_concurrency"]; !ok || string(raw) == "null" {
		body.maxConcurrency = svc.DefaultGatherConcurrency
	} else if _, err := svc.CheckGatherConcurrency(body.maxConcurrency); err != nil {
		return gatherBody{}, err
	}
	return body, nil
}

// tasks yields the body's tasks in order, each decoded as it is asked
// for.
func (g gatherBody) tasks() iter.Seq[svc.TaskSpec] {
	return func(yield func(svc.TaskSpec) bool) {
		_ = g.list.each(func(i int, w *wireTask) error {
			t, _ := w.task("") // checked by decodeGather
			if !yield(t) {
				return errStop
			}
			return nil
		})
	}
}

// errStop ends taskList.each early, without an error to report.
var errStop = errors.New("stop")

// taskList is the "tasks" array of a gather body, checked (every task
// decodes, strictly, and passes wireTask.task) and kept as JSON.
type taskList struct {
	raw []byte
	n   int
}

// UnmarshalJSON checks the array's tasks, one at a time, and keeps its
// JSON. Its errors are those of a []wireTask: a type error names the
// field without the index ("tasks.token_budget"), a task's own check
// names the index ("tasks[3].input").
func (l *taskList) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	if len(b) == 0 || b[0] != '[' {
		// As encoding/json words it for a []wireTask.
		value := map[byte]string{'{': "object", '"': "string", 't': "bool", 'f': "bool"}[b[0]]
		if value == "" {
			value = "number"
		}
		return &json.UnmarshalTypeError{Value: value, Type: reflect.TypeFor[[]wireTask]()}
	}
	// b is the decoder's buffer, which it reuses: keep a copy.
	l.raw = bytes.Clone(b)
	n := 0
	err := l.each(func(i int, w *wireTask) error {
		if _, err := w.task(fmt.Sprintf("tasks[%d].", i)); err != nil {
			return err
		}
		n++
		return nil
	})
	if err != nil {
		l.raw = nil
		return err
	}
	l.n = n
	return nil
}

// each decodes the tasks in order, strictly, and calls f with each; it
// stops at the first error of either, and returns it (errStop: nil).
func (l *taskList) each(f func(i int, w *wireTask) error) error {
	if l.raw == nil {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(l.raw))
	dec.DisallowUnknownFields()
	if _, err := dec.Token(); err != nil { // [
		return err
	}
	for i := 0; dec.More(); i++ {
		var w wireTask
		if err := dec.Decode(&w); err != nil {
			// A type error's field is the element's; the body's decoder
			// puts "tasks." before it, as it does for a []wireTask.
			return err
		}
		if err := f(i, &w); err != nil {
			if err == errStop {
				return nil
			}
			return err
		}
	}
	return nil
}

// checkTask rejects a task without input, and one whose request_id the
// X-Request-Id header could not carry. An explicit null counts as
// missing: it is what a Go TaskSpec with a nil Input encodes to, and an
// agent is never meant to be run on nothing.
func checkTask(t svc.TaskSpec, path string) error {
	if len(t.Input) == 0 || string(t.Input) == "null" {
		return svc.Errorf(svc.KindSpecValidation, "%sinput is required", path)
	}
	return checkRequestID(t.RequestID, path+"request_id")
}

// topLevelObject checks that data is exactly one JSON object and returns its
// members. It reports, in this order: an empty body, malformed JSON (with
// the byte offset), a value that is not an object, data after it, and what
// checkJSONText refuses.
func topLevelObject(data []byte) (map[string]json.RawMessage, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, svc.Errorf(svc.KindSpecValidation, "request body is empty: a JSON object is required")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return nil, jsonError(data, err, dec.InputOffset())
	}
	if raw[0] != '{' {
		return nil, svc.Errorf(svc.KindSpecValidation, "request body must be a JSON object, not %s", jsonKind(raw[0]))
	}
	off := dec.InputOffset()
	if _, err := dec.Token(); err != io.EOF {
		for off < int64(len(data)) && strings.IndexByte(" \t\r\n", data[off]) >= 0 {
			off++
		}
		return nil, svc.Errorf(svc.KindSpecValidation, "unexpected data after the JSON object at offset %d", off)
	}
	if err := checkJSONText(data); err != nil {
		return nil, err
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, jsonError(raw, err, 0)
	}
	return obj, nil
}

// strictUnmarshal decodes one JSON value into v, refusing unknown fields.
func strictUnmarshal(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(data, err, dec.InputOffset())
	}
	return nil
}

// jsonError turns an encoding/json error about data into a
// SpecValidationError that names the field or the offset, without Go type
// names a client cannot act on. offset is where the decoder stopped, for
// errors that carry none.
func jsonError(data []byte, err error, offset int64) error {
	if e, ok := errors.AsType[*json.SyntaxError](err); ok {
		// Offset counts the bytes read, the offending one included; the
		// message names that byte, 0-based like every other offset here.
		return malformed(data, e.Offset-1, e.Error())
	}
	if e, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
		field := wireField(e.Field)
		if field == "" {
			field = "(body)"
		}
		return svc.Errorf(svc.KindSpecValidation, "field %q: expected %s, got JSON %s", field, jsonTypeName(e.Type.Kind().String()), e.Value)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		// The text stopped short: the break is at its end, whatever the
		// decoder had consumed when it gave up.
		return malformed(data, int64(len(data)), "unexpected end of input")
	}
	msg := strings.TrimPrefix(err.Error(), "json: ")
	// The remaining decoder errors are unknown fields ("unknown field \"x\"")
	// and invalid values for a type; both already name what is wrong.
	return svc.Errorf(svc.KindSpecValidation, "%s", msg)
}

// wireField is the JSON path of a field as encoding/json names it, less
// the embedded svc.TaskSpec of a wireTask ("task.TaskSpec.metadata" is
// "task.metadata" on the wire).
func wireField(f string) string {
	if !strings.Contains(f, "TaskSpec.") {
		return f
	}
	parts := strings.Split(f, ".")
	out := parts[:0]
	for i, p := range parts {
		if p == "TaskSpec" && i < len(parts)-1 {
			continue
		}
		out = append(out, p)
	}
	return strings.Join(out, ".")
}

// malformed reports broken JSON at the 0-based byte offset off of data,
// with its line and column (1-based, in bytes) for bodies typed by hand.
func malformed(data []byte, off int64, what string) error {
	off = max(0, min(off, int64(len(data))))
	line := 1 + bytes.Count(data[:off], []byte("\n"))
	col := off + 1
	if nl := bytes.LastIndexByte(data[:off], '\n'); nl >= 0 {
		col = off - int64(nl)
	}
	return svc.Errorf(svc.KindSpecValidation, "malformed JSON at offset %d (line %d, column %d): %s", off, line, col, what)
}

// jsonTypeName names a Go reflect kind the way a JSON user would.
func jsonTypeName(kind string) string {
	switch kind {
	case "string":
		return "a string"
	case "map", "struct", "ptr", "pointer":
		return "an object"
	case "slice", "array":
		return "an array"
	case "bool":
		return "a boolean"
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		return "an integer"
	case "float32", "float64":
		return "a number"
	}
	return kind
}

// jsonKind names the JSON value starting with byte c.
func jsonKind(c byte) string {
	switch c {
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// submitEnvelope is the body of POST /submit: an svc.SubmitRequest, plus the
// request_id the HTTP client sends, as in the body of a run.
type submitEnvelope struct {
	Target    string         `json:"target"`
	Task      *wireTask      `json:"task"`
	Kind      svc.TargetKind `json:"kind"`
	RequestID *string        `json:"request_id"`
	// CallbackURL: see svc.SubmitRequest.
	CallbackURL *string `json:"callback_url"`
}

// decodeSubmitBody decodes and checks the body of POST /submit: a target,
// a task with an input, and a kind that is empty, "agent" or "group". It
// returns the request and the body's request_id. Every error is a
// SpecValidationError naming the offending field or offset.
func decodeSubmitBody(data []byte) (svc.SubmitRequest, string, error) {
	obj, err := topLevelObject(data)
	if err != nil {
		return svc.SubmitRequest{}, "", err
	}
	if err := checkFieldCase(obj, reflect.TypeFor[submitEnvelope](), ""); err != nil {
		return svc.SubmitRequest{}, "", err
	}
	var env submitEnvelope
	if err := strictUnmarshal(data, &env); err != nil {
		return svc.SubmitRequest{}, "", err
	}
	if strings.TrimSpace(env.Target) == "" {
		return svc.SubmitRequest{}, "", svc.Errorf(svc.KindSpecValidation, "target is required")
	}
	if env.Task == nil {
		return svc.SubmitRequest{}, "", svc.Errorf(svc.KindSpecValidation, "task is required: a TaskSpec object")
	}
	task, err := env.Task.task("task.")
	if err != nil {
		return svc.SubmitRequest{}, "", err
	}
	if err := checkRequestIDGiven(env.RequestID, "request_id"); err != nil {
		return svc.SubmitRequest{}, "", err
	}
	switch env.Kind {
	case "", svc.TargetAgent, svc.TargetGroup:
	default:
		return svc.SubmitRequest{}, "", svc.Errorf(svc.KindSpecValidation, "kind %q: want %q or %q", env.Kind, svc.TargetAgent, svc.TargetGroup)
	}
	if env.CallbackURL != nil && *env.CallbackURL == "" {
		return svc.SubmitRequest{}, "", svc.Errorf(svc.KindSpecValidation, "callback_url is empty: give a URL or leave the field out")
	}
	return svc.SubmitRequest{Target: env.Target, Task: task, Kind: env.Kind, CallbackURL: deref(env.CallbackURL)}, deref(env.RequestID), nil
}

// deref is *p, or "" for nil.
func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

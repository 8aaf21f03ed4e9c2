package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	svc "github.com/svc-dev/svc"
)

// fuzzCorpus is every body the package's fuzz targets know: their seeds
// and the inputs kept in testdata/fuzz (each file's []byte values).
func fuzzCorpus(t *testing.T) []string {
	t.Helper()
	corpus := append(append(append(append([]string{}, fastBodies...), runSeeds...), gatherSeeds...), submitSeeds...)
	files, err := filepath.Glob(filepath.Join("testdata", "fuzz", "*", "*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			if lit, ok := strings.CutPrefix(line, "[]byte("); ok {
				s, err := strconv.Unquote(strings.TrimSuffix(lit, ")"))
				if err != nil {
					t.Fatalf("%s: %q: %v", f, line, err)
				}
				corpus = append(corpus, s)
			}
		}
	}
	if len(files) == 0 {
		t.Fatal("no files in testdata/fuzz")
	}
	return corpus
}

// TestDecodersAgree runs every body of the fuzz corpus through the run
// body's fast path, the strict decoders and encoding/json, which all read
// the same types' json tags: the fast path takes only what the strict
// decoder takes, to the same task; what the strict decoders take,
// encoding/json reads the same; what encoding/json cannot read, they
// refuse; and every refusal is the same kind, a 400 SpecValidationError.
func TestDecodersAgree(t *testing.T) {
	refusal := func(what string, data []byte, err error) {
		t.Helper()
		if !errors.Is(err, svc.ErrSpecValidation) || StatusOf(err) != 400 {
			t.Errorf("%s refuses %q with %v (%T, %d), not a 400 SpecValidationError", what, data, err, err, StatusOf(err))
		}
	}
	var fast, strict int
	for _, body := range fuzzCorpus(t) {
		data := []byte(body)
		if checkFastAgrees(t, data) {
			fast++
		}

		// The run body.
		task, id, err := decodeRunBody(data)
		var obj map[string]json.RawMessage
		wrapped := json.Unmarshal(data, &obj) == nil && obj["task"] != nil
		// encoding/json reads the public types, where an empty request_id
		// is none: the strict decoders refuse it, which this allows.
		var std struct {
			Task      *svc.TaskSpec `json:"task"`
			RequestID string        `json:"request_id"`
		}
		var stdErr error
		if wrapped {
			stdErr = json.Unmarshal(data, &std)
		} else {
			std.Task = new(svc.TaskSpec)
			stdErr = json.Unmarshal(data, std.Task)
		}
		switch {
		case err != nil:
			refusal("decodeRunBody", data, err)
		case stdErr != nil:
			t.Errorf("decodeRunBody takes %q, which encoding/json refuses: %v", data, stdErr)
		case !reflect.DeepEqual(task, *std.Task) || id != std.RequestID:
			t.Errorf("%q: decodeRunBody %+v %q, encoding/json %+v %q", data, task, id, *std.Task, std.RequestID)
		default:
			strict++
		}

		// The gather body.
		req, err := decodeGatherBody(data)
		var stdReq svc.GatherRequest
		stdErr = json.Unmarshal(data, &stdReq)
		switch {
		case err != nil:
			refusal("decodeGatherBody", data, err)
		case stdErr != nil:
			t.Errorf("decodeGatherBody takes %q, which encoding/json refuses: %v", data, stdErr)
		default:
			if obj["max_concurrency"] == nil || string(obj["max_concurrency"]) == "null" {
				stdReq.MaxConcurrency = svc.DefaultGatherConcurrency
			}
			if !reflect.DeepEqual(req, stdReq) {
				t.Errorf("%q: decodeGatherBody %+v, encoding/json %+v", data, req, stdReq)
			}
			strict++
		}

		// The submit body.
		sub, subID, err := decodeSubmitBody(data)
		var stdSub struct {
			svc.SubmitRequest
			Task      *svc.TaskSpec `json:"task"`
			RequestID string        `json:"request_id"`
		}
		stdErr = json.Unmarshal(data, &stdSub)
		switch {
		case err != nil:
			refusal("decodeSubmitBody", data, err)
		case stdErr != nil:
			t.Errorf("decodeSubmitBody takes %q, which encoding/json refuses: %v", data, stdErr)
		case sub.Target != stdSub.Target || sub.Kind != stdSub.Kind || subID != stdSub.RequestID ||
			stdSub.Task == nil || !reflect.DeepEqual(sub.Task, *stdSub.Task):
			t.Errorf("%q: decodeSubmitBody %+v %q, encoding/json %+v", data, sub, subID, stdSub)
		default:
			strict++
		}
	}
	// The corpus must exercise the paths that take a body, not only refusals.
	if fast < 15 || strict < 30 {
		t.Errorf("taken: %d by the fast path, %d by the strict decoders", fast, strict)
	}
}

// fillAll sets every field of v, recursively, to a value that is not its
// zero value (pointers allocated, slices and maps of one element), so a
// field added to a wire type shows up in what encodes or decodes it.
func fillAll(t *testing.T, v reflect.Value, path string) {
	t.Helper()
	switch {
	case v.Type() == reflect.TypeFor[json.RawMessage]():
		v.SetBytes([]byte(`{"a":[1,"b"]}`))
		return
	case v.Type() == reflect.TypeFor[svc.RunResult]():
		t.Fatalf("%s: add a value for %s to fillAll", path, v.Type())
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString("s-" + path)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(7)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(7)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(1.25)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fillAll(t, v.Elem(), path)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fillAll(t, v.Index(0), path+"[0]")
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fillAll(t, k, path+".key")
		fillAll(t, e, path+".value")
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Struct:
		for i := range v.NumField() {
			if f := v.Type().Field(i); f.IsExported() && f.Tag.Get("json") != "-" {
				fillAll(t, v.Field(i), path+"."+v.Type().Field(i).Name)
			}
		}
	default:
		t.Fatalf("%s: add a value for %s to fillAll", path, v.Type())
	}
}

// TestFastPathTakesEveryTaskField: a body with every field of svc.TaskSpec
// set, bare and wrapped, is taken by the fast path to what encoding/json
// and decodeRunBody make of it. A field added to TaskSpec that the fast
// path's table cannot take fails here, not in a benchmark.
func TestFastPathTakesEveryTaskField(t *testing.T) {
	var want svc.TaskSpec
	fillAll(t, reflect.ValueOf(&want).Elem(), "TaskSpec")
	want.RequestID = "req-1" // the header's rule: no spaces
	want.TokenBudget = 100
	bare, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	envID := "env-1"
	wrapped, err := json.Marshal(runEnvelope{Task: &wireTask{TaskSpec: want, RequestID: &want.RequestID}, RequestID: &envID})
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range [][]byte{bare, wrapped} {
		task, _, ok := decodeRunBodyFast(body)
		if !ok {
			t.Fatalf("the fast path refused %s", body)
		}
		if !reflect.DeepEqual(task, want) {
			t.Errorf("%s: fast path %+v, want %+v", body, task, want)
		}
		checkFastAgrees(t, body)
	}
	var wire []string
	for f := range reflect.TypeFor[svc.TaskSpec]().Fields() {
		if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "-" {
			wire = append(wire, name)
		}
	}
	var table []string
	for _, f := range wireTaskFields {
		table = append(table, f.name)
	}
	slices.Sort(table)
	slices.Sort(wire)
	if !slices.Equal(table, wire) {
		t.Errorf("the fast path's table of a task %v, svc.TaskSpec's members %v", table, wire)
	}
}

// TestAppendAgentResultWritesEveryField: with every field of AgentResult
// set (metadata and error included), the run answer's encoder still writes
// what json.Marshal writes, so a field added to the type without a line
// in appendAgentResult fails here.
func TestAppendAgentResultWritesEveryField(t *testing.T) {
	var r svc.AgentResult
	fillAll(t, reflect.ValueOf(&r).Elem(), "AgentResult")
	want, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := appendAgentResult(nil, &r)
	if !ok {
		t.Fatalf("the encoder declined %+v", r)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("appendAgentResult:\n got %s\nwant %s", got, want)
	}
}

// BenchmarkDecodeRunBodyFast: the run body's fast path on the bodies the
// HTTP benchmarks and the Go client send (bare, and wrapped with a
// request id).
func BenchmarkDecodeRunBodyFast(b *testing.B) {
	for _, body := range []string{
		`{"input":{"text":"hello world"},"request_id":"bench"}`,
		`{"task":{"input":{"text":"hello world"},"metadata":{"k":"v"}},"request_id":"0193c8a2-7f4e-7000-8000-000000000001"}`,
	} {
		b.Run(strconv.Itoa(len(body)), func(b *testing.B) {
			data := []byte(body)
			b.ReportAllocs()
			for b.Loop() {
				if _, _, ok := decodeRunBodyFast(data); !ok {
					b.Fatal("refused")
				}
			}
		})
	}
}

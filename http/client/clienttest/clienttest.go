// Package clienttest is the contract suite of svc.Backend as a client sees
// it: the runtime, the HTTP client and the in-process client all pass Run,
// so code written against one behaves the same against the others.
package clienttest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	svc "github.com/svc-dev/svc"
)

// Run runs the contract suite. The GatherStream tests run when the
// backend is also an svc.GatherStreamer, and are skipped otherwise. newBackend is called once per subtest and
// must return a backend serving this fixture, and register its own cleanup
// (t.Cleanup) if it needs one; Run does not Close it.
//
// Agents:
//
//	echo  model test:echo: the output is the input; a run spends at least 2
//	      tokens, and a task's token_budget caps them (BudgetExceededError)
//	fail  model test:fail: every run fails (success false, error type ModelError)
//	slow  model test:echo with model_settings latency_ms 10000
//
// Groups, of kind graph, with unconditional edges:
//
//	pair      nodes a: echo, b: echo; edge a → b             (one terminal)
//	split     nodes a: echo, b: echo, c: echo; a → b, a → c  (two terminals)
//	slowpair  nodes a: echo, b: slow; edge a → b
//
// In Go:
//
//	svc.Group{Name: "split",
//		Nodes: []svc.GroupNode{{Name: "a", Agent: "echo"}, {Name: "b", Agent: "echo"}, {Name: "c", Agent: "echo"}},
//		Edges: []svc.GroupEdge{{From: "a", To: "b"}, {From: "a", To: "c"}}}
//
// Other agents and groups may exist, but neither an agent nor a group named
// "nope".
func Run(t *testing.T, newBackend func(t *testing.T) svc.Backend) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, b svc.Backend)
	}{
		{"Agents", testAgents},
		{"AgentSchema", testAgentSchema},
		{"RunEcho", testRunEcho},
		{"RunTaskID", testRunTaskID},
		{"RunTraceID", testRunTraceID},
		{"RunFail", testRunFail},
		{"RunUnknownAgent", testRunUnknownAgent},
		{"RunCancelled", testRunCancelled},
		{"GatherOrder", testGatherOrder},
		{"GatherFailures", testGatherFailures},
		{"GatherTraceID", testGatherTraceID},
		{"GatherConcurrency", testGatherConcurrency},
		{"GatherRejections", testGatherRejections},
		{"RunTokenBudget", testRunTokenBudget},
		{"GatherStream", testGatherStream},
		{"GatherStreamInvalid", testGatherStreamInvalid},
		{"GatherStreamRejections", testGatherStreamRejections},
		{"GatherStreamStop", testGatherStreamStop},
		{"GatherStreamCancelled", testGatherStreamCancelled},
		{"Ready", testReady},
		{"Groups", testGroups},
		{"GroupTopology", testGroupTopology},
		{"GroupUnknown", testGroupUnknown},
		{"RunGroupPair", testRunGroupPair},
		{"RunGroupTraceID", testRunGroupTraceID},
		{"RunGroupSplit", testRunGroupSplit},
		{"RunGroupCancelled", testRunGroupCancelled},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, newBackend(t))
		})
	}
}

// callTimeout bounds every call the suite makes, so a broken backend fails
// the test instead of hanging it.
const callTimeout = 30 * time.Second

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	t.Cleanup(cancel)
	return ctx
}

func testAgents(t *testing.T, b svc.Backend) {
	names, err := b.Agents(ctxFor(t))
	if err != nil {
		t.Fatalf("Agents: %v", err)
	}
	if !slices.IsSorted(names) {
		t.Errorf("Agents = %q, not sorted", names)
	}
	for _, want := range []string{"echo", "fail", "slow"} {
		if !slices.Contains(names, want) {
			t.Errorf("Agents = %q, lacks %q", names, want)
		}
	}
	if slices.Contains(names, "nope") {
		t.Errorf("Agents = %q: the fixture must not have \"nope\"", names)
	}
}

func testAgentSchema(t *testing.T, b svc.Backend) {
	s, err := b.AgentSchema(ctxFor(t), "echo")
	if err != nil {
		t.Fatalf("AgentSchema(echo): %v", err)
	}
	if s.Name != "echo" {
		t.Errorf("AgentSchema(echo).Name = %q", s.Name)
	}
	for what, raw := range map[string]json.RawMessage{"input": s.Input, "output": s.Output} {
		var obj map[string]any
		if err := json.Unmarshal(raw, &obj); err != nil {
			t.Errorf("AgentSchema(echo) %s schema %q is not a JSON object: %v", what, raw, err)
		}
	}
	if _, err := b.AgentSchema(ctxFor(t), "nope"); !errors.Is(err, svc.ErrRegistry) {
		t.Errorf("AgentSchema(nope) error = %v, want a RegistryError", err)
	}
}

// sameJSON reports whether a and b encode the same value.
func sameJSON(t *testing.T, a, b json.RawMessage) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Errorf("invalid JSON %q: %v", a, err)
		return false
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Errorf("invalid JSON %q: %v", b, err)
		return false
	}
	return reflect.DeepEqual(va, vb)
}

func testRunEcho(t *testing.T, b svc.Backend) {
	for _, input := range []string{
		`{"text":"hello","n":[1,2.5,true,null],"nested":{"k":"v"}}`,
		`"just a string"`,
		`42`,
		`["a","b"]`,
	} {
		res, err := b.Run(ctxFor(t), "echo", svc.TaskSpec{Input: json.RawMessage(input)})
		if err != nil {
			t.Fatalf("Run(echo, %s): %v", input, err)
		}
		if !res.Success || res.Error != nil {
			t.Errorf("Run(echo, %s): success %v, error %+v", input, res.Success, res.Error)
		}
		if !sameJSON(t, res.Output, json.RawMessage(input)) {
			t.Errorf("Run(echo, %s).Output = %s", input, res.Output)
		}
		if res.AgentName != "echo" {
			t.Errorf("AgentName = %q, want echo", res.AgentName)
		}
	}
}

func testRunTaskID(t *testing.T, b svc.Backend) {
	res, err := b.Run(ctxFor(t), "echo", svc.TaskSpec{ID: "task-given", Input: json.RawMessage(`1`)})
	if err != nil {
		t.Fatal(err)
	}
	if res.TaskID != "task-given" {
		t.Errorf("TaskID = %q, want the given task-given", res.TaskID)
	}
	a, err := b.Run(ctxFor(t), "echo", svc.TaskSpec{Input: json.RawMessage(`1`)})
	if err != nil {
		t.Fatal(err)
	}
	c, err := b.Run(ctxFor(t), "echo", svc.TaskSpec{Input: json.RawMessage(`1`)})
	if err != nil {
		t.Fatal(err)
	}
	if a.TaskID == "" || a.TaskID == c.TaskID {
		t.Errorf("generated task ids %q and %q: want non-empty and distinct", a.TaskID, c.TaskID)
	}
}

func testRunTraceID(t *testing.T, b svc.Backend) {
	res, err := b.Run(ctxFor(t), "echo", svc.TaskSpec{Input: json.RawMessage(`1`), RequestID: "req-from-task"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Metadata.TraceID != "req-from-task" {
		t.Errorf("trace_id = %q, want the task's request_id", res.Metadata.TraceID)
	}
	ctx := svc.WithRequestID(ctxFor(t), "req-from-ctx")
	res, err = b.Run(ctx, "echo", svc.TaskSpec{Input: json.RawMessage(`1`)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Metadata.TraceID != "req-from-ctx" {
		t.Errorf("trace_id = %q, want the context's request id", res.Metadata.TraceID)
	}
	res, err = b.Run(ctx, "echo", svc.TaskSpec{Input: json.RawMessage(`1`), RequestID: "req-from-task"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Metadata.TraceID != "req-from-task" {
		t.Errorf("trace_id = %q: the task's request_id must win over the context's", res.Metadata.TraceID)
	}
	res, err = b.Run(ctxFor(t), "echo", svc.TaskSpec{Input: json.RawMessage(`1`)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Metadata.TraceID == "" {
		t.Error("trace_id empty for a task without request_id: want a generated one")
	}
}

func testRunFail(t *testing.T, b svc.Backend) {
	res, err := b.Run(ctxFor(t), "fail", svc.TaskSpec{ID: "f1", Input: json.RawMessage(`{"x":1}`)})
	if err != nil {
		t.Fatalf("Run(fail) returned error %v: a failed run is a result, not an error", err)
	}
	if res.Success || res.Error == nil || res.Error.Type != string(svc.KindModel) || res.Error.Message == "" {
		t.Errorf("Run(fail) = success %v, error %+v; want success false with a ModelError", res.Success, res.Error)
	}
	if res.TaskID != "f1" || res.AgentName != "fail" {
		t.Errorf("Run(fail): task_id %q, agent %q", res.TaskID, res.AgentName)
	}
}

func testRunUnknownAgent(t *testing.T, b svc.Backend) {
	_, err := b.Run(ctxFor(t), "nope", svc.TaskSpec{Input: json.RawMessage(`1`)})
	if !errors.Is(err, svc.ErrRegistry) {
		t.Errorf("Run(nope) error = %v, want a RegistryError", err)
	}
	// The error says what to do: the agents there are to run.
	if err != nil && (!strings.Contains(err.Error(), `unknown agent "nope" (registered agents: `) || !strings.Contains(err.Error(), "echo")) {
		t.Errorf("Run(nope) error = %q, want it to list the registered agents", err)
	}
	// A group's name points at the group route.
	_, err = b.Run(ctxFor(t), "pair", svc.TaskSpec{Input: json.RawMessage(`1`)})
	if !errors.Is(err, svc.ErrRegistry) || !strings.Contains(err.Error(), "pair is a group: POST /groups/pair/run") {
		t.Errorf("Run(pair), a group, error = %v, want a RegistryError saying it is a group", err)
	}
}

func testRunCancelled(t *testing.T, b svc.Backend) {
	ctx, cancel := context.WithCancel(ctxFor(t))
	defer cancel()
	timer := time.AfterFunc(100*time.Millisecond, cancel)
	defer timer.Stop()
	start := time.Now()
	res, err := b.Run(ctx, "slow", svc.TaskSpec{Input: json.RawMessage(`1`)})
	elapsed := time.Since(start)
	if err == nil {
		t.Errorf("Run(slow) with a cancelled context = %+v, nil; want an error", res)
	}
	// The model sleeps 10 s; returning well before says cancellation
	// reached it, with room for a loaded machine.
	if elapsed > 5*time.Second {
		t.Errorf("Run(slow) took %v after cancellation at 100ms", elapsed)
	}
}

func inputs(n int) []svc.TaskSpec {
	tasks := make([]svc.TaskSpec, n)
	for i := range tasks {
		tasks[i] = svc.TaskSpec{ID: fmt.Sprintf("t%02d", i), Input: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))}
	}
	return tasks
}

func testGatherOrder(t *testing.T, b svc.Backend) {
	tasks := inputs(50)
	results, err := b.Gather(ctxFor(t), "echo", tasks, 8)
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	if len(results) != len(tasks) {
		t.Fatalf("Gather returned %d results for %d tasks", len(results), len(tasks))
	}
	for i, r := range results {
		if !r.Success || r.TaskID != tasks[i].ID || !sameJSON(t, r.Output, tasks[i].Input) {
			t.Errorf("result %d = task %q, success %v, output %s; want task %q echoing %s",
				i, r.TaskID, r.Success, r.Output, tasks[i].ID, tasks[i].Input)
		}
	}
}

func testGatherFailures(t *testing.T, b svc.Backend) {
	tasks := inputs(3)
	results, err := b.Gather(ctxFor(t), "fail", tasks, svc.DefaultGatherConcurrency)
	if err != nil {
		t.Fatalf("Gather(fail) returned error %v: failed tasks are results", err)
	}
	if len(results) != len(tasks) {
		t.Fatalf("Gather returned %d results for %d tasks", len(results), len(tasks))
	}
	for i, r := range results {
		if r.Success || r.Error == nil || r.Error.Type != string(svc.KindModel) || r.TaskID != tasks[i].ID {
			t.Errorf("result %d = %+v; want task %q failed with a ModelError", i, r, tasks[i].ID)
		}
	}
}

func testGatherTraceID(t *testing.T, b svc.Backend) {
	tasks := inputs(3)
	tasks[1].RequestID = "own-request"
	results, err := b.Gather(svc.WithRequestID(ctxFor(t), "batch-request"), "echo", tasks, svc.DefaultGatherConcurrency)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"batch-request", "own-request", "batch-request"}
	for i, r := range results {
		if r.Metadata.TraceID != want[i] {
			t.Errorf("result %d trace_id = %q, want %q", i, r.Metadata.TraceID, want[i])
		}
	}
}

func testGatherConcurrency(t *testing.T, b svc.Backend) {
	for _, n := range []int{1, svc.DefaultGatherConcurrency, svc.MaxGatherConcurrency} {
		results, err := b.Gather(ctxFor(t), "echo", inputs(3), n)
		if err != nil || len(results) != 3 {
			t.Errorf("Gather with max_concurrency %d: %d results, %v", n, len(results), err)
		}
	}
	for _, n := range []int{0, -1, svc.MaxGatherConcurrency + 1} {
		if _, err := b.Gather(ctxFor(t), "echo", inputs(3), n); !errors.Is(err, svc.ErrSpecValidation) {
			t.Errorf("Gather with max_concurrency %d: error %v, want a SpecValidationError", n, err)
		}
	}
}

func testGatherRejections(t *testing.T, b svc.Backend) {
	if _, err := b.Gather(ctxFor(t), "echo", nil, svc.DefaultGatherConcurrency); !errors.Is(err, svc.ErrSpecValidation) {
		t.Errorf("Gather without tasks: error %v, want a SpecValidationError", err)
	}
	if _, err := b.Gather(ctxFor(t), "nope", inputs(2), svc.DefaultGatherConcurrency); !errors.Is(err, svc.ErrRegistry) {
		t.Errorf("Gather(nope): error %v, want a RegistryError", err)
	}
}

func testReady(t *testing.T, b svc.Backend) {
	if err := b.Ready(ctxFor(t)); err != nil {
		t.Errorf("Ready = %v, want nil", err)
	}
}

// testRunTokenBudget: a task's token_budget travels with it and caps its
// run: below what the run spends, Run fails with a BudgetExceededError and
// a gather task's result fails with that type; above, nothing changes; a
// negative one is a SpecValidationError.
func testRunTokenBudget(t *testing.T, b svc.Backend) {
	ctx := ctxFor(t)
	_, err := b.Run(ctx, "echo", svc.TaskSpec{Input: json.RawMessage(`1`), TokenBudget: 1})
	if !errors.Is(err, svc.ErrBudgetExceeded) {
		t.Fatalf("Run with token_budget 1: %v, want a BudgetExceededError", err)
	}
	res, err := b.Run(ctx, "echo", svc.TaskSpec{Input: json.RawMessage(`1`), TokenBudget: 1000})
	if err != nil || !res.Success {
		t.Fatalf("Run with token_budget 1000: %+v, %v", res, err)
	}
	out, err := b.Gather(ctx, "echo", []svc.TaskSpec{{Input: json.RawMessage(`1`)}, {Input: json.RawMessage(`2`), TokenBudget: 1}}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if !out[0].Success || out[1].Success || out[1].Error == nil || out[1].Error.Type != string(svc.KindBudgetExceeded) {
		t.Fatalf("gather with one task capped at 1 token: %+v", out)
	}
	if _, err := b.Run(ctx, "echo", svc.TaskSpec{Input: json.RawMessage(`1`), TokenBudget: -1}); !errors.Is(err, svc.ErrSpecValidation) {
		t.Fatalf("Run with token_budget -1: %v, want a SpecValidationError", err)
	}
}

// streamer is b as an svc.GatherStreamer, or skips the test.
func streamer(t *testing.T, b svc.Backend) svc.GatherStreamer {
	gs, ok := b.(svc.GatherStreamer)
	if !ok {
		t.Skipf("%T is not an svc.GatherStreamer", b)
	}
	return gs
}

// collectGather runs a streamed gather to its end: the results by index, and
// the errors.
func collectGather(t *testing.T, seq iter.Seq2[svc.GatherItem, error]) (map[int]svc.AgentResult, []error) {
	t.Helper()
	got := map[int]svc.AgentResult{}
	var errs []error
	for item, err := range seq {
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if _, dup := got[item.Index]; dup {
			t.Fatalf("task %d answered twice", item.Index)
		}
		got[item.Index] = item.Result
	}
	return got, errs
}

// Every task of a streamed gather is answered once, with its index.
func testGatherStream(t *testing.T, b svc.Backend) {
	tasks := inputs(60)
	got, errs := collectGather(t, streamer(t, b).GatherStream(svc.WithRequestID(ctxFor(t), "stream-batch"), "echo", slices.Values(tasks), 7))
	if len(errs) > 0 {
		t.Fatalf("GatherStream: %v", errs)
	}
	if len(got) != len(tasks) {
		t.Fatalf("%d results for %d tasks", len(got), len(tasks))
	}
	for i, task := range tasks {
		r, ok := got[i]
		if !ok || !r.Success || r.TaskID != task.ID || !sameJSON(t, r.Output, task.Input) || r.Metadata.TraceID != "stream-batch" {
			t.Errorf("result %d = %+v; want task %q echoing %s in trace stream-batch", i, r, task.ID, task.Input)
		}
	}
}

// A task with Invalid set fails as its own result, with Invalid's kind and
// message; the others run.
func testGatherStreamInvalid(t *testing.T, b svc.Backend) {
	tasks := inputs(5)
	tasks[2] = svc.TaskSpec{Invalid: svc.Errorf(svc.KindSpecValidation, "line 3: not a task")}
	got, errs := collectGather(t, streamer(t, b).GatherStream(ctxFor(t), "echo", slices.Values(tasks), 2))
	if len(errs) > 0 || len(got) != 5 {
		t.Fatalf("%d results, errors %v", len(got), errs)
	}
	for i, r := range got {
		if i == 2 {
			if r.Success || r.Error == nil || r.Error.Type != string(svc.KindSpecValidation) || r.Error.Message != "line 3: not a task" {
				t.Errorf("invalid task: %+v, error %+v", r, r.Error)
			}
		} else if !r.Success {
			t.Errorf("task %d failed: %+v", i, r.Error)
		}
	}
}

// Rejections of the whole call are one error and no result.
func testGatherStreamRejections(t *testing.T, b svc.Backend) {
	gs := streamer(t, b)
	for _, tc := range []struct {
		agent string
		conc  int
		want  error
	}{{"nope", 2, svc.ErrRegistry}, {"echo", 0, svc.ErrSpecValidation}, {"echo", svc.MaxGatherConcurrency + 1, svc.ErrSpecValidation}} {
		got, errs := collectGather(t, gs.GatherStream(ctxFor(t), tc.agent, slices.Values(inputs(3)), tc.conc))
		if len(got) != 0 || len(errs) != 1 || !errors.Is(errs[0], tc.want) {
			t.Errorf("GatherStream(%s, %d): %d results, errors %v; want one %v", tc.agent, tc.conc, len(got), errs, tc.want)
		}
	}
}

// Stopping the iteration returns at once, however many tasks remain, and
// reads no further than a bounded window.
func testGatherStreamStop(t *testing.T, b svc.Backend) {
	read := 0
	endless := func(yield func(svc.TaskSpec) bool) {
		for i := 0; ; i++ {
			read++
			if !yield(svc.TaskSpec{Input: json.RawMessage(fmt.Sprint(i))}) {
				return
			}
		}
	}
	taken := 0
	for _, err := range streamer(t, b).GatherStream(ctxFor(t), "echo", endless, 4) {
		if err != nil {
			t.Fatalf("GatherStream: %v", err)
		}
		if taken++; taken == 20 {
			break
		}
	}
	// Returned: the source was stopped too (it runs on another goroutine,
	// which has ended).
	if read < 20 {
		t.Errorf("read %d tasks for 20 results", read)
	}
}

// Ending the context ends the stream with an error, well before the
// tasks in flight would have finished.
func testGatherStreamCancelled(t *testing.T, b svc.Backend) {
	ctx, cancel := context.WithCancel(ctxFor(t))
	defer cancel()
	timer := time.AfterFunc(200*time.Millisecond, cancel)
	defer timer.Stop()
	start := time.Now()
	got, errs := collectGather(t, streamer(t, b).GatherStream(ctx, "slow", slices.Values(inputs(3)), 3))
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Errorf("GatherStream(slow) took %v after cancellation at 200ms", elapsed)
	}
	for i, r := range got {
		if r.Success {
			t.Errorf("task %d succeeded", i)
		}
	}
	if len(errs) == 0 {
		t.Errorf("no error after the cancel (%d results)", len(got))
	}
}

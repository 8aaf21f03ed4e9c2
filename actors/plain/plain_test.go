package plain_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/actors/plain"
	"github.com/svc-dev/svc/emitters/emittertest"
	"github.com/svc-dev/svc/model"
	"github.com/svc-dev/svc/model/testmodel"
	"github.com/svc-dev/svc/supervisor"
	"github.com/svc-dev/svc/tools"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// runner is what both paths offer: supervisor.Runtime and plain.Runtime.
type runner interface {
	Run(ctx context.Context, name string, task svc.TaskSpec) (svc.AgentResult, error)
	Gather(ctx context.Context, name string, tasks []svc.TaskSpec, maxConcurrency int) ([]svc.AgentResult, error)
}

// scenario is one case of the differential test. agents builds its agents
// against the runner they run on (a tool may call it again); drive makes
// the calls and returns what the caller saw, one string per call.
type scenario struct {
	name   string
	opts   func(*svc.Options)
	agents func(r *runner) []svc.Agent
	drive  func(t *testing.T, r runner) []outcome
	// want is in the answers of both paths: what shows the scenario did
	// what it is named for.
	want []string
}

// outcome is one call's answer: its results (ids kept: the scenarios name
// their tasks) with the timings zeroed, and its error.
type outcome struct {
	Results []json.RawMessage
	ErrKind svc.Kind
	Err     string
}

func outcomeOf(t *testing.T, res []svc.AgentResult, err error) outcome {
	t.Helper()
	var o outcome
	for _, r := range res {
		r.Metadata.DurationMS = 0
		b, jerr := json.Marshal(r)
		if jerr != nil {
			t.Fatal(jerr)
		}
		o.Results = append(o.Results, b)
	}
	if err != nil {
		o.ErrKind, o.Err = svc.KindOf(err), err.Error()
	}
	return o
}

func echoAgent(name string, settings map[string]any) svc.Agent {
	return svc.Agent{Name: name, Model: "test:echo", ModelSettings: settings}
}

func one(name string, task svc.TaskSpec) func(*testing.T, runner) []outcome {
	return func(t *testing.T, r runner) []outcome {
		res, err := r.Run(context.Background(), name, task)
		return []outcome{outcomeOf(t, []svc.AgentResult{res}, err)}
	}
}

func input(s string) json.RawMessage { return json.RawMessage(s) }

var scenarios = []scenario{
	{
		name:   "success",
		want:   []string{`"success":true`, `"output":{"text":"hello"}`},
		agents: func(*runner) []svc.Agent { return []svc.Agent{echoAgent("echo", nil)} },
		drive:  one("echo", svc.TaskSpec{ID: "t1", RequestID: "r1", Input: input(`{"text":"hello"}`)}),
	},
	{
		name:   "model failure",
		want:   []string{`"type":"ModelError"`},
		agents: func(*runner) []svc.Agent { return []svc.Agent{{Name: "bad", Model: "test:fail"}} },
		drive:  one("bad", svc.TaskSpec{ID: "t1", RequestID: "r1", Input: input(`1`)}),
	},
	{
		name: "retry then success",
		want: []string{`"success":true`, `"attempts":3`},
		opts: func(o *svc.Options) { o.RetryMaxAttempts = 3; o.RetryBackoffFactor = 1 },
		agents: func(*runner) []svc.Agent {
			return []svc.Agent{echoAgent("flaky", map[string]any{"fail_times": 2})}
		},
		drive: one("flaky", svc.TaskSpec{ID: "t1", RequestID: "r1", Input: input(`"x"`)}),
	},
	{
		name: "retries run out",
		want: []string{`"attempts":2`, `call 2 of the first 5 fails`},
		opts: func(o *svc.Options) { o.RetryMaxAttempts = 2; o.RetryBackoffFactor = 1 },
		agents: func(*runner) []svc.Agent {
			return []svc.Agent{echoAgent("flaky", map[string]any{"fail_times": 5})}
		},
		drive: one("flaky", svc.TaskSpec{ID: "t1", RequestID: "r1", Input: input(`"x"`)}),
	},
	{
		name: "timeout",
		want: []string{`"ErrKind":"TimeoutError"`},
		opts: func(o *svc.Options) { o.TimeoutSeconds = 0.2 },
		agents: func(*runner) []svc.Agent {
			return []svc.Agent{echoAgent("slow", map[string]any{"latency_ms": 30000})}
		},
		drive: one("slow", svc.TaskSpec{ID: "t1", RequestID: "r1", Input: input(`1`)}),
	},
	{
		name: "cancel mid-run",
		want: []string{`"ErrKind":"CancelledError"`},
		agents: func(*runner) []svc.Agent {
			return []svc.Agent{echoAgent("slow", map[string]any{"latency_ms": 30000})}
		},
		drive: func(t *testing.T, r runner) []outcome {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			before := testmodel.Waiting()
			go func() {
				// Cancel once the run is parked in its model call.
				for testmodel.Waiting() == before && ctx.Err() == nil {
					time.Sleep(time.Millisecond)
				}
				cancel()
			}()
			res, err := r.Run(ctx, "slow", svc.TaskSpec{ID: "t1", RequestID: "r1", Input: input(`1`)})
			return []outcome{outcomeOf(t, []svc.AgentResult{res}, err)}
		},
	},
	{
		name:   "budget exceeded",
		want:   []string{`"ErrKind":"BudgetExceededError"`, `used 50 of 5`},
		agents: func(*runner) []svc.Agent { return []svc.Agent{echoAgent("echo", map[string]any{"tokens": 50})} },
		drive: one("echo", svc.TaskSpec{ID: "t1", RequestID: "r1", TokenBudget: 5,
			Input: input(`{"text":"a long enough input to take more than five tokens"}`)}),
	},
	{
		name: "depth limit",
		want: []string{`"tools":{"nest":{"child":true}}`},
		opts: func(o *svc.Options) { o.MaxSpawnDepth = 2 },
		agents: func(r *runner) []svc.Agent {
			type in struct{}
			level := 0
			nest, err := tools.Func("nest", "run myself again", svc.AccessRead, func(ctx context.Context, _ in) (map[string]any, error) {
				level++
				res, err := (*r).Run(ctx, "nester", svc.TaskSpec{ID: fmt.Sprintf("t%d", level+1), Input: input(`{}`)})
				if err != nil {
					return nil, err
				}
				return map[string]any{"child": res.Success}, nil
			})
			if err != nil {
				panic(err)
			}
			return []svc.Agent{{Name: "nester", Model: "test:echo", Tools: []svc.Tool{nest}, TrustLevel: svc.TrustLow,
				ModelSettings: map[string]any{"call_tools": "all"}}}
		},
		drive: one("nester", svc.TaskSpec{ID: "t1", RequestID: "r1", Input: input(`{}`)}),
	},
	{
		name: "gather with failures",
		want: []string{`"task_id":"t3","success":false`, `"task_id":"t4","success":true`},
		agents: func(*runner) []svc.Agent {
			return []svc.Agent{echoAgent("picky", map[string]any{"fail_on": "bad"})}
		},
		drive: func(t *testing.T, r runner) []outcome {
			var tasks []svc.TaskSpec
			for i, in := range []string{`"good 1"`, `"bad 2"`, `"good 3"`, `"bad 4"`, `"good 5"`} {
				tasks = append(tasks, svc.TaskSpec{ID: fmt.Sprintf("t%d", i), Input: input(in)})
			}
			res, err := r.Gather(svc.WithRequestID(context.Background(), "batch-1"), "picky", tasks, 2)
			return []outcome{outcomeOf(t, res, err)}
		},
	},
	{
		name: "tool calls",
		want: []string{`"double":{"n":42}`, `"fails":"tool fails: no luck"`},
		agents: func(*runner) []svc.Agent {
			type in struct {
				N int `json:"n"`
			}
			double, err := tools.Func("double", "doubles n", svc.AccessRead, func(_ context.Context, v in) (map[string]any, error) {
				return map[string]any{"n": 2 * v.N}, nil
			})
			if err != nil {
				panic(err)
			}
			fails, err := tools.Func("fails", "always fails", svc.AccessRead, func(context.Context, in) (string, error) {
				return "", fmt.Errorf("no luck")
			})
			if err != nil {
				panic(err)
			}
			return []svc.Agent{{Name: "tooler", Model: "test:echo", Tools: []svc.Tool{double, fails}, TrustLevel: svc.TrustLow,
				ModelSettings: map[string]any{"call_tools": "all", "tool_arguments": map[string]any{"double": map[string]any{"n": 21}}}}}
		},
		drive: one("tooler", svc.TaskSpec{ID: "t1", RequestID: "r1", Input: input(`{"q":1}`)}),
	},
}

// TestDifferential runs every scenario through the runtime (actors, the
// lean tricks) and through the plain reference path, and requires the
// same answers and, per run, the same events in the same order.
func TestDifferential(t *testing.T) {
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			o := svc.DefaultOptions()
			if sc.opts != nil {
				sc.opts(&o)
			}
			realOut, realEvents := runActors(t, sc, o)
			plainOut, plainEvents := runPlain(t, sc, o)
			if !reflect.DeepEqual(realOut, plainOut) {
				t.Errorf("answers differ\nruntime: %s\nplain:   %s", show(realOut), show(plainOut))
			}
			if !reflect.DeepEqual(realEvents, plainEvents) {
				t.Errorf("events differ\nruntime:\n%s\nplain:\n%s", strings.Join(realEvents, "\n"), strings.Join(plainEvents, "\n"))
			}
			if len(realEvents) == 0 {
				t.Error("no events")
			}
			for _, w := range sc.want {
				if !strings.Contains(show(realOut), w) || !strings.Contains(show(plainOut), w) {
					t.Errorf("the answers do not say %s", w)
				}
			}
			t.Logf("%d events, answers %s", len(realEvents), show(realOut))
		})
	}
}

func runActors(t *testing.T, sc scenario, o svc.Options) ([]outcome, []string) {
	rec := &emittertest.Recorder{}
	rt, err := supervisor.New(supervisor.Config{Options: o, Emitter: rec, Models: model.Default()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := rt.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	}()
	var r runner = rt
	if err := rt.Register(sc.agents(&r)...); err != nil {
		t.Fatal(err)
	}
	out := sc.drive(t, r)
	return out, perRun(rec.Events())
}

func runPlain(t *testing.T, sc scenario, o svc.Options) ([]outcome, []string) {
	rec := &emittertest.Recorder{}
	var r runner
	rt, err := plain.New(o, model.Default(), rec, sc.agents(&r)...)
	if err != nil {
		t.Fatal(err)
	}
	r = rt
	out := sc.drive(t, r)
	return out, perRun(rec.Events())
}

// perRun is the events as the test compares them: grouped by run (a
// task's id, or the batch's trace for a gather's own events) in the
// order each run emitted them, without timestamps and durations, span and
// trace ids replaced by names given in order of first appearance (so that
// who is whose parent is compared, not the random ids).
func perRun(evs []svc.RuntimeEvent) []string {
	byRun := map[string][]svc.RuntimeEvent{}
	var keys []string
	for _, ev := range evs {
		k := "task " + ev.TaskID
		if ev.TaskID == "" {
			k = "trace " + ev.TraceID
		}
		if _, ok := byRun[k]; !ok {
			keys = append(keys, k)
		}
		byRun[k] = append(byRun[k], ev)
	}
	sort.Strings(keys)
	spans, traces := map[string]string{"": "-"}, map[string]string{"": "-"}
	namer := func(names map[string]string, prefix string) func(string) string {
		return func(id string) string {
			if n, ok := names[id]; ok {
				return n
			}
			n := fmt.Sprintf("%s%d", prefix, len(names))
			names[id] = n
			return n
		}
	}
	// Nested runs get new trace ids: named too.
	name, trace := namer(spans, "span"), namer(traces, "trace")
	var out []string
	for _, k := range keys {
		for _, ev := range byRun[k] {
			p := map[string]any{}
			for key, v := range ev.Payload {
				if key != "duration_ms" {
					p[key] = v
				}
			}
			pk := make([]string, 0, len(p))
			for key := range p {
				pk = append(pk, key)
			}
			slices.Sort(pk)
			var ps []string
			for _, key := range pk {
				ps = append(ps, fmt.Sprintf("%s=%#v", key, p[key]))
			}
			out = append(out, fmt.Sprintf("%s: %s agent=%s task=%s trace=%s parent_trace=%s span=%s parent_span=%s {%s}",
				k, ev.EventType, ev.AgentName, ev.TaskID, trace(ev.TraceID), trace(ev.ParentTraceID),
				name(ev.SpanID), name(ev.ParentSpanID), strings.Join(ps, " ")))
		}
	}
	return out
}

func show(os []outcome) string {
	b, _ := json.Marshal(os)
	return string(b)
}

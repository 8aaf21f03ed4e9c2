package supervisor_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/emitters"
	"github.com/svc-dev/svc/emitters/emittertest"
	"github.com/svc-dev/svc/eventstore"
	"github.com/svc-dev/svc/eventstore/memevents"
	"github.com/svc-dev/svc/model"
	"github.com/svc-dev/svc/tools"
)

// metricPoints reads every data point of the OTel emitter's instruments:
// instrument name → the attributes of each point → its count (a counter's
// value, a histogram's count).
func metricPoints(t *testing.T, r *sdkmetric.ManualReader) map[string]map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]int64{}
	add := func(name string, attrs attribute.Set, n int64) {
		if out[name] == nil {
			out[name] = map[string]int64{}
		}
		out[name][attrs.Encoded(attribute.DefaultEncoder())] += n
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					add(m.Name, dp.Attributes, dp.Value)
				}
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					add(m.Name, dp.Attributes, int64(dp.Count))
				}
			case metricdata.Histogram[int64]:
				for _, dp := range d.DataPoints {
					add(m.Name, dp.Attributes, int64(dp.Count))
				}
			}
		}
	}
	return out
}

// attrs encodes labels the way metricPoints keys them.
func attrs(kv ...string) string {
	var a []attribute.KeyValue
	for i := 0; i < len(kv); i += 2 {
		a = append(a, attribute.String(kv[i], kv[i+1]))
	}
	s := attribute.NewSet(a...)
	return s.Encoded(attribute.DefaultEncoder())
}

// failedRun is the operation-duration label set of a failed invocation.
func failedRun(agent string, kind svc.Kind, modelID ...string) string {
	kv := []string{emitters.AttrOperationName, "invoke_agent", emitters.AttrAgentName, agent, emitters.AttrErrorType, string(kind)}
	if len(modelID) == 2 {
		kv = append(kv, emitters.AttrProviderName, modelID[0], emitters.AttrRequestModel, modelID[1])
	}
	return attrs(kv...)
}

func rejected(agent string, kind svc.Kind) string {
	return attrs(emitters.AttrAgent, agent, emitters.AttrErrorType, string(kind))
}

func toolFailed(agent, tool string, kind svc.Kind) string {
	return attrs(emitters.AttrAgent, agent, emitters.AttrTool, tool, emitters.AttrErrorType, string(kind))
}

// Real failures of every kind, driven through a runtime with the real
// OTel emitter: each failure's error.type is its kind (never
// AgentRuntimeError for a failure that has a kind), failed runs name
// their provider and model, the call's error keeps its kind, and
// /runtime/stats counts the same rejections by the same kind names.
func TestErrorKindsReachTheMetrics(t *testing.T) {
	type setup struct {
		opts   svc.Options
		agents []svc.Agent
		reg    *script
	}
	slow := echo("slow", map[string]any{"latency_ms": 5000})
	type in struct{}
	failing, _ := tools.Func("lookup", "fails", svc.AccessRead, func(context.Context, in) (string, error) {
		return "", errors.New("upstream said no")
	})
	writer, _ := tools.Func("scribble", "writes", svc.AccessWrite, func(context.Context, in) (string, error) { return "ok", nil })

	cases := []struct {
		name  string
		kind  svc.Kind
		setup setup
		// run makes the failure happen; callErr is the kind the call
		// itself fails with, "" when the failure is a result.
		run     func(ctx context.Context, rt interface{ svc.Backend }) error
		callErr svc.Kind
		// metrics are the points the failure must record (name → labels → count).
		metrics map[string]map[string]int64
		// rejections is what /runtime/stats must report.
		rejections map[string]int64
	}{
		{
			name: "model", kind: svc.KindModel,
			setup: setup{agents: []svc.Agent{{Name: "bad", Model: "test:fail"}}},
			run:   runAgent("bad", `1`),
			metrics: map[string]map[string]int64{
				emitters.MetricOperationDuration: {failedRun("bad", svc.KindModel, "test", "fail"): 1},
				emitters.MetricRejections:        {rejected("bad", svc.KindModel): 1},
			},
			rejections: map[string]int64{"ModelError": 1},
		},
		{
			name: "output validation", kind: svc.KindOutputValidation,
			setup: setup{agents: []svc.Agent{{Name: "shaped", Model: "test:echo",
				OutputType: json.RawMessage(`{"type":"object","required":["answer"]}`)}}},
			run: runAgent("shaped", `1`),
			metrics: map[string]map[string]int64{
				emitters.MetricOperationDuration: {failedRun("shaped", svc.KindOutputValidation, "test", "echo"): 1},
				emitters.MetricRejections:        {rejected("shaped", svc.KindOutputValidation): 1},
			},
			rejections: map[string]int64{"OutputValidationError": 1},
		},
		{
			name: "timeout", kind: svc.KindTimeout,
			setup:   setup{opts: opts(func(o *svc.Options) { o.TimeoutSeconds = 0.1 }), agents: []svc.Agent{slow}},
			run:     runAgent("slow", `1`),
			callErr: svc.KindTimeout,
			metrics: map[string]map[string]int64{
				emitters.MetricOperationDuration: {failedRun("slow", svc.KindTimeout, "test", "echo"): 1},
				emitters.MetricRejections:        {rejected("slow", svc.KindTimeout): 1},
			},
			rejections: map[string]int64{"TimeoutError": 1},
		},
		{
			name: "cancelled", kind: svc.KindCancelled,
			setup: setup{agents: []svc.Agent{slow}},
			run: func(ctx context.Context, b interface{ svc.Backend }) error {
				ctx, cancel := context.WithCancel(ctx)
				defer time.AfterFunc(50*time.Millisecond, cancel).Stop()
				_, err := b.Run(ctx, "slow", svc.TaskSpec{Input: json.RawMessage(`1`)})
				return err
			},
			callErr: svc.KindCancelled,
			metrics: map[string]map[string]int64{
				emitters.MetricOperationDuration: {failedRun("slow", svc.KindCancelled, "test", "echo"): 1},
				emitters.MetricRejections:        {rejected("slow", svc.KindCancelled): 1},
			},
			rejections: map[string]int64{"CancelledError": 1},
		},
		{
			name: "budget", kind: svc.KindBudgetExceeded,
			// A run's cap: the run past it fails (the runtime's budget
			// lets the run that crosses it keep its result).
			setup: setup{opts: opts(func(o *svc.Options) { o.MaxTokensPerRun = 5 }),
				agents: []svc.Agent{echo("hungry", map[string]any{"tokens": 10})}},
			run:     runAgent("hungry", `1`),
			callErr: svc.KindBudgetExceeded,
			metrics: map[string]map[string]int64{
				emitters.MetricOperationDuration: {failedRun("hungry", svc.KindBudgetExceeded, "test", "echo"): 1},
				// budget_exceeded, then the invocation it stopped.
				emitters.MetricRejections: {rejected("hungry", svc.KindBudgetExceeded): 2},
			},
			rejections: map[string]int64{"BudgetExceededError": 2},
		},
		{
			name: "depth", kind: svc.KindDepthLimit,
			setup: setup{opts: opts(func(o *svc.Options) { o.MaxSpawnDepth = 1 }), agents: []svc.Agent{echo("deep", nil)}},
			run: func(ctx context.Context, b interface{ svc.Backend }) error {
				_, err := b.Run(svc.WithDepth(ctx, 1), "deep", svc.TaskSpec{Input: json.RawMessage(`1`)})
				return err
			},
			callErr: svc.KindDepthLimit,
			metrics: map[string]map[string]int64{
				emitters.MetricRejections: {rejected("deep", svc.KindDepthLimit): 1},
			},
			rejections: map[string]int64{"DepthLimitError": 1},
		},
		{
			name: "trust", kind: svc.KindTrustViolation,
			setup: setup{agents: []svc.Agent{{Name: "careful", Model: "test:echo", TrustLevel: svc.TrustLow,
				Tools: []svc.Tool{writer}, ModelSettings: map[string]any{"call_tools": "all"}}}},
			run: runAgent("careful", `1`),
			metrics: map[string]map[string]int64{
				emitters.MetricToolCalls: {toolFailed("careful", "scribble", svc.KindTrustViolation): 1},
			},
			rejections: map[string]int64{},
		},
		{
			name: "tool", kind: svc.KindToolExecution,
			setup: setup{agents: []svc.Agent{{Name: "caller", Model: "test:echo",
				Tools: []svc.Tool{failing}, ModelSettings: map[string]any{"call_tools": "all"}}}},
			run: runAgent("caller", `1`),
			metrics: map[string]map[string]int64{
				emitters.MetricToolCalls: {toolFailed("caller", "lookup", svc.KindToolExecution): 1},
			},
			rejections: map[string]int64{},
		},
		{
			name: "spawn cycle", kind: svc.KindSpawnCycle,
			setup: setup{
				agents: []svc.Agent{boss(nil)},
				reg:    &script{fn: spawner(map[string]string{"boss": `{"agents":[{"name":"boss","instructions":"boss again"}]}`})},
			},
			run: runAgent("boss", `1`),
			metrics: map[string]map[string]int64{
				emitters.MetricRejections: {rejected("boss", svc.KindSpawnCycle): 1},
			},
			rejections: map[string]int64{"SpawnCycleError": 1},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			reader := sdkmetric.NewManualReader()
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
			t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
			otelEm, err := emitters.NewOTel(mp)
			if err != nil {
				t.Fatal(err)
			}
			rec := &emittertest.Recorder{}
			var reg = tc.setup.reg
			rt := newRuntime(t, tc.setup.opts, emitters.Multi(otelEm, rec), regOf(reg), tc.setup.agents...)

			err = tc.run(context.Background(), rt)
			if tc.callErr != "" {
				var e *svc.Error
				if !errors.As(err, &e) || e.Kind != tc.callErr {
					t.Fatalf("call error %v (%T), want a %s", err, err, tc.callErr)
				}
			} else if err != nil {
				t.Fatalf("call error %v, want a failed result", err)
			}

			got := metricPoints(t, reader)
			for name, want := range tc.metrics {
				for labels, n := range want {
					if got[name][labels] != n {
						t.Errorf("%s{%s} = %d, want %d; have %v", name, labels, got[name][labels], n, got[name])
					}
				}
			}
			// No failure of a known kind is labelled with the base kind.
			for name, pts := range got {
				for labels := range pts {
					if labels != "" && containsLabel(labels, emitters.AttrErrorType+"="+string(svc.KindRuntime)) {
						t.Errorf("%s{%s}: a failure labelled AgentRuntimeError", name, labels)
					}
				}
			}
			for _, ev := range rec.Events() {
				emittertest.CheckPayload(t, ev)
				if ev.EventType == svc.EventAgentFailed && ev.Payload["reason"] != string(tc.kind) {
					t.Errorf("agent_failed reason %v, want %s", ev.Payload["reason"], tc.kind)
				}
			}

			// The event store's /runtime/stats counts the same rejections,
			// by kind only.
			store := memevents.New(eventstore.Retention{})
			t.Cleanup(func() { _ = store.Close() })
			if err := store.Write(context.Background(), rec.Events()); err != nil {
				t.Fatal(err)
			}
			stats, err := store.RuntimeStats(context.Background(), time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(stats.Rejections, tc.rejections) {
				t.Errorf("stats rejections = %v, want %v", stats.Rejections, tc.rejections)
			}
		})
	}
}

func runAgent(name, input string) func(context.Context, interface{ svc.Backend }) error {
	return func(ctx context.Context, b interface{ svc.Backend }) error {
		res, err := b.Run(ctx, name, svc.TaskSpec{Input: json.RawMessage(input)})
		if err == nil && res.Error != nil && res.Err == nil {
			return fmt.Errorf("result has a wire error but no typed one: %+v", res)
		}
		if err == nil && res.Err != nil && string(svc.KindOf(res.Err)) != res.Error.Type {
			return fmt.Errorf("typed error %v and wire error %+v disagree", res.Err, res.Error)
		}
		return err
	}
}

func regOf(s *script) *model.Registry {
	if s == nil {
		return nil
	}
	return s.registry()
}

func containsLabel(encoded, kv string) bool {
	return slices.Contains(strings.Split(encoded, ","), kv)
}

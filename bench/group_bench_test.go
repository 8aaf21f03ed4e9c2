package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/agent"
	"github.com/svc-dev/svc/group"
)

// BenchmarkGroupFanOut is issue 3's first benchmark: a fan-out of 1,000
// items whose model sleeps 50 ms, at max_concurrency 1000, against the ideal
// of 50 ms (every item in parallel, no overhead).
func BenchmarkGroupFanOut(b *testing.B) {
	const n = 1000
	items := make([]int, n)
	for i := range items {
		items[i] = i
	}
	list, _ := json.Marshal(map[string]any{"items": items})
	rt := newRuntime(b,
		svc.Agent{Name: "src", Model: "test:echo"},
		svc.Agent{Name: "worker", Model: "test:echo", ModelSettings: map[string]any{"latency_ms": 50}},
	)
	g, err := group.New("fan").Node("src", "src").Node("work", "worker").
		Edge("src", "work", group.FanOut("output.items", n)).Build()
	if err != nil {
		b.Fatal(err)
	}
	if err := rt.RegisterGroups(g); err != nil {
		b.Fatal(err)
	}
	task := svc.TaskSpec{Input: list}
	if _, err := rt.RunGroup(context.Background(), "fan", task); err != nil { // warm up
		b.Fatal(err)
	}
	b.ResetTimer()
	var total time.Duration
	for i := 0; i < b.N; i++ {
		start := time.Now()
		res, err := rt.RunGroup(context.Background(), "fan", task)
		total += time.Since(start)
		if err != nil || !res.Success() {
			b.Fatal(err)
		}
	}
	wall := total / time.Duration(b.N)
	b.ReportMetric(float64(wall.Microseconds())/1000, "wall_ms")
	b.ReportMetric(50, "ideal_ms")
	b.ReportMetric(float64(wall.Microseconds())/1000/50, "ratio")
}

// BenchmarkGroupPipeline is issue 3's second benchmark: a 10-node pipeline
// of test:echo, the runtime's cost per node against calling the same agent
// loops in sequence directly.
func BenchmarkGroupPipeline(b *testing.B) {
	const nodes = 10
	rt := newRuntime(b, svc.Agent{Name: "echo", Model: "test:echo"})
	gb := group.New("pipe")
	for i := 0; i < nodes; i++ {
		gb.Node(fmt.Sprint("n", i), "echo")
		if i > 0 {
			gb.Edge(fmt.Sprint("n", i-1), fmt.Sprint("n", i))
		}
	}
	g, err := gb.Build()
	if err != nil {
		b.Fatal(err)
	}
	if err := rt.RegisterGroups(g); err != nil {
		b.Fatal(err)
	}
	compiled, err := agent.Compile(svc.Agent{Name: "echo", Model: "test:echo"}, nil)
	if err != nil {
		b.Fatal(err)
	}
	in := json.RawMessage(`{"text":"hello world"}`)
	const rounds = 2000
	b.ResetTimer()
	var rtDur, directDur time.Duration
	for i := 0; i < b.N; i++ {
		start := time.Now()
		for j := 0; j < rounds; j++ {
			if _, err := rt.RunGroup(context.Background(), "pipe", svc.TaskSpec{Input: in}); err != nil {
				b.Fatal(err)
			}
		}
		rtDur += time.Since(start)
		start = time.Now()
		for j := 0; j < rounds; j++ {
			v := in
			for k := 0; k < nodes; k++ {
				o, err := agent.Run(context.Background(), &agent.Invocation{Agent: compiled, Input: v, TaskID: "t", TraceID: "t", Emitter: svc.NopEmitter{}})
				if err != nil {
					b.Fatal(err)
				}
				v = o.Output
			}
		}
		directDur += time.Since(start)
	}
	per := float64((rtDur - directDur).Microseconds()) / float64(b.N*rounds*nodes)
	b.ReportMetric(float64(rtDur.Microseconds())/float64(b.N*rounds), "runtime_us/run")
	b.ReportMetric(float64(directDur.Microseconds())/float64(b.N*rounds), "direct_us/run")
	b.ReportMetric(per, "overhead_us/node")
}

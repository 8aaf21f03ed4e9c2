package supervisor_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/supervisor"
)

// The run scope's cost, as allocations per call: a plain Run or Gather
// writes no scope, a capped run or one watched for progress writes one,
// and a spawned child one per child. Compare allocs/op before and after a
// change to how the scope travels (scope.go).

func benchRuntime(b *testing.B, agents ...svc.Agent) *supervisor.Runtime {
	b.Helper()
	rt, err := supervisor.New(supervisor.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = rt.Close() })
	if err := rt.Register(agents...); err != nil {
		b.Fatal(err)
	}
	return rt
}

func BenchmarkScopeRun(b *testing.B) {
	rt := benchRuntime(b, echo("echo", nil))
	ctx, task := context.Background(), svc.TaskSpec{ID: "t", Input: json.RawMessage(`1`)}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := rt.Run(ctx, "echo", task); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkScopeRunCapped(b *testing.B) {
	rt := benchRuntime(b, echo("echo", nil))
	ctx, task := context.Background(), svc.TaskSpec{ID: "t", Input: json.RawMessage(`1`), TokenBudget: 1 << 40}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := rt.Run(ctx, "echo", task); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkScopeRunProgress(b *testing.B) {
	rt := benchRuntime(b, echo("echo", nil))
	ctx := svc.WithProgress(context.Background(), func(svc.RunProgress) {})
	task := svc.TaskSpec{ID: "t", Input: json.RawMessage(`1`)}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := rt.Run(ctx, "echo", task); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkScopeGather(b *testing.B) {
	rt := benchRuntime(b, echo("echo", nil))
	tasks := make([]svc.TaskSpec, 100)
	for i := range tasks {
		tasks[i] = svc.TaskSpec{ID: "t", Input: json.RawMessage(`1`)}
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := rt.Gather(ctx, "echo", tasks, 100); err != nil {
			b.Fatal(err)
		}
	}
}

// A parent spawning two children: the spawn path and nesting are written
// once per child.
func BenchmarkScopeSpawn(b *testing.B) {
	s := &script{fn: spawner(map[string]string{"boss": `{"agents":[{"name":"a","instructions":"a"},{"name":"b","instructions":"b"}]}`})}
	rt, err := supervisor.New(supervisor.Config{Models: s.registry()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = rt.Close() })
	if err := rt.Register(boss(nil)); err != nil {
		b.Fatal(err)
	}
	ctx, task := context.Background(), svc.TaskSpec{ID: "t", Input: json.RawMessage(`1`)}
	b.ReportAllocs()
	for b.Loop() {
		s.mu.Lock()
		s.reqs = s.reqs[:0] // the script records every request
		s.mu.Unlock()
		if _, err := rt.Run(ctx, "boss", task); err != nil {
			b.Fatal(err)
		}
	}
}

package memstore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/stores/memstore"
	"github.com/svc-dev/svc/stores/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestContract(t *testing.T) {
	storetest.Run(t, func(*testing.T) svc.RunStore { return memstore.New() })
}

// BenchmarkAppend measures sequential appends to one run.
func BenchmarkAppend(b *testing.B) {
	s := memstore.New()
	defer s.Close()
	ctx := context.Background()
	if err := s.Create(ctx, svc.RunRecord{RunID: "r", Target: "t", Kind: "agent"}); err != nil {
		b.Fatal(err)
	}
	ev := svc.RunEvent{Type: svc.RunAgentStarted, Agent: "writer", TaskID: "t1"}
	for b.Loop() {
		if _, err := s.Append(ctx, "r", ev); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "appends/s")
}

// BenchmarkAppendParallel measures appends from many goroutines, each to
// its own run, as concurrent runs do.
func BenchmarkAppendParallel(b *testing.B) {
	s := memstore.New()
	defer s.Close()
	ctx := context.Background()
	var next atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		id := fmt.Sprint("r", next.Add(1))
		if err := s.Create(ctx, svc.RunRecord{RunID: id, Target: "t", Kind: "agent"}); err != nil {
			b.Error(err)
			return
		}
		ev := svc.RunEvent{Type: svc.RunAgentStarted, Agent: "writer", TaskID: "t1"}
		for pb.Next() {
			if _, err := s.Append(ctx, id, ev); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "appends/s")
}

package memstore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

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

// Past svc.MaxIdempotencyKeys live keys the oldest is forgotten: its
// retry makes a new run, while the next oldest still holds.
func TestIdempotencyKeysBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("fills the key table")
	}
	s := memstore.New()
	defer s.Close()
	ctx := t.Context()
	create := func(i int, id string) (string, bool) {
		got, created, err := s.CreateIdempotent(ctx, fmt.Sprint("k", i), "fp", svc.RunRecord{RunID: id, Target: "t", Kind: "agent"}, time.Hour+time.Duration(i))
		if err != nil {
			t.Fatal(err)
		}
		return got, created
	}
	for i := range svc.MaxIdempotencyKeys + 1 {
		create(i, fmt.Sprint("r", i))
	}
	if id, created := create(0, "again0"); !created || id != "again0" {
		t.Errorf("the oldest key after the bound: %q, %v; want a new run", id, created)
	}
	if id, created := create(2, "again2"); created || id != "r2" {
		t.Errorf("a younger key after the bound: %q, %v; want r2", id, created)
	}
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

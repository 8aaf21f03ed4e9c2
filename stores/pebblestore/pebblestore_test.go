package pebblestore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/stores/pebblestore"
	"github.com/svc-dev/svc/stores/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func open(t testing.TB, dir string) *pebblestore.Store {
	t.Helper()
	s, err := pebblestore.Open(dir)
	if err != nil {
		t.Fatalf("Open(%q): %v", dir, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestContract(t *testing.T) {
	t.Parallel() // its own server or files: the suites overlap their waits
	storetest.Run(t, func(t *testing.T) svc.RunStore { return open(t, t.TempDir()) })
}

func TestReopen(t *testing.T) {
	storetest.RunReopen(t, func(t *testing.T, dir string) svc.RunStore { return open(t, dir) })
}

func TestOpenBadDir(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, []byte("not a directory"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, dir, want string
	}{
		{"empty", "", "empty directory"},
		{"a file", file, file},
		{"under a file", filepath.Join(file, "db"), filepath.Join(file, "db")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := pebblestore.Open(tc.dir)
			if err == nil {
				_ = s.Close()
				t.Fatalf("Open(%q) succeeded", tc.dir)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Open(%q) = %q, want it to name %q", tc.dir, err, tc.want)
			}
			var e *svc.Error
			if !errors.As(err, &e) {
				t.Errorf("Open(%q) = %T, want a *svc.Error", tc.dir, err)
			}
		})
	}
}

// Pebble locks its directory: a second store on it is refused, so two
// processes never write one database and in-process notifications are
// enough for Stream.
func TestOpenLockedDir(t *testing.T) {
	dir := t.TempDir()
	open(t, dir)
	s, err := pebblestore.Open(dir)
	if err == nil {
		_ = s.Close()
		t.Fatal("a second Open of a directory in use succeeded")
	}
	if !strings.Contains(err.Error(), dir) {
		t.Errorf("second Open = %q, want it to name %q", err, dir)
	}
}

func TestCloseIdempotent(t *testing.T) {
	s := open(t, t.TempDir())
	for i := range 3 {
		if err := s.Close(); err != nil {
			t.Fatalf("Close #%d: %v", i+1, err)
		}
	}
	if _, err := s.Get(context.Background(), "x"); !errors.Is(err, svc.ErrShuttingDown) {
		t.Errorf("Get after Close = %v, want a ShuttingDownError", err)
	}
}

// Keys are built from run ids; an id containing "/" must not see the events
// of another run whose key range it overlaps.
func TestIDsWithSlash(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	ids := []string{"a", "a/00000000000000000001", "a/b", "a0"}
	for _, id := range ids {
		if err := s.Create(ctx, svc.RunRecord{RunID: id, Target: "t", Kind: "agent"}); err != nil {
			t.Fatalf("Create %q: %v", id, err)
		}
	}
	for i, id := range ids {
		for j := range i + 1 {
			if _, err := s.Append(ctx, id, svc.RunEvent{Type: svc.RunAgentStarted, Agent: fmt.Sprint(id, "#", j)}); err != nil {
				t.Fatalf("Append %q: %v", id, err)
			}
		}
	}
	for i, id := range ids {
		evs, err := s.Events(ctx, id, 0)
		if err != nil {
			t.Fatalf("Events %q: %v", id, err)
		}
		if len(evs) != i+1 {
			t.Errorf("%q has %d events, want %d: %+v", id, len(evs), i+1, evs)
		}
		for j, ev := range evs {
			if ev.RunID != id || ev.Agent != fmt.Sprint(id, "#", j) {
				t.Errorf("%q event %d = %+v", id, j, ev)
			}
		}
	}
}

func BenchmarkAppend(b *testing.B) {
	ctx := context.Background()
	s := open(b, b.TempDir())
	if err := s.Create(ctx, svc.RunRecord{RunID: "bench", Target: "echo", Kind: "agent"}); err != nil {
		b.Fatal(err)
	}
	ev := svc.RunEvent{Type: svc.RunAgentStarted, Agent: "echo", TaskID: "t1"}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := s.Append(ctx, "bench", ev); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "appends/s")
}

// BenchmarkAppendParallel appends from many goroutines, each to its own
// run: concurrent writers share fsyncs.
func BenchmarkAppendParallel(b *testing.B) {
	ctx := context.Background()
	s := open(b, b.TempDir())
	var n atomic.Int64
	ev := svc.RunEvent{Type: svc.RunAgentStarted, Agent: "echo", TaskID: "t1"}
	b.ReportAllocs()
	b.SetParallelism(16)
	b.RunParallel(func(pb *testing.PB) {
		id := fmt.Sprint("bench", n.Add(1))
		if err := s.Create(ctx, svc.RunRecord{RunID: id, Target: "echo", Kind: "agent"}); err != nil {
			b.Error(err)
			return
		}
		for pb.Next() {
			if _, err := s.Append(ctx, id, ev); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "appends/s")
}

// TestContractOneSyncPerWrite runs the suite with group commit off
// (MaxBatch 1), the benchmarks' baseline.
func TestContractOneSyncPerWrite(t *testing.T) {
	t.Parallel() // its own server or files: the suites overlap their waits
	storetest.Run(t, func(t *testing.T) svc.RunStore {
		s, err := pebblestore.OpenWith(t.TempDir(), pebblestore.Options{MaxBatch: 1})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/stores/pebblestore"
	"github.com/svc-dev/svc/stores/sqlitestore"
	"github.com/svc-dev/svc/supervisor"
)

// groupStores opens the persistent stores with group commit on (the
// default) and off (MaxBatch 1: one transaction and one sync per write, the
// path before group commit), the baseline measured in the same run.
func groupStores(b *testing.B) []struct {
	name string
	open func() svc.RunStore
} {
	sqlite := func(max int) func() svc.RunStore {
		return func() svc.RunStore {
			s, err := sqlitestore.OpenWith(b.TempDir()+"/runs.db", sqlitestore.Options{MaxBatch: max})
			if err != nil {
				b.Fatal(err)
			}
			return s
		}
	}
	pebble := func(max int) func() svc.RunStore {
		return func() svc.RunStore {
			s, err := pebblestore.OpenWith(b.TempDir(), pebblestore.Options{MaxBatch: max})
			if err != nil {
				b.Fatal(err)
			}
			return s
		}
	}
	return []struct {
		name string
		open func() svc.RunStore
	}{
		{"sqlite/group", sqlite(0)}, {"sqlite/one", sqlite(1)},
		{"pebble/group", pebble(0)}, {"pebble/one", pebble(1)},
	}
}

// BenchmarkGroupCommitSubmit is issue 15.2 in process: 10,000 test:echo
// runs submitted by 64 concurrent callers (each Submit answered once its
// run is stored) and carried to completion, per store, with group commit
// and without (same run). It reports runs/s and the store's commits per
// run.
func BenchmarkGroupCommitSubmit(b *testing.B) {
	const (
		n       = 10_000
		callers = 64
	)
	for _, st := range groupStores(b) {
		b.Run(st.name, func(b *testing.B) {
			var total time.Duration
			for i := 0; i < b.N; i++ {
				store := st.open()
				rt, err := supervisor.New(supervisor.Config{Store: store})
				if err != nil {
					b.Fatal(err)
				}
				if err := rt.Register(svc.Agent{Name: "echo", Model: "test:echo"}); err != nil {
					b.Fatal(err)
				}
				ids := make([]string, n)
				start := time.Now()
				var wg sync.WaitGroup
				for c := range callers {
					wg.Go(func() {
						for j := c; j < n; j += callers {
							id, err := rt.Submit(context.Background(), svc.SubmitRequest{Target: "echo",
								Task: svc.TaskSpec{Input: json.RawMessage(fmt.Sprint(j))}})
							if err != nil {
								b.Error(err)
								return
							}
							ids[j] = id
						}
					})
				}
				wg.Wait()
				if b.Failed() {
					b.FailNow()
				}
				waitTerminal(b, rt, ids)
				total += time.Since(start)
				_ = rt.Close()
				_ = store.Close()
			}
			b.ReportMetric(float64(n*b.N)/total.Seconds(), "runs/s")
		})
	}
}

// waitTerminal polls each run's status until it is terminal.
func waitTerminal(b *testing.B, rt svc.RunBackend, ids []string) {
	for _, id := range ids {
		for {
			s, err := rt.RunStatus(context.Background(), id)
			if err != nil {
				b.Fatal(err)
			}
			if s.State.Terminal() {
				if s.State != svc.RunCompleted {
					b.Fatalf("run %s ended %s", id, s.State)
				}
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
}

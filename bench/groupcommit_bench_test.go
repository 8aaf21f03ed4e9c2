package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/http/server"
	"github.com/svc-dev/svc/stores/pebblestore"
	"github.com/svc-dev/svc/stores/redisstore"
	"github.com/svc-dev/svc/stores/sqlitestore"
	"github.com/svc-dev/svc/supervisor"
)

// groupStores opens the persistent stores with group commit on (the
// default) and off (MaxBatch 1: one transaction and one sync per write, or
// for Redis one round trip per write: the path before group commit), the
// baseline measured in the same run. The Redis store uses a real
// redis-server on loopback, started once per benchmark.
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
	var redisAddr string // one redis-server for both, started on first use
	rds := func(max int) func() svc.RunStore {
		return func() svc.RunStore {
			if redisAddr == "" {
				redisAddr = startRedis(b)
			}
			s, err := redisstore.Open(redisstore.Options{URL: "redis://" + redisAddr, MaxBatch: max,
				KeyPrefix: fmt.Sprintf("svc%d", time.Now().UnixNano())})
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
		{"redis/group", rds(0)}, {"redis/one", rds(1)},
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
			var (
				total, cpu    time.Duration
				writes, syncs int64
			)
			for i := 0; i < b.N; i++ {
				store := st.open()
				cs := &counting{RunStore: store}
				rt, err := supervisor.New(supervisor.Config{Store: cs})
				if err != nil {
					b.Fatal(err)
				}
				if err := rt.Register(svc.Agent{Name: "echo", Model: "test:echo"}); err != nil {
					b.Fatal(err)
				}
				ids := make([]string, n)
				cpu0 := cpuTime()
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
				cpu += cpuTime() - cpu0
				_ = rt.Close()
				writes += cs.writes.Load()
				syncs += syncsOf(store)
				_ = store.Close()
			}
			b.ReportMetric(float64(n*b.N)/total.Seconds(), "runs/s")
			b.ReportMetric(float64(writes)/float64(n*b.N), "writes/run")
			if syncs > 0 { // SQLite commits, Pebble fsyncs; Redis has neither
				b.ReportMetric(float64(syncs)/float64(n*b.N), "syncs/run")
			}
			// CPU time per run (the process's user+system time): what
			// the figure would be on an idle machine, runs/s ≈ cores /
			// cpu_us_per_run, when the runs/s of a loaded VM is not.
			b.ReportMetric(float64(cpu.Microseconds())/float64(n*b.N), "cpu_us/run")
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

// BenchmarkGroupCommitHTTP is issue 15.2 over HTTP: 1,000 submits of a
// 50 ms agent (POST /submit, each answered 202 once its run is stored) from
// 16 concurrent keep-alive clients, then GET /runs/{id}/status until every
// run is terminal; runs/s from the first submit to the last terminal
// status, on the SQLite store with group commit and without (same run).
func BenchmarkGroupCommitHTTP(b *testing.B) {
	const (
		n       = 1000
		clients = 16
	)
	for _, st := range groupStores(b)[:2] {
		b.Run(st.name, func(b *testing.B) {
			var total time.Duration
			for i := 0; i < b.N; i++ {
				store := st.open()
				rt, err := supervisor.New(supervisor.Config{Store: store})
				if err != nil {
					b.Fatal(err)
				}
				if err := rt.Register(svc.Agent{Name: "nap", Model: "test:echo",
					ModelSettings: map[string]any{"latency_ms": 50}}); err != nil {
					b.Fatal(err)
				}
				h, err := server.NewStandalone(rt, server.StandaloneConfig{Logger: zap.NewNop()})
				if err != nil {
					b.Fatal(err)
				}
				srv := httptest.NewServer(h)
				c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
				ids := make([]string, n)
				start := time.Now()
				var wg sync.WaitGroup
				for k := range clients {
					wg.Go(func() {
						for j := k; j < n; j += clients {
							resp, err := c.Post(srv.URL+"/submit", "application/json",
								strings.NewReader(fmt.Sprintf(`{"target":"nap","task":{"input":%d}}`, j)))
							if err != nil {
								b.Error(err)
								return
							}
							var sub struct {
								RunID string `json:"run_id"`
							}
							err = json.NewDecoder(resp.Body).Decode(&sub)
							resp.Body.Close()
							if err != nil || resp.StatusCode != http.StatusAccepted {
								b.Errorf("submit: %d %v", resp.StatusCode, err)
								return
							}
							ids[j] = sub.RunID
						}
					})
				}
				wg.Wait()
				if b.Failed() {
					b.FailNow()
				}
				// The clients poll their own runs' status until terminal.
				for k := range clients {
					wg.Go(func() {
						for j := k; j < n; j += clients {
							for {
								resp, err := c.Get(srv.URL + "/runs/" + ids[j] + "/status")
								if err != nil {
									b.Error(err)
									return
								}
								var s svc.RunStatus
								err = json.NewDecoder(resp.Body).Decode(&s)
								resp.Body.Close()
								if err != nil {
									b.Error(err)
									return
								}
								if s.State.Terminal() {
									if s.State != svc.RunCompleted {
										b.Errorf("run %s ended %s", ids[j], s.State)
									}
									break
								}
								time.Sleep(5 * time.Millisecond)
							}
						}
					})
				}
				wg.Wait()
				total += time.Since(start)
				srv.Close()
				c.CloseIdleConnections()
				_ = rt.Close()
				_ = store.Close()
			}
			b.ReportMetric(float64(n*b.N)/total.Seconds(), "runs/s")
		})
	}
}

// counting counts a store's writes, by method.
type counting struct {
	svc.RunStore
	writes atomic.Int64
}

func (c *counting) Create(ctx context.Context, rec svc.RunRecord) error {
	c.writes.Add(1)
	return c.RunStore.Create(ctx, rec)
}

func (c *counting) SetState(ctx context.Context, id string, next svc.RunState, reason string, final *svc.RunEvent) error {
	c.writes.Add(1)
	return c.RunStore.SetState(ctx, id, next, reason, final)
}

func (c *counting) SetProgress(ctx context.Context, id string, p svc.RunProgress) error {
	c.writes.Add(1)
	return c.RunStore.SetProgress(ctx, id, p)
}

func (c *counting) SetResult(ctx context.Context, id string, r json.RawMessage) error {
	c.writes.Add(1)
	return c.RunStore.SetResult(ctx, id, r)
}

func (c *counting) Finish(ctx context.Context, id string, next svc.RunState, reason string, r json.RawMessage, final *svc.RunEvent) error {
	c.writes.Add(1)
	return c.RunStore.Finish(ctx, id, next, reason, r, final)
}

func (c *counting) Append(ctx context.Context, id string, ev svc.RunEvent) (int64, error) {
	c.writes.Add(1)
	return c.RunStore.Append(ctx, id, ev)
}

// syncsOf is how many commits (SQLite) or fsyncs (Pebble) a store made.
func syncsOf(s svc.RunStore) int64 {
	switch s := s.(type) {
	case *sqlitestore.Store:
		return s.Commits()
	case *pebblestore.Store:
		return s.Syncs()
	}
	return 0
}

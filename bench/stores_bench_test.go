package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os/exec"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/stores/memstore"
	"github.com/svc-dev/svc/stores/pebblestore"
	"github.com/svc-dev/svc/stores/redisstore"
	"github.com/svc-dev/svc/stores/sqlitestore"
	"github.com/svc-dev/svc/supervisor"
)

// stores opens each run store on fresh storage; redis-server is started on
// a free loopback port for the run and stopped after it.
func stores(b *testing.B) map[string]func() svc.RunStore {
	return map[string]func() svc.RunStore{
		"memory": func() svc.RunStore { return memstore.New() },
		"sqlite": func() svc.RunStore {
			s, err := sqlitestore.Open(b.TempDir() + "/runs.db")
			if err != nil {
				b.Fatal(err)
			}
			return s
		},
		"pebble": func() svc.RunStore {
			s, err := pebblestore.Open(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			return s
		},
		"redis": func() svc.RunStore {
			s, err := redisstore.Open(redisstore.Options{URL: "redis://" + startRedis(b)})
			if err != nil {
				b.Fatal(err)
			}
			return s
		},
	}
}

func startRedis(b *testing.B) string {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		b.Fatal("install redis-server: ", err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	ln.Close()
	cmd := exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	for i := 0; i < 200; i++ {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return addr
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.Fatal("redis-server did not start")
	return ""
}

func names(m map[string]func() svc.RunStore) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// BenchmarkSubmit is issue 4's throughput benchmark: 10,000 test:echo runs
// submitted and carried to completion, per store.
func BenchmarkSubmit(b *testing.B) {
	const n = 10_000
	all := stores(b)
	for _, name := range names(all) {
		b.Run(name, func(b *testing.B) {
			var total time.Duration
			for i := 0; i < b.N; i++ {
				st := all[name]()
				rt, err := supervisor.New(supervisor.Config{Store: st})
				if err != nil {
					b.Fatal(err)
				}
				if err := rt.Register(svc.Agent{Name: "echo", Model: "test:echo"}); err != nil {
					b.Fatal(err)
				}
				start := time.Now()
				ids := make([]string, n)
				for j := range ids {
					if ids[j], err = rt.Submit(context.Background(), svc.SubmitRequest{Target: "echo",
						Task: svc.TaskSpec{Input: json.RawMessage(fmt.Sprint(j))}}); err != nil {
						b.Fatal(err)
					}
				}
				for _, id := range ids {
					for {
						s, err := rt.RunStatus(context.Background(), id)
						if err != nil {
							b.Fatal(err)
						}
						if s.State.Terminal() {
							break
						}
						time.Sleep(time.Millisecond)
					}
				}
				total += time.Since(start)
				_ = rt.Close()
				_ = st.Close()
			}
			b.ReportMetric(float64(n*b.N)/total.Seconds(), "runs/s")
		})
	}
}

// BenchmarkStoreAppend: events appended per second to one run, per store.
func BenchmarkStoreAppend(b *testing.B) {
	const n = 2000
	all := stores(b)
	for _, name := range names(all) {
		b.Run(name, func(b *testing.B) {
			st := all[name]()
			defer st.Close()
			var total time.Duration
			for i := 0; i < b.N; i++ {
				id := fmt.Sprint("run-", i)
				if err := st.Create(context.Background(), svc.RunRecord{RunID: id, Target: "echo", Kind: "agent"}); err != nil {
					b.Fatal(err)
				}
				start := time.Now()
				for j := 0; j < n; j++ {
					if _, err := st.Append(context.Background(), id, svc.RunEvent{Type: svc.RunAgentStarted, Agent: "echo", TaskID: "t"}); err != nil {
						b.Fatal(err)
					}
				}
				total += time.Since(start)
			}
			b.ReportMetric(float64(n*b.N)/total.Seconds(), "appends/s")
		})
	}
}

// BenchmarkCancel: with 1,000 runs in flight (each parked in a 60 s model
// call), the time from CancelRun to the run's stream ending on
// run_cancelled, in-memory store.
func BenchmarkCancel(b *testing.B) {
	const n = 1000
	// The work's end: the cancelled invocation's agent_failed event, which
	// the runtime emits once the model call has returned.
	var mu sync.Mutex
	stopped := map[string]time.Time{}
	em := svc.EmitterFunc(func(ev svc.RuntimeEvent) {
		if ev.EventType == svc.EventAgentFailed {
			mu.Lock()
			stopped[ev.TaskID] = time.Now()
			mu.Unlock()
		}
	})
	rt, err := supervisor.New(supervisor.Config{Emitter: em})
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Close()
	if err := rt.Register(svc.Agent{Name: "slow", Model: "test:echo", ModelSettings: map[string]any{"latency_ms": 60000}}); err != nil {
		b.Fatal(err)
	}
	var lat, work []time.Duration
	for i := 0; i < b.N; i++ {
		ids := make([]string, n)
		for j := range ids {
			if ids[j], err = rt.Submit(context.Background(), svc.SubmitRequest{Target: "slow",
				Task: svc.TaskSpec{ID: fmt.Sprint(i, "-", j), Input: json.RawMessage(`1`)}}); err != nil {
				b.Fatal(err)
			}
		}
		for _, id := range ids {
			for {
				s, _ := rt.RunStatus(context.Background(), id)
				if s.State == svc.RunRunning {
					break
				}
				time.Sleep(time.Millisecond)
			}
		}
		for j, id := range ids {
			ch, err := rt.RunEvents(context.Background(), id, 0)
			if err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			task := fmt.Sprint(i, "-", j)
			if err := rt.CancelRun(context.Background(), id); err != nil {
				b.Fatal(err)
			}
			var last svc.RunEvent
			for ev := range ch {
				last = ev
			}
			lat = append(lat, time.Since(start))
			if last.Type != svc.RunRunCancelled {
				b.Fatalf("last event %+v", last)
			}
			for deadline := time.Now().Add(10 * time.Second); ; {
				mu.Lock()
				at, ok := stopped[task]
				mu.Unlock()
				if ok {
					work = append(work, at.Sub(start))
					break
				}
				if time.Now().After(deadline) {
					b.Fatalf("run %s: the work did not stop", id)
				}
				time.Sleep(50 * time.Microsecond)
			}
		}
	}
	sort.Slice(work, func(i, j int) bool { return work[i] < work[j] })
	b.ReportMetric(float64(work[len(work)/2].Microseconds())/1000, "work_stop_p50_ms")
	b.ReportMetric(float64(work[len(work)*99/100].Microseconds())/1000, "work_stop_p99_ms")
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50_ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99_ms")
}

package supervisor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/internal/servertest"
	"github.com/svc-dev/svc/llmsim"
	"github.com/svc-dev/svc/model/providers"
	"github.com/svc-dev/svc/ratelimit"
	"github.com/svc-dev/svc/ratelimit/natslimit"
	"github.com/svc-dev/svc/ratelimit/redislimit"
	"github.com/svc-dev/svc/supervisor"
)

// Four runtimes (as four workers would have) whose agents use one
// declared limit of 1,200 calls a minute, shared through a real
// redis-server and a real nats-server, call llmsim (which enforces that
// limit per key over one second, as hosted APIs do) with a gather each:
// together they stay within the limit, so that llmsim refuses fewer than
// 1 % of the calls, and they use it, at a combined rate within 5 % of the
// limit. Without the shared store each runtime would send its own 1,200
// a minute, four times the limit.
func TestSharedLimitAcrossRuntimes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		store func(t *testing.T) func(t *testing.T) ratelimit.Shared
	}{
		{"redis", func(t *testing.T) func(t *testing.T) ratelimit.Shared {
			opt, err := redis.ParseURL(servertest.Redis(t))
			if err != nil {
				t.Fatal(err)
			}
			return func(t *testing.T) ratelimit.Shared {
				rdb := redis.NewClient(opt)
				t.Cleanup(func() { _ = rdb.Close() })
				return redislimit.New(rdb, "")
			}
		}},
		{"nats", func(t *testing.T) func(t *testing.T) ratelimit.Shared {
			url := servertest.NATS(t)
			return func(t *testing.T) ratelimit.Shared {
				nc, err := nats.Connect(url)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(nc.Close)
				s, err := natslimit.New(t.Context(), nc, "")
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const (
				perMinute = 1200
				runtimes  = 4
				tasks     = 30 // each: 120 calls, about 6 s at the limit
			)
			open := tc.store(t)
			var takes atomic.Int64
			url, times := startTimedSim(t, llmsim.Config{RPM: perMinute, Window: time.Second})
			agent := svc.Agent{Name: "caller", Model: "openai:gpt-4o-mini", ModelSettings: map[string]any{
				"base_url": url + "/v1", "max_retries": 0, "rate_limit": "fleet"}}
			o := opts(func(o *svc.Options) { o.RateLimits = map[string]svc.RateLimit{"fleet": {RequestsPerMinute: perMinute}} })
			var rts []*supervisor.Runtime
			for range runtimes {
				rt, err := supervisor.New(supervisor.Config{Options: o, Models: providers.Default(),
					SharedLimits: ratelimit.SharedOptions{Store: countTakes{open(t), &takes}, Prefix: t.Name() + ":"}})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					if err := rt.Shutdown(ctx); err != nil {
						t.Errorf("shutdown: %v", err)
					}
				})
				if err := rt.Register(agent); err != nil {
					t.Fatal(err)
				}
				rts = append(rts, rt)
			}
			var wg sync.WaitGroup
			for i, rt := range rts {
				wg.Go(func() {
					specs := make([]svc.TaskSpec, tasks)
					for j := range specs {
						specs[j] = svc.TaskSpec{Input: json.RawMessage(fmt.Sprintf(`"%d-%d"`, i, j))}
					}
					if _, err := rt.Gather(t.Context(), "caller", specs, tasks); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			calls := times()
			if len(calls) != runtimes*tasks {
				t.Fatalf("llmsim saw %d calls, want %d (no retries)", len(calls), runtimes*tasks)
			}
			refused := 0
			var ok []time.Time
			for _, c := range calls {
				if c.status == http.StatusTooManyRequests {
					refused++
				} else {
					ok = append(ok, c.at)
				}
			}
			// The rate after the first second, when the half second's
			// worth every bucket starts with is spent.
			slices.SortFunc(ok, func(a, b time.Time) int { return a.Compare(b) })
			from := ok[0].Add(time.Second)
			n := 0
			for _, at := range ok {
				if at.After(from) {
					n++
				}
			}
			span := ok[len(ok)-1].Sub(from).Seconds()
			rate := float64(n-1) / span * 60
			t.Logf("%s: %d calls, %d refused (429); %.0f a minute over the %.2f s after the first (limit %d); %d takes from the store (%.2f a call)",
				tc.name, len(calls), refused, rate, span, perMinute, takes.Load(), float64(takes.Load())/float64(len(calls)))
			if float64(refused) >= 0.01*float64(len(calls)) {
				t.Errorf("%d of %d calls refused with a 429: want fewer than 1 %%", refused, len(calls))
			}
			if rate < perMinute*0.95 || rate > perMinute*1.05 {
				t.Errorf("combined rate %.0f a minute: want within 5 %% of %d", rate, perMinute)
			}
			for _, rt := range rts {
				if st := rt.RateLimits(); len(st) != 1 || st[0].Shared != tc.name || st[0].SharedFallback {
					t.Errorf("stats %+v: want the fleet limit shared through %s", st, tc.name)
				}
			}
		})
	}
}

// countTakes counts the round trips to a store.
type countTakes struct {
	ratelimit.Shared
	n *atomic.Int64
}

func (c countTakes) Take(ctx context.Context, key, node string, n, perMinute, burst float64) (ratelimit.Grant, error) {
	c.n.Add(1)
	return c.Shared.Take(ctx, key, node, n, perMinute, burst)
}

type simCall struct {
	at     time.Time
	status int
}

// startTimedSim serves llmsim behind a handler that notes when each call
// came and how it was answered; times returns the calls so far.
func startTimedSim(t *testing.T, cfg llmsim.Config) (url string, times func() []simCall) {
	t.Helper()
	sim := llmsim.New(cfg)
	var mu sync.Mutex
	var calls []simCall
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		at := time.Now()
		sim.ServeHTTP(rec, r)
		mu.Lock()
		calls = append(calls, simCall{at, rec.status})
		mu.Unlock()
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
		_ = sim.Close()
		if tr, ok := http.DefaultTransport.(*http.Transport); ok {
			tr.CloseIdleConnections()
		}
	})
	return "http://" + ln.Addr().String(), func() []simCall {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(calls)
	}
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

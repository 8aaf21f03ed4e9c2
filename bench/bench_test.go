// Package bench holds the benchmarks of BENCHMARKS.md. Each measures the
// runtime and, in the same run, a baseline doing the same work without it,
// and reports both (plus their ratio) as custom metrics. Run with
// `make bench`.
package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/agent"
	"github.com/svc-dev/svc/http/server"
	"github.com/svc-dev/svc/model"
	"github.com/svc-dev/svc/model/testmodel"
	"github.com/svc-dev/svc/supervisor"
)

func newRuntime(b *testing.B, agents ...svc.Agent) *supervisor.Runtime {
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

func tasks(n int) []svc.TaskSpec {
	ts := make([]svc.TaskSpec, n)
	for i := range ts {
		ts[i] = svc.TaskSpec{ID: fmt.Sprint(i), Input: json.RawMessage(fmt.Sprintf(`{"n":%d,"text":"hello world"}`, i))}
	}
	return ts
}

// modelCall is the baseline's unit of work: the same test:echo model call an
// invocation makes, with the same request.
func modelCall(ctx context.Context, m svc.Model, settings map[string]any, in json.RawMessage) (svc.ModelResponse, error) {
	return m.Generate(ctx, svc.ModelRequest{Model: "echo", Messages: []svc.Message{{Role: svc.RoleUser, Content: in}}, Settings: settings})
}

// BenchmarkGatherEcho is benchmark 11a: 100,000 test:echo tasks at
// max_concurrency 1000, in process, against a bare errgroup loop making the
// same model calls with the same bound.
func BenchmarkGatherEcho(b *testing.B) {
	const n, conc = 100_000, 1000
	ts := tasks(n)
	rt := newRuntime(b, svc.Agent{Name: "echo", Model: "test:echo"})
	m, _ := testmodel.New("echo")
	// Warm up: the first gather grows the goroutine pool and the heap.
	if _, err := rt.Gather(context.Background(), "echo", ts, conc); err != nil {
		b.Fatal(err)
	}
	compiled, err := agent.Compile(svc.Agent{Name: "echo", Model: "test:echo"}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	var rtDur, bareDur, loopDur time.Duration
	// CPU time (getrusage, the GC's included) moves far less than wall
	// time with what else runs on a shared machine.
	var rtCPU, bareCPU time.Duration
	var rtAllocs, bareAllocs uint64
	for i := 0; i < b.N; i++ {
		runtime.GC()
		m0 := mallocs()
		c0, start := cpuTime(), time.Now()
		res, err := rt.Gather(context.Background(), "echo", ts, conc)
		if err != nil || !res[n-1].Success {
			b.Fatal(err)
		}
		rtDur += time.Since(start)
		rtCPU += cpuTime() - c0
		rtAllocs += mallocs() - m0

		runtime.GC()
		m0 = mallocs()
		c0, start = cpuTime(), time.Now()
		var g errgroup.Group
		g.SetLimit(conc)
		out := make([]json.RawMessage, n)
		for j := range ts {
			g.Go(func() error {
				r, err := modelCall(context.Background(), m, nil, ts[j].Input)
				out[j] = r.Output
				return err
			})
		}
		if err := g.Wait(); err != nil {
			b.Fatal(err)
		}
		bareDur += time.Since(start)
		bareCPU += cpuTime() - c0
		bareAllocs += mallocs() - m0

		// A second reference: the whole agent loop (what an invocation
		// runs) in the same errgroup, so the actors' own cost shows apart.
		runtime.GC()
		start = time.Now()
		var g2 errgroup.Group
		g2.SetLimit(conc)
		for j := range ts {
			g2.Go(func() error {
				o, err := agent.Run(context.Background(), &agent.Invocation{Agent: compiled, Input: ts[j].Input,
					TaskID: ts[j].ID, TraceID: "t", Emitter: svc.NopEmitter{}})
				out[j] = o.Output
				return err
			})
		}
		if err := g2.Wait(); err != nil {
			b.Fatal(err)
		}
		loopDur += time.Since(start)
	}
	rtRate := float64(n*b.N) / rtDur.Seconds()
	bareRate := float64(n*b.N) / bareDur.Seconds()
	b.ReportMetric(rtRate, "runtime_inv/s")
	b.ReportMetric(bareRate, "bare_inv/s")
	b.ReportMetric(rtRate/bareRate, "ratio")
	b.ReportMetric(float64(n*b.N)/loopDur.Seconds(), "loop_inv/s")
	b.ReportMetric(float64(rtCPU.Nanoseconds())/float64(n*b.N), "runtime_cpu_ns/inv")
	b.ReportMetric(float64(bareCPU.Nanoseconds())/float64(n*b.N), "bare_cpu_ns/inv")
	b.ReportMetric(bareCPU.Seconds()/rtCPU.Seconds(), "cpu_ratio")
	b.ReportMetric(float64(rtAllocs)/float64(n*b.N), "runtime_allocs/inv")
	b.ReportMetric(float64(bareAllocs)/float64(n*b.N), "bare_allocs/inv")
}

// mallocs is the number of heap allocations the process has made.
func mallocs() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Mallocs
}

// BenchmarkGatherLatency is benchmark 11b: 10,000 tasks whose model sleeps
// 100 ms, all in flight at once, against the same sleeps in an errgroup; and
// the heap plus stack each in-flight run costs, sampled once every model
// call is in flight (in a separate gather, so the sampling's GC does not
// count in the wall time).
func BenchmarkGatherLatency(b *testing.B) {
	const n = 10_000
	settings := map[string]any{"latency_ms": 100}
	ts := tasks(n)
	// The probe model holds every call until all n are in flight, so the
	// memory sample sees n live runs whatever the spawn rate.
	var inflight atomic.Int64
	allIn := make(chan struct{}, 1)
	var release chan struct{}
	reg := model.NewRegistry()
	reg.Register("test", testmodel.New)
	reg.Register("probe", func(string) (svc.Model, error) {
		m, _ := testmodel.New("echo")
		return svc.ModelFunc(func(ctx context.Context, req svc.ModelRequest) (svc.ModelResponse, error) {
			if inflight.Add(1) == n {
				allIn <- struct{}{}
			}
			<-release
			return m.Generate(ctx, req)
		}), nil
	})
	rt := newRuntime(b, svc.Agent{Name: "sleepy", Model: "test:echo", ModelSettings: settings})
	m, _ := testmodel.New("echo")
	var rtDur, bareDur time.Duration
	var perRun float64
	for i := 0; i < b.N; i++ {
		// Memory: sample once when all n model calls are parked, in a runtime
		// of its own so that the base counts none of its goroutines.
		base := inuse()
		prt, err := supervisor.New(supervisor.Config{Models: reg})
		if err != nil {
			b.Fatal(err)
		}
		if err := prt.Register(svc.Agent{Name: "probed", Model: "probe:echo", ModelSettings: settings}); err != nil {
			b.Fatal(err)
		}
		inflight.Store(0)
		release = make(chan struct{})
		done := make(chan error, 1)
		go func() {
			_, err := prt.Gather(context.Background(), "probed", ts, n)
			done <- err
		}()
		<-allIn
		perRun += float64(inuse()-base) / n
		if testing.Verbose() {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			b.Logf("heap %d KiB, stack %d KiB, goroutines %d", ms.HeapInuse>>10, ms.StackInuse>>10, runtime.NumGoroutine())
		}
		close(release)
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		_ = prt.Close()

		start := time.Now()
		res, err := rt.Gather(context.Background(), "sleepy", ts, n)
		rtDur += time.Since(start)
		if err != nil || !res[0].Success {
			b.Fatal(err)
		}

		start = time.Now()
		var g errgroup.Group
		for j := range ts {
			g.Go(func() error {
				_, err := modelCall(context.Background(), m, settings, ts[j].Input)
				return err
			})
		}
		if err := g.Wait(); err != nil {
			b.Fatal(err)
		}
		bareDur += time.Since(start)
	}
	b.ReportMetric(float64(rtDur.Milliseconds())/float64(b.N), "runtime_wall_ms")
	b.ReportMetric(float64(bareDur.Milliseconds())/float64(b.N), "bare_wall_ms")
	b.ReportMetric(rtDur.Seconds()/bareDur.Seconds(), "ratio")
	b.ReportMetric(perRun/float64(b.N)/1024, "KiB/inflight_run")
}

// inuse is the heap and stack memory in use, after a GC.
func inuse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse + ms.StackInuse
}

// BenchmarkHTTPRun is benchmark 11c: POST /agents/echo/run over real HTTP
// against a bare chi handler doing the same JSON decode and encode, driven
// by the same load generator.
func BenchmarkHTTPRun(b *testing.B) {
	const requests, clients = 20_000, 32
	rt := newRuntime(b, svc.Agent{Name: "echo", Model: "test:echo"})
	router, err := server.NewRouter(rt, server.WithLogger(zap.NewNop()))
	if err != nil {
		b.Fatal(err)
	}
	bare := chi.NewRouter()
	bare.Post("/agents/{name}/run", func(w http.ResponseWriter, r *http.Request) {
		var task svc.TaskSpec
		if err := json.NewDecoder(r.Body).Decode(&task); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		res := svc.AgentResult{AgentName: chi.URLParam(r, "name"), TaskID: task.ID, Success: true, Output: task.Input,
			Metadata: svc.ResultMetadata{TraceID: task.RequestID, Model: "test:echo", Attempts: 1, Backend: "local"}}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(res)
	})
	var rtRate, bareRate float64
	for i := 0; i < b.N; i++ {
		rtRate += load(b, router, requests, clients)
		bareRate += load(b, bare, requests, clients)
	}
	b.ReportMetric(rtRate/float64(b.N), "runtime_req/s")
	b.ReportMetric(bareRate/float64(b.N), "bare_req/s")
	b.ReportMetric(rtRate/bareRate, "ratio")
}

// load serves h on a loopback port and sends it requests POSTs from clients
// keep-alive connections; it returns requests per second.
func load(b *testing.B, h http.Handler, requests, clients int) float64 {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(ln) }()
	defer func() { _ = srv.Close() }()
	tr := &http.Transport{MaxIdleConnsPerHost: clients}
	defer tr.CloseIdleConnections()
	return loadURL(b, "http://"+ln.Addr().String()+"/agents/echo/run", requests, clients, &http.Client{Transport: tr})
}

// loadURL posts requests test:echo runs to url from clients concurrent
// clients of c and returns the requests per second.
func loadURL(b *testing.B, url string, requests, clients int, c *http.Client) float64 {
	body := []byte(`{"input":{"text":"hello world"},"request_id":"bench"}`)
	var next atomic.Int64
	var g errgroup.Group
	start := time.Now()
	for range clients {
		g.Go(func() error {
			for next.Add(1) <= int64(requests) {
				resp, err := c.Post(url, "application/json", bytes.NewReader(body))
				if err != nil {
					return err
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					return fmt.Errorf("status %d", resp.StatusCode)
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	return float64(requests) / time.Since(start).Seconds()
}

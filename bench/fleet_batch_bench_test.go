package bench

// Issue 36 part 4: a gather's tasks through embedded NATS to one worker
// process, batched (many tasks per broker message) and, in the same run,
// one task per message (the baseline). See BENCHMARKS.md, "Issue 36 part 4".

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/dispatch"
	"github.com/svc-dev/svc/supervisor"
)

// BenchmarkFleetThroughput: a gather of 100,000 test:echo tasks
// (max_concurrency 2000; SVC_BENCH_FLEET_TASKS sets the count) by an
// in-process publisher through an embedded NATS server to one `svc worker
// start --concurrency 500` process, with batches (the default) and
// without (dispatch.Config.MaxBatch -1, the path of every task before
// issue 36), alternating. Each reports tasks/s and the CPU per task of
// both processes together (this one holds the publisher and the server).
// SVC_BENCH_FLEET_INPROC=1 runs the worker in this process instead, for a
// CPU profile of the whole trip (-cpuprofile).
func BenchmarkFleetThroughput(b *testing.B) {
	n := 100_000
	if s := os.Getenv("SVC_BENCH_FLEET_TASKS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			b.Fatalf("SVC_BENCH_FLEET_TASKS=%q", s)
		}
		n = v
	}
	const conc, workerConc = 2000, 500
	echo := svc.Agent{Name: "echo", Model: "test:echo"}
	e := startNATS(b)
	watch := &workerWatch{}
	pubs := map[string]*supervisor.Runtime{}
	for _, mode := range []struct {
		name     string
		maxBatch int
	}{{"batched", 0}, {"single", -1}} {
		setup, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		p, err := dispatch.New(setup, dispatch.Config{Broker: natsClient(b, e.ClientURL(), "publisher-"+mode.name), Emitter: watch,
			MaxBatch: mode.maxBatch})
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		rt, err := supervisor.New(supervisor.Config{Dispatcher: p})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = rt.Shutdown(ctx)
			_ = p.Close()
		})
		if err := rt.Register(echo); err != nil {
			b.Fatal(err)
		}
		pubs[mode.name] = rt
	}
	workerPID := 0
	if os.Getenv("SVC_BENCH_FLEET_INPROC") != "" {
		startWorker(b, natsClient(b, e.ClientURL(), "worker"), "broker:nats", nil, workerConc, echo)
	} else {
		wp := startWorkerProc(b, svcBinary(b), e.ClientURL(), writeSpecs(b, "echo", map[string]any{}), "echo", workerConc,
			svc.DefaultAckWait, watch)
		workerPID = wp.cmd.Process.Pid
	}
	// Both publishers must know the worker (and that it takes batches)
	// before they dispatch: its worker_started reached them both.
	time.Sleep(200 * time.Millisecond)
	ts := tasks(n)
	ctx := context.Background()
	modes := []string{"batched", "single"}
	if s := os.Getenv("SVC_BENCH_FLEET_MODES"); s != "" {
		modes = strings.Split(s, ",") // one alone, for a profile
	}
	for _, name := range modes { // warm up
		res, err := pubs[name].Gather(ctx, "echo", ts[:min(n, 5000)], conc)
		allSucceeded(b, res, err)
	}
	b.ResetTimer()
	dur, cpu := map[string]time.Duration{}, map[string]time.Duration{}
	for i := 0; i < b.N; i++ {
		for _, name := range modes {
			runtime.GC()
			start, cpu0, wcpu0 := time.Now(), cpuTime(), procCPUTime(workerPID)
			res, err := pubs[name].Gather(ctx, "echo", ts, conc)
			dur[name] += time.Since(start)
			cpu[name] += cpuTime() - cpu0 + procCPUTime(workerPID) - wcpu0
			allSucceeded(b, res, err)
		}
	}
	b.StopTimer()
	for _, name := range modes {
		b.ReportMetric(float64(n*b.N)/dur[name].Seconds(), name+"_tasks/s")
		b.ReportMetric(float64(cpu[name].Microseconds())/float64(n*b.N), name+"_cpu_us/task")
	}
}

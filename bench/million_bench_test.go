package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/model/testmodel"
	"github.com/svc-dev/svc/supervisor"
)

// BenchmarkMillionInFlight is issue 15's "a million runs in flight":
// SVC_BENCH_INFLIGHT (default 1,000,000) test:echo tasks whose model sleeps
// SVC_BENCH_INFLIGHT_LATENCY_MS (default 60,000), all at once, on a runtime
// with the default options: concurrent gathers of svc.MaxGatherConcurrency
// tasks each (the most one gather takes), each at that concurrency; against the same model calls, with the same sleeps, each in a
// bare goroutine, measured first (a goroutine's first stack is sized by
// the average stack of the goroutines the last GC saw, so the pass that
// runs second inherits the first one's). Both passes sample memory (after a GC) at the moment
// every call is parked in its sleep (testmodel.Waiting), so both wall
// times include one such GC. It reports the wall times and their ratio,
// heap+stack per in-flight run above what the process held before, the
// goroutines per run, the peak RSS of each pass, and the allocations per
// run. SVC_BENCH_HEAPPROFILE, when set, is where the runtime pass writes
// a heap profile taken at the sample.
func BenchmarkMillionInFlight(b *testing.B) {
	n := envInt(b, "SVC_BENCH_INFLIGHT", 1_000_000)
	latency := envInt(b, "SVC_BENCH_INFLIGHT_LATENCY_MS", 60_000)
	settings := map[string]any{"latency_ms": latency}
	ts := make([]svc.TaskSpec, n)
	for i := range ts {
		ts[i] = svc.TaskSpec{ID: strconv.Itoa(i), Input: json.RawMessage(`{"text":"hello world"}`)}
	}
	m, _ := testmodel.New("echo")
	var rt, bare inflightPass
	for i := 0; i < b.N; i++ {
		bm := measureInflight(b, n, "bare", func() {
			var wg sync.WaitGroup
			var failed error
			var mu sync.Mutex
			for j := range ts {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if _, err := modelCall(context.Background(), m, settings, ts[j].Input); err != nil {
						mu.Lock()
						failed = err
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			if failed != nil {
				b.Fatal(failed)
			}
		})
		bare.add(bm)
		// The runtime is made before the pass and closed after it: what it
		// holds with nothing running is not the runs'.
		s, err := supervisor.New(supervisor.Config{})
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Register(svc.Agent{Name: "sleepy", Model: "test:echo", ModelSettings: settings}); err != nil {
			b.Fatal(err)
		}
		r := measureInflight(b, n, "runtime", func() {
			var g errgroup.Group
			for lo := 0; lo < n; lo += svc.MaxGatherConcurrency {
				batch := ts[lo:min(lo+svc.MaxGatherConcurrency, n)]
				g.Go(func() error {
					res, err := s.Gather(context.Background(), "sleepy", batch, len(batch))
					if err != nil {
						return err
					}
					for j := range res {
						if !res[j].Success {
							return fmt.Errorf("task %s failed: %v", res[j].TaskID, res[j].Err)
						}
					}
					return nil
				})
			}
			if err := g.Wait(); err != nil {
				b.Fatal(err)
			}
		})
		rt.add(r)
		_ = s.Close()
	}
	k := float64(b.N)
	b.ReportMetric(rt.wall.Seconds()/k, "runtime_wall_s")
	b.ReportMetric(bare.wall.Seconds()/k, "bare_wall_s")
	b.ReportMetric(rt.wall.Seconds()/bare.wall.Seconds(), "ratio")
	b.ReportMetric(rt.perRun/k/1024, "KiB/inflight_run")
	b.ReportMetric(rt.heapPerRun/k/1024, "heap_KiB/run")
	b.ReportMetric(rt.stackPerRun/k/1024, "stack_KiB/run")
	b.ReportMetric(bare.perRun/k/1024, "bare_KiB/inflight_run")
	b.ReportMetric(rt.goroutines/k, "goroutines/run")
	b.ReportMetric(float64(rt.peakRSS)/k/(1<<20), "runtime_peak_RSS_MiB")
	b.ReportMetric(float64(bare.peakRSS)/k/(1<<20), "bare_peak_RSS_MiB")
	b.ReportMetric(rt.allocs/k, "allocs/run")
	b.ReportMetric(bare.allocs/k, "bare_allocs/run")
}

type inflightPass struct {
	wall                            time.Duration
	perRun, heapPerRun, stackPerRun float64
	goroutines, allocs              float64
	peakRSS                         uint64
}

func (p *inflightPass) add(q inflightPass) {
	p.wall += q.wall
	p.perRun += q.perRun
	p.heapPerRun += q.heapPerRun
	p.stackPerRun += q.stackPerRun
	p.goroutines += q.goroutines
	p.allocs += q.allocs
	p.peakRSS += q.peakRSS
}

// measureInflight runs pass, which must start n test-model calls that all
// sleep at once and return when they have all finished; it samples memory
// and goroutines when all n sleep.
func measureInflight(b *testing.B, n int, name string, pass func()) inflightPass {
	var p inflightPass
	debug.FreeOSMemory() // so that the peak RSS is this pass's
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	baseG := runtime.NumGoroutine()
	resetPeakRSS(b)
	waiting0 := testmodel.Waiting()
	sampled := make(chan struct{})
	stop := make(chan struct{})
	var maxStart atomic.Uint64
	go watchStartingStack(&maxStart, stop)
	go func() {
		defer close(sampled)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for testmodel.Waiting()-waiting0 < int64(n) {
			select {
			case <-stop:
				b.Errorf("%s: never had all %d calls sleeping at once (latency too short?)", name, n)
				return
			case <-t.C:
			}
		}
		g := runtime.NumGoroutine()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		p.heapPerRun = (float64(ms.HeapInuse) - float64(base.HeapInuse)) / float64(n)
		p.stackPerRun = (float64(ms.StackInuse) - float64(base.StackInuse)) / float64(n)
		p.perRun = p.heapPerRun + p.stackPerRun
		p.goroutines = float64(g-baseG) / float64(n)
		if stackHist != nil {
			b.Logf("%s: goroutine stacks by size:%s", name, stackHist())
		}
		if path := os.Getenv("SVC_BENCH_HEAPPROFILE"); path != "" && name == "runtime" {
			writeHeapProfile(b, path)
		}
		// The stack scanned by that GC over the goroutines is the average
		// depth they park at; the starting size is what a new goroutine
		// gets (the runtime sizes it from that average).
		sm := []metrics.Sample{{Name: "/gc/scan/stack:bytes"}, {Name: "/gc/stack/starting-size:bytes"}}
		metrics.Read(sm)
		b.Logf("%s: %d sleeping: heap %d MiB, stack %d MiB, %d goroutines, %.0f B of stack in use per goroutine, starting stack %d B, largest starting stack during the pass %d B",
			name, n, ms.HeapInuse>>20, ms.StackInuse>>20, g, float64(sm[0].Value.Uint64())/float64(g), sm[1].Value.Uint64(), maxStart.Load())
	}()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	pass()
	p.wall = time.Since(start)
	close(stop)
	<-sampled
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	p.allocs = float64(after.Mallocs-before.Mallocs) / float64(n)
	p.peakRSS = peakRSS(b)
	return p
}

// watchStartingStack keeps in max the largest starting goroutine stack
// seen until stop: a goroutine started at 8 KiB keeps 8 KiB while it parks
// deeper than 1.2 KiB (a GC halves a stack only below a quarter used).
func watchStartingStack(max *atomic.Uint64, stop <-chan struct{}) {
	sm := []metrics.Sample{{Name: "/gc/stack/starting-size:bytes"}}
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for {
		metrics.Read(sm)
		if v := sm[0].Value.Uint64(); v > max.Load() {
			max.Store(v)
		}
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
}

// stackHist, when set (a debugging build), describes the goroutines'
// stacks by size.
var stackHist func() string

func writeHeapProfile(b *testing.B, path string) {
	f, err := os.Create(path)
	if err != nil {
		b.Error(err)
		return
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		b.Error(err)
	}
}

func envInt(b *testing.B, key string, def int) int {
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive integer", key, v)
	}
	return n
}

// resetPeakRSS resets the process's peak RSS (VmHWM), so that peakRSS
// reports the peak of what follows (Linux: clear_refs 5).
func resetPeakRSS(b *testing.B) {
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		b.Logf("cannot reset the peak RSS: %v", err)
	}
}

// peakRSS is VmHWM from /proc/self/status, in bytes (0 where there is none).
func peakRSS(b *testing.B) uint64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Logf("peak RSS: %v", err)
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := bytes.CutPrefix([]byte(line), []byte("VmHWM:")); ok {
			f := bytes.Fields(rest)
			if len(f) >= 1 {
				kb, err := strconv.ParseUint(string(f[0]), 10, 64)
				if err == nil {
					return kb << 10
				}
			}
		}
	}
	return 0
}

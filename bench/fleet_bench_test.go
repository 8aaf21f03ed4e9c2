package bench

// Issue 11's benchmarks: the distributed mode (publisher → broker →
// workers), each beside its baseline measured in the same run. See
// BENCHMARKS.md, "Issue 11: the distributed mode".

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/agent"
	"github.com/svc-dev/svc/broker/membroker"
	"github.com/svc-dev/svc/broker/natsbroker"
	"github.com/svc-dev/svc/dispatch"
	"github.com/svc-dev/svc/supervisor"
	"github.com/svc-dev/svc/supervisor/remote"
	"github.com/svc-dev/svc/worker"
)

// The svc binary, built once per package run by svcBinary for the
// benchmarks that start worker processes, and removed by TestMain.
var (
	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error
)

func TestMain(m *testing.M) {
	if os.Getenv(bareServerEnv) != "" {
		serveBare()
		return
	}
	if spec := os.Getenv(holdIdleEnv); spec != "" {
		holdIdle(spec)
		return
	}
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// svcBinary builds ./cmd/svc into a temporary directory, once; with
// SVC_BENCH_BIN set, it is that binary instead (to compare builds of two
// commits with the same benchmark).
func svcBinary(b *testing.B) string {
	b.Helper()
	if p := os.Getenv("SVC_BENCH_BIN"); p != "" {
		return p
	}
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "svc-fleet-bench-")
		if binErr != nil {
			return
		}
		p := filepath.Join(binDir, "svc")
		out, err := exec.Command("go", "build", "-o", p, "github.com/svc-dev/svc/cmd/svc").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build ./cmd/svc: %v\n%s", err, out)
			return
		}
		binPath = p
	})
	if binErr != nil {
		b.Fatal(binErr)
	}
	return binPath
}

// startNATS starts an embedded nats-server with JetStream on a free
// loopback port and a temporary store, shut down at the end of b.
func startNATS(b *testing.B) *natsbroker.Embedded {
	b.Helper()
	e, err := natsbroker.StartEmbedded(natsbroker.EmbeddedConfig{DataDir: b.TempDir(), Listen: "127.0.0.1:0"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.Shutdown(ctx)
	})
	return e
}

// natsClient is one connection to url, closed at the end of b (before the
// server, cleanups running in reverse).
func natsClient(b *testing.B, url, name string) svc.Broker {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	br, err := natsbroker.Connect(ctx, url, natsbroker.Options{Name: name})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = br.Close() })
	return br
}

// span is one dispatch as the publisher's run actor sees it.
type span struct {
	task       string
	start, end time.Time
}

// spans records every dispatch (or every local attempt) of a runtime.
type spans struct {
	mu  sync.Mutex
	all []span
}

func (s *spans) add(task string, start time.Time) {
	end := time.Now()
	s.mu.Lock()
	s.all = append(s.all, span{task, start, end})
	s.mu.Unlock()
}

func (s *spans) reset() {
	s.mu.Lock()
	s.all = s.all[:0]
	s.mu.Unlock()
}

func (s *spans) durations() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	ds := make([]time.Duration, len(s.all))
	for i, sp := range s.all {
		ds[i] = sp.end.Sub(sp.start)
	}
	return ds
}

// timedDispatcher times each Dispatch: publish → the task's result back at
// the publisher (queueing at the broker and in the workers included).
type timedDispatcher struct {
	remote.Dispatcher
	rec *spans
}

func (t timedDispatcher) Dispatch(ctx context.Context, req dispatch.Request) (svc.AgentResult, error) {
	start := time.Now()
	res, err := t.Dispatcher.Dispatch(ctx, req)
	t.rec.add(req.TaskID, start)
	return res, err
}

// newPublisher is a runtime dispatching every invocation through br, its
// dispatches timed into rec when rec is not nil.
func newPublisher(b *testing.B, br svc.Broker, em svc.Emitter, rec *spans, agents ...svc.Agent) (*supervisor.Runtime, *dispatch.Publisher) {
	b.Helper()
	// Setup needs a deadline: the NATS client refuses a request without one.
	setup, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := dispatch.New(setup, dispatch.Config{Broker: br, Emitter: em})
	if err != nil {
		b.Fatal(err)
	}
	var d remote.Dispatcher = p
	if rec != nil {
		d = timedDispatcher{p, rec}
	}
	rt, err := supervisor.New(supervisor.Config{Emitter: em, Dispatcher: d})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rt.Shutdown(ctx)
		_ = p.Close()
	})
	if err := rt.Register(agents...); err != nil {
		b.Fatal(err)
	}
	return rt, p
}

// startWorker is an in-process worker on br: its own runtime, its own
// broker client.
func startWorker(b *testing.B, br svc.Broker, backend string, em svc.Emitter, concurrency int, agents ...svc.Agent) *worker.Worker {
	b.Helper()
	rt, err := supervisor.New(supervisor.Config{Emitter: em, Backend: backend})
	if err != nil {
		b.Fatal(err)
	}
	if err := rt.Register(agents...); err != nil {
		b.Fatal(err)
	}
	setup, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := worker.New(setup, worker.Config{Broker: br, Runner: rt, Concurrency: concurrency, Heartbeat: -1})
	if err != nil {
		b.Fatal(err)
	}
	if err := w.Start(setup); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Shutdown(ctx)
		_ = rt.Shutdown(ctx)
	})
	return w
}

func pctl(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	i := int(float64(len(ds)) * p)
	return ds[min(i, len(ds)-1)]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func allSucceeded(b *testing.B, res []svc.AgentResult, err error) {
	b.Helper()
	if err != nil {
		b.Fatal(err)
	}
	for i, r := range res {
		if !r.Success {
			b.Fatalf("task %d failed: %+v", i, r.Error)
		}
	}
}

// BenchmarkFleetDispatch is issue 11's benchmark 8a: a gather of 10,000
// test:echo tasks (max_concurrency 1000) in process (the baseline), through
// the memory broker and through an embedded NATS server, each fleet a
// publisher runtime and 2 workers (in this process, each with its own
// runtime and, on NATS, its own connection). Per-task latency is what the
// run actor waits for one attempt: the agent loop in process; publish →
// result back at the publisher on a fleet (queueing in the broker and the
// workers included, so at a full gather it is about max_concurrency /
// throughput). It also reports the CPU time per task of the whole process
// (publisher, workers and embedded server), which says what the machine
// would give with its 2 cores to itself: 2 s / cpu_us per task, the cores
// it used (CPU time / wall time) and the average number of its threads
// that were runnable but waiting for a CPU (from schedstat). Then 500
// tasks one at a time (max_concurrency 1): the per-task latency of the trip
// itself, without queueing (c1_p50_ms, c1_p99_ms).
func BenchmarkFleetDispatch(b *testing.B) {
	const n, conc, workerConc = 10_000, 1000, 500
	ts := tasks(n)
	echo := svc.Agent{Name: "echo", Model: "test:echo"}
	ctx := context.Background()

	var localRec spans
	local, err := supervisor.New(supervisor.Config{Execute: func(ctx context.Context, inv *agent.Invocation) (agent.Outcome, error) {
		start := time.Now()
		o, err := agent.Run(ctx, inv)
		localRec.add(inv.TaskID, start)
		return o, err
	}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = local.Close() })
	if err := local.Register(echo); err != nil {
		b.Fatal(err)
	}

	var memRec spans
	mb := membroker.New()
	b.Cleanup(func() { _ = mb.Close() })
	memPub, memP := newPublisher(b, mb, nil, &memRec, echo)
	for range 2 {
		startWorker(b, mb, memP.Backend(), nil, workerConc, echo)
	}

	var natsRec spans
	e := startNATS(b)
	natsPub, natsP := newPublisher(b, natsClient(b, e.ClientURL(), "publisher"), nil, &natsRec, echo)
	for i := range 2 {
		startWorker(b, natsClient(b, e.ClientURL(), fmt.Sprint("worker-", i)), natsP.Backend(), nil, workerConc, echo)
	}

	modes := []struct {
		name string
		rt   *supervisor.Runtime
		rec  *spans
	}{{"inproc", local, &localRec}, {"memory", memPub, &memRec}, {"nats", natsPub, &natsRec}}
	for _, m := range modes { // warm up: streams, consumers, goroutine pools
		res, err := m.rt.Gather(ctx, "echo", ts[:2000], conc)
		allSucceeded(b, res, err)
	}
	b.ResetTimer()
	dur := make([]time.Duration, len(modes))
	cpu := make([]time.Duration, len(modes))
	waited := make([]time.Duration, len(modes))
	lat := make([][]time.Duration, len(modes))
	for i := 0; i < b.N; i++ {
		for k, m := range modes {
			m.rec.reset()
			runtime.GC()
			start, cpu0, wait0 := time.Now(), cpuTime(), runDelay()
			res, err := m.rt.Gather(ctx, "echo", ts, conc)
			dur[k] += time.Since(start)
			cpu[k] += cpuTime() - cpu0
			waited[k] += runDelay() - wait0
			allSucceeded(b, res, err)
			lat[k] = append(lat[k], m.rec.durations()...)
		}
	}
	// Unloaded: one task at a time, so the latency is the trip itself
	// rather than the queueing a full gather causes.
	const seq = 500
	one := make([][]time.Duration, len(modes))
	for k, m := range modes {
		m.rec.reset()
		res, err := m.rt.Gather(ctx, "echo", ts[:seq], 1)
		allSucceeded(b, res, err)
		one[k] = m.rec.durations()
	}
	b.StopTimer()
	for k, m := range modes {
		b.ReportMetric(ms(pctl(one[k], 0.50)), m.name+"_c1_p50_ms")
		b.ReportMetric(ms(pctl(one[k], 0.99)), m.name+"_c1_p99_ms")
		b.ReportMetric(float64(n*b.N)/dur[k].Seconds(), m.name+"_tasks/s")
		b.ReportMetric(ms(pctl(lat[k], 0.50)), m.name+"_p50_ms")
		b.ReportMetric(ms(pctl(lat[k], 0.99)), m.name+"_p99_ms")
		b.ReportMetric(float64(cpu[k].Microseconds())/float64(n*b.N), m.name+"_cpu_us/task")
		b.ReportMetric(cpu[k].Seconds()/dur[k].Seconds(), m.name+"_cores_used")
		b.ReportMetric(waited[k].Seconds()/dur[k].Seconds(), m.name+"_threads_waiting")
	}
}

// runDelay is the time this process's live threads have spent runnable but
// waiting for a CPU (the second field of /proc/self/task/*/schedstat): on a
// shared machine, how much the other tenants held us back. Over a wall
// time, it is the average number of our threads kept waiting. 0 where
// schedstat is not available.
func runDelay() time.Duration {
	dirs, _ := os.ReadDir("/proc/self/task")
	var total time.Duration
	for _, d := range dirs {
		data, err := os.ReadFile(filepath.Join("/proc/self/task", d.Name(), "schedstat"))
		if err != nil {
			continue
		}
		var run, wait int64
		if _, err := fmt.Sscan(string(data), &run, &wait); err == nil {
			total += time.Duration(wait)
		}
	}
	return total
}

// cpuTime is the CPU time (user and system) this process has used: the
// publisher, the workers and the embedded server together, whatever share
// of the machine the scheduler gave them.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// workerWatch is a publisher's emitter that notes the workers it heard
// announce themselves (worker_started on svc.workers).
type workerWatch struct {
	mu      sync.Mutex
	started map[string]bool
}

func (w *workerWatch) Emit(ev svc.RuntimeEvent) {
	if ev.EventType != svc.EventWorkerStarted {
		return
	}
	id, _ := ev.Payload["runtime_id"].(string)
	w.mu.Lock()
	if w.started == nil {
		w.started = map[string]bool{}
	}
	w.started[id] = true
	w.mu.Unlock()
}

func (w *workerWatch) seen(id string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.started[id]
}

// lockedBuffer collects a process's output.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// workerProc is one `svc worker start` process.
type workerProc struct {
	id   string
	cmd  *exec.Cmd
	out  *lockedBuffer
	done chan struct{}
}

// writeSpecs writes a specs directory with one agent on test:echo.
func writeSpecs(b *testing.B, name string, settings map[string]any) string {
	b.Helper()
	dir := b.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "agents"), 0o755); err != nil {
		b.Fatal(err)
	}
	s, _ := json.Marshal(settings)
	spec := fmt.Sprintf("version: 1\nname: %s\nmodel: test:echo\nmodel_settings: %s\n", name, s)
	if err := os.WriteFile(filepath.Join(dir, "agents", name+".yaml"), []byte(spec), 0o644); err != nil {
		b.Fatal(err)
	}
	return dir
}

// startWorkerProc starts a worker process serving agent of specs on url and
// waits until the publisher watching with watch hears it start. It is
// stopped (SIGTERM, then SIGKILL) at the end of b if still running.
func startWorkerProc(b *testing.B, bin, url, specs, agentName string, concurrency int, ackWait time.Duration, watch *workerWatch) *workerProc {
	b.Helper()
	p := &workerProc{id: uuid.NewString(), out: &lockedBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, "worker", "start", "--broker", url, "--specs", specs, "--agents", agentName,
		"--concurrency", fmt.Sprint(concurrency), "--heartbeat-seconds", "0", "--runtime-id", p.id,
		"--ack-wait", ackWait.String(), "--log-level", "warn")
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	b.Cleanup(p.stop)
	deadline := time.Now().Add(60 * time.Second)
	for !watch.seen(p.id) {
		select {
		case <-p.done:
			b.Fatalf("worker exited at start:\n%s", p.out)
		default:
		}
		if time.Now().After(deadline) {
			b.Fatalf("worker did not announce itself within 60s:\n%s", p.out)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return p
}

// stop drains the worker (SIGTERM) and kills it if it has not exited
// within 10s. Idempotent.
func (p *workerProc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// BenchmarkFleetScaling is issue 11's benchmark 8b: 2,000 tasks of
// latency_ms 200 gathered (max_concurrency 400) by an in-process publisher
// through an embedded NATS server to 1, 2 and 4 worker processes (`svc
// worker start --concurrency 50`). The ideal is 250 tasks/s per worker; the
// baseline in the same run is the same gather in one process at
// max_concurrency 200 (the 4-worker fleet's capacity: 1,000 tasks/s ideal).
func BenchmarkFleetScaling(b *testing.B) {
	const n, perWorker, conc = 2000, 50, 400
	settings := map[string]any{"latency_ms": 200}
	sleepy := svc.Agent{Name: "sleepy", Model: "test:echo", ModelSettings: settings}
	bin := svcBinary(b)
	specs := writeSpecs(b, "sleepy", settings)
	e := startNATS(b)
	watch := &workerWatch{}
	pub, _ := newPublisher(b, natsClient(b, e.ClientURL(), "publisher"), watch, nil, sleepy)
	local := newRuntime(b, sleepy)
	ts := tasks(n)
	ctx := context.Background()

	var procs []*workerProc
	rate := map[int]float64{}
	b.ResetTimer()
	for _, k := range []int{1, 2, 4} {
		b.StopTimer()
		for len(procs) < k {
			procs = append(procs, startWorkerProc(b, bin, e.ClientURL(), specs, "sleepy", perWorker, svc.DefaultAckWait, watch))
		}
		res, err := pub.Gather(ctx, "sleepy", ts[:2*k*perWorker], conc) // warm up the new workers
		allSucceeded(b, res, err)
		b.StartTimer()
		var d time.Duration
		for i := 0; i < b.N; i++ {
			start := time.Now()
			res, err := pub.Gather(ctx, "sleepy", ts, conc)
			d += time.Since(start)
			allSucceeded(b, res, err)
		}
		rate[k] = float64(n*b.N) / d.Seconds()
	}
	var ld time.Duration
	for i := 0; i < b.N; i++ {
		start := time.Now()
		res, err := local.Gather(ctx, "sleepy", ts, 4*perWorker)
		ld += time.Since(start)
		allSucceeded(b, res, err)
	}
	b.StopTimer()
	for _, k := range []int{1, 2, 4} {
		b.ReportMetric(rate[k], fmt.Sprintf("w%d_tasks/s", k))
	}
	b.ReportMetric(rate[4]/rate[1], "ratio_4/1")
	b.ReportMetric(1000/200*perWorker, "ideal_w1_tasks/s")
	b.ReportMetric(float64(n*b.N)/ld.Seconds(), "inproc_c200_tasks/s")
}

// stopRecorder notes when each task's invocation emitted agent_failed:
// the moment its cancelled model call had returned, i.e. the work stopped.
type stopRecorder struct {
	mu      sync.Mutex
	stopped map[string]time.Time
}

func (s *stopRecorder) Emit(ev svc.RuntimeEvent) {
	if ev.EventType != svc.EventAgentFailed {
		return
	}
	s.mu.Lock()
	s.stopped[ev.TaskID] = time.Now()
	s.mu.Unlock()
}

func (s *stopRecorder) at(task string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.stopped[task]
	return t, ok
}

// cancelEach submits n runs of "slow" on rt, waits until ready reports them
// all in flight, then cancels them one by one, each time waiting for its
// work to stop; it returns each cancel's CancelRun → work stopped.
func cancelEach(b *testing.B, rt *supervisor.Runtime, n int, prefix string, rec *stopRecorder, ready func(ids []string) bool) []time.Duration {
	b.Helper()
	ctx := context.Background()
	ids := make([]string, n)
	for j := range ids {
		var err error
		if ids[j], err = rt.Submit(ctx, svc.SubmitRequest{Target: "slow",
			Task: svc.TaskSpec{ID: fmt.Sprint(prefix, j), Input: json.RawMessage(`1`)}}); err != nil {
			b.Fatal(err)
		}
	}
	for deadline := time.Now().Add(60 * time.Second); !ready(ids); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("%s: the %d runs are not all in flight after 60s", prefix, n)
		}
	}
	out := make([]time.Duration, 0, n)
	for j, id := range ids {
		task := fmt.Sprint(prefix, j)
		start := time.Now()
		if err := rt.CancelRun(ctx, id); err != nil {
			b.Fatal(err)
		}
		for deadline := start.Add(10 * time.Second); ; time.Sleep(20 * time.Microsecond) {
			if at, ok := rec.at(task); ok {
				out = append(out, at.Sub(start))
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("run %s: the work did not stop within 10s", id)
			}
		}
	}
	return out
}

// BenchmarkFleetCancel is issue 11's benchmark 8c: 1,000 submitted runs
// parked in a 60 s model call on 2 workers (in this process, each with its
// own runtime and NATS connection, concurrency 500) behind an embedded NATS
// server, cancelled one by one with CancelRun on the publisher runtime:
// from CancelRun to the worker's invocation emitting agent_failed (the
// model call returned). Baseline in the same run: the same 1,000 runs in
// one plain runtime.
func BenchmarkFleetCancel(b *testing.B) {
	const n, workerConc = 1000, 500
	slow := svc.Agent{Name: "slow", Model: "test:echo", ModelSettings: map[string]any{"latency_ms": 60_000}}
	rec := &stopRecorder{stopped: map[string]time.Time{}}
	e := startNATS(b)
	pub, p := newPublisher(b, natsClient(b, e.ClientURL(), "publisher"), nil, nil, slow)
	var ws []*worker.Worker
	for i := range 2 {
		ws = append(ws, startWorker(b, natsClient(b, e.ClientURL(), fmt.Sprint("worker-", i)), p.Backend(), rec, workerConc, slow))
	}
	local, err := supervisor.New(supervisor.Config{Emitter: rec})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = local.Close() })
	if err := local.Register(slow); err != nil {
		b.Fatal(err)
	}
	fleetReady := func([]string) bool {
		in := 0
		for _, w := range ws {
			in += w.InFlight()
		}
		return in == n
	}
	localReady := func(ids []string) bool {
		for _, id := range ids {
			if s, _ := local.RunStatus(context.Background(), id); s.State != svc.RunRunning {
				return false
			}
		}
		return true
	}
	var fleet, inproc []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		fleet = append(fleet, cancelEach(b, pub, n, fmt.Sprint("f", i, "-"), rec, fleetReady)...)
		inproc = append(inproc, cancelEach(b, local, n, fmt.Sprint("l", i, "-"), rec, localReady)...)
	}
	b.StopTimer()
	b.ReportMetric(ms(pctl(fleet, 0.50)), "nats_stop_p50_ms")
	b.ReportMetric(ms(pctl(fleet, 0.99)), "nats_stop_p99_ms")
	b.ReportMetric(ms(pctl(inproc, 0.50)), "inproc_stop_p50_ms")
	b.ReportMetric(ms(pctl(inproc, 0.99)), "inproc_stop_p99_ms")
}

// BenchmarkFleetRecovery is issue 11's benchmark 8d: 3 worker processes
// (concurrency 20, --ack-wait 2s) behind an embedded NATS server, a steady
// load of 300 tasks of latency_ms 500 gathered at max_concurrency 30 by an
// in-process publisher; 1.5 s in, one worker is killed with SIGKILL.
//
// The tasks the killed worker held are the ones dispatched before the kill
// whose result came more than 1 s after it: the fleet has twice the
// capacity the load needs, so a task on a live worker ends within its
// 500 ms (plus overhead) of the kill; the killed worker's come back only
// after their ack deadline. Recovery is the kill → the last of those
// results. Target: ack-wait + 1 s. Baseline in the same run: the p50 and
// p99 of a task's publish → result.
func BenchmarkFleetRecovery(b *testing.B) {
	const n, perWorker, conc, workers = 300, 20, 30, 3
	const ackWait = 2 * time.Second
	settings := map[string]any{"latency_ms": 500}
	steady := svc.Agent{Name: "steady", Model: "test:echo", ModelSettings: settings}
	bin := svcBinary(b)
	specs := writeSpecs(b, "steady", settings)
	e := startNATS(b)
	watch := &workerWatch{}
	var rec spans
	pub, _ := newPublisher(b, natsClient(b, e.ClientURL(), "publisher"), watch, &rec, steady)
	ts := tasks(n)
	ctx := context.Background()
	var recovery time.Duration
	var held int
	var lat []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		var procs []*workerProc
		for range workers {
			procs = append(procs, startWorkerProc(b, bin, e.ClientURL(), specs, "steady", perWorker, ackWait, watch))
		}
		rec.reset()
		b.StartTimer()
		done := make(chan error, 1)
		go func() {
			res, err := pub.Gather(ctx, "steady", ts, conc)
			for j, r := range res {
				if err == nil && !r.Success {
					err = fmt.Errorf("task %d failed: %+v", j, r.Error)
				}
			}
			done <- err
		}()
		time.Sleep(1500 * time.Millisecond)
		kill := time.Now()
		if err := procs[0].cmd.Process.Kill(); err != nil {
			b.Fatal(err)
		}
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		var last time.Duration
		rec.mu.Lock()
		for _, sp := range rec.all {
			if sp.start.Before(kill) && sp.end.Sub(kill) > time.Second {
				held++
				last = max(last, sp.end.Sub(kill))
			}
		}
		rec.mu.Unlock()
		if last == 0 {
			b.Fatal("no task came back after the kill: none was held by the killed worker?")
		}
		recovery += last
		lat = append(lat, rec.durations()...)
		for _, p := range procs {
			p.stop()
		}
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(ms(recovery)/float64(b.N), "recovery_ms")
	b.ReportMetric(ms(ackWait+time.Second), "target_ms")
	b.ReportMetric(float64(held)/float64(b.N), "tasks_recovered")
	b.ReportMetric(ms(pctl(lat, 0.50)), "task_p50_ms")
	b.ReportMetric(ms(pctl(lat, 0.99)), "task_p99_ms")
}

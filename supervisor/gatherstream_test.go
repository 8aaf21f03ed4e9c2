package supervisor_test

import (
	"context"
	"encoding/json"
	"errors"
	"iter"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/emitters/emittertest"
	"github.com/svc-dev/svc/internal/testutil"
)

// numbered yields n tasks whose inputs are 0..n-1 (n < 0: without end),
// counting in read how many it yielded.
func numbered(n int, read *atomic.Int64) iter.Seq[svc.TaskSpec] {
	return func(yield func(svc.TaskSpec) bool) {
		for i := 0; n < 0 || i < n; i++ {
			if read != nil {
				read.Add(1)
			}
			if !yield(svc.TaskSpec{Input: json.RawMessage(strconv.Itoa(i))}) {
				return
			}
		}
	}
}

// Every task's result comes back once, with its index, and the batch
// events count the streamed tasks.
func TestGatherStreamResults(t *testing.T) {
	rec := &emittertest.Recorder{}
	rt := newRuntime(t, svc.Options{}, rec, nil, echo("echo", nil))
	const n = 500
	seen := make([]int, n)
	for item, err := range rt.GatherStream(svc.WithRequestID(context.Background(), "batch-1"), "echo", numbered(n, nil), 7) {
		if err != nil {
			t.Fatalf("GatherStream: %v", err)
		}
		if item.Index < 0 || item.Index >= n {
			t.Fatalf("index %d out of range", item.Index)
		}
		seen[item.Index]++
		r := item.Result
		if !r.Success || string(r.Output) != strconv.Itoa(item.Index) || r.Metadata.TraceID != "batch-1" {
			t.Fatalf("result %d = %+v", item.Index, r)
		}
	}
	for i, k := range seen {
		if k != 1 {
			t.Fatalf("task %d answered %d times", i, k)
		}
	}
	bs, bc := rec.OfType(svc.EventBatchStarted), rec.OfType(svc.EventBatchCompleted)
	if len(bs) != 1 || bs[0].Payload["streamed"] != true || bs[0].Payload["task_count"] != -1 || bs[0].Payload["max_concurrency"] != 7 {
		t.Errorf("batch_started = %+v", bs)
	}
	if len(bc) != 1 || bc[0].Payload["task_count"] != n || bc[0].Payload["success_count"] != n || bc[0].Payload["failure_count"] != 0 {
		t.Errorf("batch_completed = %+v", bc)
	}
	for _, ev := range append(bs, bc...) {
		emittertest.CheckPayload(t, ev)
	}
}

// A task that could not be read, or whose input the agent refuses, fails
// as its own result; the others run.
func TestGatherStreamBadTasks(t *testing.T) {
	rt := newRuntime(t, svc.Options{}, nil, nil, svc.Agent{Name: "typed", Model: "test:echo",
		InputType: json.RawMessage(`{"type":"integer"}`)})
	tasks := func(yield func(svc.TaskSpec) bool) {
		_ = yield(svc.TaskSpec{Input: json.RawMessage(`1`)}) &&
			yield(svc.TaskSpec{Invalid: svc.Errorf(svc.KindSpecValidation, "line 2: broken")}) &&
			yield(svc.TaskSpec{Input: json.RawMessage(`"text"`)}) &&
			yield(svc.TaskSpec{Input: json.RawMessage(`4`)})
	}
	got := map[int]svc.AgentResult{}
	for item, err := range rt.GatherStream(context.Background(), "typed", tasks, 2) {
		if err != nil {
			t.Fatalf("GatherStream: %v", err)
		}
		got[item.Index] = item.Result
	}
	if len(got) != 4 || !got[0].Success || !got[3].Success {
		t.Fatalf("results = %+v", got)
	}
	if r := got[1]; r.Success || r.Error == nil || r.Error.Type != string(svc.KindSpecValidation) || r.Error.Message != "line 2: broken" || r.TaskID == "" {
		t.Errorf("unreadable task: %+v (error %+v)", r, r.Error)
	}
	if r := got[2]; r.Success || r.Error == nil || r.Error.Type != string(svc.KindSpecValidation) {
		t.Errorf("refused input: %+v (error %+v)", r, r.Error)
	}
}

// The tasks are read only a bounded window ahead of the results taken:
// with a consumer that stops taking, an endless source is not drained.
// Breaking off cancels the rest and returns.
func TestGatherStreamWindow(t *testing.T) {
	rt := newRuntime(t, svc.Options{}, nil, nil, echo("echo", nil))
	const conc = 4
	window := int64(conc + svc.ReadAhead(conc))
	var read atomic.Int64
	taken := 0
	for _, err := range rt.GatherStream(context.Background(), "echo", numbered(-1, &read), conc) {
		if err != nil {
			t.Fatalf("GatherStream: %v", err)
		}
		taken++
		if taken == 1 {
			testutil.Eventually(t, "the window to fill", func() bool { return read.Load() >= window })
			time.Sleep(100 * time.Millisecond) // room to read past the window, were it unbounded
			// The window, one more waiting for its credit, and the one taken.
			if n := read.Load(); n > window+2 {
				t.Fatalf("read %d tasks while the consumer held the first result; window %d", n, window)
			}
		}
		if taken == 100 {
			break
		}
	}
	testutil.Eventually(t, "the gather to leave", func() bool { return rt.InFlight() == 0 })
}

// Ending the context cancels what remains: the in-flight tasks fail, and
// the stream ends with a CancelledError.
func TestGatherStreamCancel(t *testing.T) {
	rt := newRuntime(t, svc.Options{}, nil, nil, echo("slow", map[string]any{"latency_ms": 60000}))
	ctx, cancel := context.WithCancel(context.Background())
	var read atomic.Int64
	go func() {
		testutil.Eventually(t, "tasks to start", func() bool { return read.Load() > 3 })
		cancel()
	}()
	var last error
	results := 0
	for item, err := range rt.GatherStream(ctx, "slow", numbered(-1, &read), 3) {
		if err != nil {
			last = err
			continue
		}
		results++
		if item.Result.Success {
			t.Errorf("task %d succeeded after the cancel", item.Index)
		}
	}
	if !errors.Is(last, svc.ErrCancelled) {
		t.Fatalf("last error %v, want a CancelledError", last)
	}
	if results == 0 {
		t.Error("no result for the tasks in flight")
	}
	testutil.Eventually(t, "the gather to leave", func() bool { return rt.InFlight() == 0 })
}

func TestGatherStreamRejections(t *testing.T) {
	rt := newRuntime(t, svc.Options{}, nil, nil, echo("echo", nil))
	for _, tc := range []struct {
		agent string
		conc  int
		want  error
	}{{"nope", 1, svc.ErrRegistry}, {"echo", 0, svc.ErrSpecValidation}, {"echo", svc.MaxGatherConcurrency + 1, svc.ErrSpecValidation}} {
		var errs []error
		for item, err := range rt.GatherStream(context.Background(), tc.agent, numbered(3, nil), tc.conc) {
			if err == nil {
				t.Fatalf("%s/%d: a result %+v", tc.agent, tc.conc, item)
			}
			errs = append(errs, err)
		}
		if len(errs) != 1 || !errors.Is(errs[0], tc.want) {
			t.Errorf("%s/%d: errors %v, want one %v", tc.agent, tc.conc, errs, tc.want)
		}
	}
}

// heapAfterGC is the live heap, in bytes, after a collection.
func heapAfterGC() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// The memory of a streamed gather does not grow with the batch: the live
// heap near its 100,000th result is no larger than at its 30,000th, give
// or take 64 bytes for each task in between (4.4 MB; one result kept
// would be several hundred bytes, one task over a hundred; the race
// detector's bookkeeping grows by about half of that margin). The first
// tens of thousands of tasks warm the runtime up (its maps and pools
// reach their working size), hence the later first sample. SVC_STREAM_TASKS raises
// the count: `SVC_STREAM_TASKS=1000000 go test -run
// TestGatherStreamBoundedMemory ./supervisor/` is issue 19's million.
func TestGatherStreamBoundedMemory(t *testing.T) {
	n := 100_000
	if v := os.Getenv("SVC_STREAM_TASKS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 20_000 {
			t.Fatalf("SVC_STREAM_TASKS=%q: want at least 20000", v)
		}
	}
	rt := newRuntime(t, svc.Options{}, nil, nil, echo("echo", nil))
	early := n * 3 / 10
	var atEarly, atEnd uint64
	got := 0
	for item, err := range rt.GatherStream(context.Background(), "echo", numbered(n, nil), 1000) {
		if err != nil || !item.Result.Success {
			t.Fatalf("result %+v, %v", item, err)
		}
		got++
		switch got {
		case early:
			atEarly = heapAfterGC()
		case n - 1000:
			atEnd = heapAfterGC()
		}
	}
	if got != n {
		t.Fatalf("%d results for %d tasks", got, n)
	}
	margin := uint64(64 * (n - 1000 - early))
	t.Logf("live heap at result %d: %d KB; at result %d: %d KB", early, atEarly>>10, n-1000, atEnd>>10)
	if atEnd > atEarly+margin {
		t.Errorf("live heap grew from %d KB at result %d to %d KB at result %d: memory grows with the batch",
			atEarly>>10, early, atEnd>>10, n-1000)
	}
}

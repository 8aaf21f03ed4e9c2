package dispatch_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/broker/membroker"
	"github.com/svc-dev/svc/dispatch"
	"github.com/svc-dev/svc/internal/testutil"
)

// A streamed gather on a publisher dispatches its tasks to the fleet the
// way a plain gather does, within the same bounded window: never more
// than max_concurrency tasks on the workers, and the tasks read no further
// ahead than the window. Ending it cancels what the workers run.
func TestStreamedGatherOverTheFleet(t *testing.T) {
	b := membroker.New()
	t.Cleanup(func() { _ = b.Close() })
	echo := svc.Agent{Name: "echo", Model: "test:echo"}
	slow := svc.Agent{Name: "slow", Model: "test:echo", ModelSettings: map[string]any{"latency_ms": 60_000}}
	w := fleet(t, b, echo, slow)
	rt, _ := publisherRuntime(t, dispatch.Config{Broker: b}, echo, slow)

	const n, conc = 300, 8
	window := int64(conc + svc.ReadAhead(conc))
	var read atomic.Int64
	tasks := func(yield func(svc.TaskSpec) bool) {
		for i := range n {
			read.Add(1)
			if !yield(svc.TaskSpec{Input: json.RawMessage(strconv.Itoa(i))}) {
				return
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	seen := map[int]bool{}
	maxOnWorker := 0
	for item, err := range rt.GatherStream(ctx, "echo", tasks, conc) {
		if err != nil {
			t.Fatalf("GatherStream: %v", err)
		}
		r := item.Result
		if !r.Success || string(r.Output) != strconv.Itoa(item.Index) || r.Metadata.Backend != "broker:memory" || seen[item.Index] {
			t.Fatalf("result %d = %+v (seen before: %v)", item.Index, r, seen[item.Index])
		}
		seen[item.Index] = true
		maxOnWorker = max(maxOnWorker, w.InFlight())
		// The window, one more waiting for its credit, and those taken.
		if got := read.Load(); got > window+1+int64(len(seen)) {
			t.Fatalf("read %d tasks with %d results taken: past the window of %d", got, len(seen), window)
		}
	}
	if len(seen) != n {
		t.Fatalf("%d results for %d tasks", len(seen), n)
	}
	if maxOnWorker > conc {
		t.Errorf("%d tasks on the worker at once, max_concurrency %d", maxOnWorker, conc)
	}

	// Cancelled: the tasks on the worker are cancelled there too.
	ctx2, cancel2 := context.WithCancel(ctx)
	go func() {
		testutil.Eventually(t, "the worker to run the batch", func() bool { return w.InFlight() == conc })
		cancel2()
	}()
	var last error
	for _, err := range rt.GatherStream(ctx2, "slow", func(yield func(svc.TaskSpec) bool) {
		for yield(svc.TaskSpec{Input: json.RawMessage(`1`)}) {
		}
	}, conc) {
		if err != nil {
			last = err
		}
	}
	if !errors.Is(last, svc.ErrCancelled) {
		t.Errorf("cancelled stream ended with %v, want a CancelledError", last)
	}
	testutil.Eventually(t, "the worker to stop the cancelled tasks", func() bool { return w.InFlight() == 0 })
}

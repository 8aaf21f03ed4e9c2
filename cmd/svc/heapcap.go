package main

import (
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"
)

// heapHeadroom caps how far past the live heap svc serve lets its heap grow
// between collections: GOGC 400 lets a heap grow to five times what is live,
// which under load costs little (a live heap of 30-40 MiB), but 2,000
// stalled event stream clients or a gather of 87,000 tasks make 60-100 MiB
// live for a moment, and five times that stayed resident long after they
// had gone (issue 25). The heap may still grow to twice what is live
// whatever the headroom (Go's default, GOGC 100), so that a large live
// heap is not collected more often than Go would.
const heapHeadroom = 128 << 20

// Timing of the heap cap's watch.
const (
	// heapCapTick is how often the cap follows the live heap: a burst
	// fills the old goal for at most this long before the cap tightens.
	heapCapTick = 250 * time.Millisecond
	// quietWindow is how long the process must allocate less than
	// quietAllocs before what it retains beyond its live heap is
	// returned to the OS (debug.FreeOSMemory).
	quietWindow = 5 * time.Second
	quietAllocs = 8 << 20
	// burstAllocs is how much the process must have allocated since it
	// last returned memory for a quiet spell to return it again: one
	// collection a burst, none for an idle server.
	burstAllocs = 64 << 20
)

// heapCap keeps svc serve's soft memory limit at what the live heap needs
// (see heapHeadroom) and, once the process has gone quiet after a burst,
// returns the memory the burst left to the OS: without a collection (an
// idle server runs one every two minutes) the garbage of the burst stays
// resident, and the runtime returns free memory slowly.
type heapCap struct {
	percent  int   // the GC percent in force
	maxLimit int64 // the limit never goes above it (the memory available's share)

	stop chan struct{}
	done chan struct{}
	once sync.Once

	samples []metrics.Sample
	limit   int64 // the limit last set

}

// The runtime/metrics the cap reads, in this order.
var heapCapMetrics = []string{
	"/gc/heap/live:bytes",
	"/gc/heap/allocs:bytes",
	"/memory/classes/total:bytes",
	"/memory/classes/heap/released:bytes",
	"/memory/classes/heap/free:bytes",
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/heap/unused:bytes",
}

// startHeapCap starts the cap's goroutine; the returned function stops it
// and waits for it.
func startHeapCap(percent int, maxLimit int64) func() {
	h := &heapCap{percent: percent, maxLimit: maxLimit, stop: make(chan struct{}), done: make(chan struct{})}
	h.samples = make([]metrics.Sample, len(heapCapMetrics))
	for i, name := range heapCapMetrics {
		h.samples[i].Name = name
	}
	go h.run()
	return func() {
		h.once.Do(func() { close(h.stop) })
		<-h.done
	}
}

func (h *heapCap) run() {
	defer close(h.done)
	tick := time.NewTicker(heapCapTick)
	defer tick.Stop()
	var quietSince time.Time
	var lastAllocs, releasedAt uint64
	for {
		select {
		case <-h.stop:
			return
		case now := <-tick.C:
			live, allocs, other := h.read()
			h.setLimit(live, other)
			// Quiet: few allocations since the last tick, for a while.
			if allocs-lastAllocs > quietAllocs*uint64(heapCapTick)/uint64(quietWindow) {
				quietSince = time.Time{}
			} else if quietSince.IsZero() {
				quietSince = now
			}
			lastAllocs = allocs
			// The live heap of the last collection, taken during the
			// burst, says nothing of what is garbage now: a quiet spell
			// after enough allocation is what tells a burst has ended.
			if !quietSince.IsZero() && now.Sub(quietSince) >= quietWindow && allocs-releasedAt >= burstAllocs {
				debug.FreeOSMemory()
				releasedAt = allocs
				quietSince = time.Time{}
			}
		}
	}
}

// read returns the live heap at the last collection, the bytes allocated
// so far, and the runtime's memory besides the heap (stacks, metadata), in
// bytes.
func (h *heapCap) read() (live, allocs uint64, other int64) {
	metrics.Read(h.samples)
	v := func(i int) uint64 {
		if h.samples[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return h.samples[i].Value.Uint64()
	}
	live, allocs = v(0), v(1)
	total, released := int64(v(2)), int64(v(3))
	heap := int64(v(4) + v(5) + v(6))
	return live, allocs, total - released - heap
}

// setLimit sets the soft memory limit to the heap goal that live allows
// (heapGoal) plus the runtime's other memory, within maxLimit.
func (h *heapCap) setLimit(live uint64, other int64) {
	limit := min(other+heapGoal(int64(live), h.percent), h.maxLimit)
	// Moves of less than a MiB are not worth the runtime's lock.
	if d := limit - h.limit; d > 1<<20 || d < -1<<20 {
		debug.SetMemoryLimit(limit)
		h.limit = limit
	}
}

// heapGoal is the heap size a live heap of live bytes may grow to before
// the next collection: what GC percent allows, but no more than
// heapHeadroom past live, nor less than twice live. Go's smallest heap
// goal (4 MiB at GOGC 100) scales the floor.
func heapGoal(live int64, percent int) int64 {
	live = max(live, 4<<20)
	byPercent := live + live*int64(percent)/100
	return max(2*live, min(byPercent, live+heapHeadroom))
}

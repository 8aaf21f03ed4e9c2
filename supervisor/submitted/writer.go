package submitted

import (
	"context"
	"errors"
	"sync"

	"github.com/svc-dev/svc"
	"go.uber.org/zap"
)

// Writer takes a submitted run's events and progress from the actors
// without blocking them (an unbounded queue: nothing is dropped) and writes
// them to the store in order from one goroutine, which Close stops.
//
// A write the store refuses (RunStateError) means the run is terminal, as
// after a cancel: nothing more may be written, and the writer drops the
// rest. A write that fails after its retries stops the run (fail, with
// ErrStoreWrite as the cause), which then ends failed: a run whose history
// has a hole must not pass for complete.
// entry is one write of the queue: an event, or a step (with the channel
// its recorder waits on).
type entry struct {
	ev   svc.RunEvent
	step *svc.RunStep
	done chan struct{}
}

type Writer struct {
	r    *Recorder
	id   string
	fail context.CancelCauseFunc

	mu       sync.Mutex
	events   []entry
	prog     *svc.RunProgress
	closed   bool
	wake     chan struct{}
	finished chan struct{}
	full     bool // the step log is full: said once (writer goroutine only)
}

// NewWriter starts the writer of run id; fail cancels the run's work.
// The caller owns it and must Close it.
func (r *Recorder) NewWriter(id string, fail context.CancelCauseFunc) *Writer {
	w := &Writer{r: r, id: id, fail: fail, wake: make(chan struct{}, 1), finished: make(chan struct{})}
	go w.run()
	return w
}

func (w *Writer) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Event queues a run event.
func (w *Writer) Event(ev svc.RunEvent) {
	w.mu.Lock()
	if !w.closed {
		w.events = append(w.events, entry{ev: ev})
	}
	w.mu.Unlock()
	w.signal()
}

// Progress queues a progress update; only the latest is written.
func (w *Writer) Progress(p svc.RunProgress) {
	w.mu.Lock()
	if !w.closed {
		w.prog = &p
	}
	w.mu.Unlock()
	w.signal()
}

// Step appends st to the run's step log after every event queued before
// it, and returns once it is written (or could not be: a step is not worth
// failing the run for; the log says why). Queued with the events, a step
// is never in the store ahead of the events of what led to it, and shares
// their group commit.
func (w *Writer) Step(st svc.RunStep) {
	done := make(chan struct{})
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.events = append(w.events, entry{step: &st, done: done})
	w.mu.Unlock()
	w.signal()
	<-done
}

// QueueStep is Step without the wait.
func (w *Writer) QueueStep(st svc.RunStep) {
	w.mu.Lock()
	if !w.closed {
		w.events = append(w.events, entry{step: &st})
	}
	w.mu.Unlock()
	w.signal()
}

// Close writes out what is queued and stops the goroutine.
func (w *Writer) Close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.signal()
	<-w.finished
}

func (w *Writer) run() {
	defer close(w.finished)
	r, id := w.r, w.id
	stopped := false // the store refused or failed a write: drop the rest
	for range w.wake {
		w.mu.Lock()
		evs, prog, closed := w.events, w.prog, w.closed
		w.events, w.prog = nil, nil
		w.mu.Unlock()
		if bw, ok := r.store.(svc.RunBatchWriter); ok {
			stopped = w.flush(bw, stopped, prog, evs)
			if closed {
				return
			}
			continue
		}
		if !stopped && prog != nil {
			stopped = w.check("set progress", r.SetProgress(id, *prog))
		}
		for _, e := range evs {
			switch {
			case e.step != nil:
				if !stopped {
					w.writeStep(e.step)
				}
				if e.done != nil {
					close(e.done)
				}
			case stopped:
			default:
				// A retry may store the event twice if the store applied
				// the first attempt but its answer was lost: a duplicate
				// is better than a hole.
				stopped = w.check("append event", r.Retry(id, "append event", func(c context.Context) error {
					_, err := r.store.Append(c, id, e.ev)
					return err
				}))
			}
		}
		if closed {
			return
		}
	}
}

// check handles the outcome of one write and reports whether the writer
// must stop writing.
func (w *Writer) check(op string, err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, svc.ErrRunState):
		return true // terminal (cancelled): nothing may follow
	}
	w.r.Failed(w.id, op, err)
	w.fail(ErrStoreWrite)
	return true
}

// writeStep appends one step. A failure does not stop the run: the step is
// only not recorded, and a resume pays for it again.
func (w *Writer) writeStep(st *svc.RunStep) {
	log, ok := w.r.store.(svc.StepLog)
	if !ok {
		return
	}
	err := w.r.Retry(w.id, "append step", func(c context.Context) error {
		_, err := log.AppendSteps(c, w.id, *st)
		return err
	})
	switch {
	case err == nil, errors.Is(err, svc.ErrRunState): // terminal: nothing to resume
	case svc.KindOf(err) == svc.KindPayloadTooLarge:
		if !w.full {
			w.full = true
			w.r.log.Warn("run's step log is full: later steps are not recorded, and a resume would pay for them again",
				zap.String("run_id", w.id), zap.Error(err))
		}
	default:
		w.r.log.Warn("run step not recorded: a resume would pay for it again", zap.String("run_id", w.id),
			zap.String("step", st.Key), zap.Error(err))
	}
}

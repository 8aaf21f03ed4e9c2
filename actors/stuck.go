package actors

import (
	"context"
	"errors"
	"sort"
	"sync"
	"time"

	"github.com/svc-dev/svc"
)

// DefaultAbandonAfter is how long a run waits, once an invocation's
// context has ended (its deadline, a cancel), for the invocation's attempt
// to notice and report, before it stops waiting and answers without it.
// An attempt that honours its context reports well within it, with its
// own outcome (tokens spent and all); one stuck in a call that ignores
// its context (a tool blocked in a system call, a model client with no
// timeout) is abandoned: its goroutine is left to return when it can and
// counted as stuck until then.
const DefaultAbandonAfter = 250 * time.Millisecond

// Attempt states (invState.state): who reports an attempt, its goroutine
// or the invocation actor that stopped waiting for it, is decided by one
// compare-and-swap from attemptRunning.
const (
	attemptIdle int32 = iota
	attemptRunning
	attemptDone
	attemptAbandoned
)

// abandonAttempt tells an invocation actor whose context has ended to stop
// waiting for its attempt.
type abandonAttempt struct{}

func (abandonAttempt) IgnoreDeadLetterLogging() {}

// reapTick wakes a run actor when a cancelled invocation's grace is over.
type reapTick struct{}

func (reapTick) IgnoreDeadLetterLogging() {}

// Stuck tracks the attempts that invocations abandoned and whose
// goroutines have not returned yet. Its hooks are called outside its lock,
// with the count after the change; they must not block.
type Stuck struct {
	mu    sync.Mutex
	calls map[*invState]svc.StuckCall

	// OnAbandon is called when an attempt is abandoned; OnReturn when an
	// abandoned attempt's goroutine returns, after how long.
	OnAbandon func(c svc.StuckCall, count int)
	OnReturn  func(c svc.StuckCall, after time.Duration, count int)
}

// Stats lists the abandoned calls still running, oldest first.
func (s *Stuck) Stats() svc.StuckStats {
	st := svc.StuckStats{Calls: []svc.StuckCall{}}
	if s == nil {
		return st
	}
	s.mu.Lock()
	for _, c := range s.calls {
		st.Calls = append(st.Calls, c)
	}
	s.mu.Unlock()
	sort.Slice(st.Calls, func(i, j int) bool { return st.Calls[i].AbandonedAt.Before(st.Calls[j].AbandonedAt) })
	st.Count = len(st.Calls)
	return st
}

func (s *Stuck) add(st *invState, c svc.StuckCall) {
	if s == nil {
		return
	}
	s.mu.Lock()
	if s.calls == nil {
		s.calls = map[*invState]svc.StuckCall{}
	}
	s.calls[st] = c
	n := len(s.calls)
	s.mu.Unlock()
	if s.OnAbandon != nil {
		s.OnAbandon(c, n)
	}
}

func (s *Stuck) remove(st *invState) {
	if s == nil {
		return
	}
	s.mu.Lock()
	c, ok := s.calls[st]
	delete(s.calls, st)
	n := len(s.calls)
	s.mu.Unlock()
	if ok && s.OnReturn != nil {
		s.OnReturn(c, time.Since(c.AbandonedAt), n)
	}
}

// reasonOf names the end of an invocation's context for a StuckCall.
func reasonOf(cause error) string {
	switch {
	case errors.Is(cause, svc.ErrShuttingDown):
		return "shutting_down"
	case errors.Is(cause, context.DeadlineExceeded):
		return "timeout"
	}
	return "cancelled"
}

// abandoned is the error of an abandoned attempt: the context's end, with
// the call that did not return.
type abandoned struct {
	call svc.StuckCall
	err  error
}

func (e *abandoned) Error() string {
	return e.err.Error() + "; " + e.call.Kind + " " + e.call.Name + " did not return and was abandoned"
}

func (e *abandoned) Unwrap() error { return e.err }

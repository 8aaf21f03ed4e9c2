// Package faultstore wraps a svc.RunStore so that chosen methods fail on
// demand, for tests of what callers do with store errors. It imports no
// testing package, so tests of any package may use it.
package faultstore

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/svc-dev/svc"
)

// Method names a store method that can be made to fail.
type Method string

// The methods of svc.RunStore and svc.IdempotentStore.
const (
	Create           Method = "Create"
	CreateIdempotent Method = "CreateIdempotent"
	Get              Method = "Get"
	SetState         Method = "SetState"
	SetProgress      Method = "SetProgress"
	SetResult        Method = "SetResult"
	Append           Method = "Append"
	Events           Method = "Events"
	Stream           Method = "Stream"
	Interrupt        Method = "Interrupt"
	Finish           Method = "Finish"
	// The methods of svc.StepLog and svc.ResumableStore (Resumable).
	AppendSteps Method = "AppendSteps"
	Steps       Method = "Steps"
	Recover     Method = "Recover"
)

// ErrFault is the transient-looking error Fail injects when given nil: an
// AgentRuntimeError, as a store reports a lost connection or a busy file.
var ErrFault = svc.Errorf(svc.KindRuntime, "faultstore: injected fault")

// Store is a svc.IdempotentStore over another store. CreateIdempotent fails
// with a RuntimeError when the inner store is not an IdempotentStore.
type Store struct {
	inner svc.RunStore

	mu     sync.Mutex
	faults []*fault
	calls  map[Method]int
	failed map[Method]int
}

type fault struct {
	m     Method
	n     int // calls left to fail; < 0: all
	err   error
	state svc.RunState // for SetState: fail only moves to this state ("" any)
}

var _ svc.IdempotentStore = (*Store)(nil)

// New wraps inner.
func New(inner svc.RunStore) *Store {
	return &Store{inner: inner, calls: map[Method]int{}, failed: map[Method]int{}}
}

// Fail makes the next n calls of m fail with err (ErrFault when nil), without
// reaching the inner store; n < 0 fails every later call.
func (s *Store) Fail(m Method, n int, err error) { s.add(&fault{m: m, n: n, err: err}) }

// FailState is Fail for the calls that move a run to next: SetState and
// Finish.
func (s *Store) FailState(next svc.RunState, n int, err error) {
	s.add(&fault{m: SetState, n: n, err: err, state: next})
}

// Heal removes every fault.
func (s *Store) Heal() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = nil
}

func (s *Store) add(f *fault) {
	if f.err == nil {
		f.err = ErrFault
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, f)
}

// Calls is how many calls of m were made, failed or not.
func (s *Store) Calls(m Method) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[m]
}

// Failed is how many calls of m were failed by a fault.
func (s *Store) Failed(m Method) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failed[m]
}

// check counts a call and returns the fault's error if one applies.
func (s *Store) check(m Method, state svc.RunState) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[m]++
	for _, f := range s.faults {
		move := f.m == SetState && f.state != "" && m == Finish // FailState covers Finish
		if (f.m != m && !move) || f.n == 0 || (f.state != "" && f.state != state) {
			continue
		}
		if f.n > 0 {
			f.n--
		}
		s.failed[m]++
		return f.err
	}
	return nil
}

// Inner is the wrapped store.
func (s *Store) Inner() svc.RunStore { return s.inner }

// Create implements svc.RunStore.
func (s *Store) Create(ctx context.Context, rec svc.RunRecord) error {
	if err := s.check(Create, ""); err != nil {
		return err
	}
	return s.inner.Create(ctx, rec)
}

// CreateIdempotent implements svc.IdempotentStore.
func (s *Store) CreateIdempotent(ctx context.Context, key, fingerprint string, rec svc.RunRecord, ttl time.Duration) (string, bool, error) {
	if err := s.check(CreateIdempotent, ""); err != nil {
		return "", false, err
	}
	is, ok := s.inner.(svc.IdempotentStore)
	if !ok {
		return "", false, svc.Errorf(svc.KindRuntime, "faultstore: %T keeps no Idempotency-Keys", s.inner)
	}
	return is.CreateIdempotent(ctx, key, fingerprint, rec, ttl)
}

// Get implements svc.RunStore.
func (s *Store) Get(ctx context.Context, runID string) (svc.RunRecord, error) {
	if err := s.check(Get, ""); err != nil {
		return svc.RunRecord{}, err
	}
	return s.inner.Get(ctx, runID)
}

// SetState implements svc.RunStore.
func (s *Store) SetState(ctx context.Context, runID string, next svc.RunState, reason string, final *svc.RunEvent) error {
	if err := s.check(SetState, next); err != nil {
		return err
	}
	return s.inner.SetState(ctx, runID, next, reason, final)
}

// Finish implements svc.RunStore; its faults are matched by next, as
// SetState's are.
func (s *Store) Finish(ctx context.Context, runID string, next svc.RunState, reason string, result json.RawMessage, final *svc.RunEvent) error {
	if err := s.check(Finish, next); err != nil {
		return err
	}
	return s.inner.Finish(ctx, runID, next, reason, result, final)
}

// SetProgress implements svc.RunStore.
func (s *Store) SetProgress(ctx context.Context, runID string, p svc.RunProgress) error {
	if err := s.check(SetProgress, ""); err != nil {
		return err
	}
	return s.inner.SetProgress(ctx, runID, p)
}

// SetResult implements svc.RunStore.
func (s *Store) SetResult(ctx context.Context, runID string, result json.RawMessage) error {
	if err := s.check(SetResult, ""); err != nil {
		return err
	}
	return s.inner.SetResult(ctx, runID, result)
}

// Append implements svc.RunStore.
func (s *Store) Append(ctx context.Context, runID string, ev svc.RunEvent) (int64, error) {
	if err := s.check(Append, ""); err != nil {
		return 0, err
	}
	return s.inner.Append(ctx, runID, ev)
}

// Events implements svc.RunStore.
func (s *Store) Events(ctx context.Context, runID string, after int64) ([]svc.RunEvent, error) {
	if err := s.check(Events, ""); err != nil {
		return nil, err
	}
	return s.inner.Events(ctx, runID, after)
}

// Stream implements svc.RunStore.
func (s *Store) Stream(ctx context.Context, runID string, after int64) (<-chan svc.RunEvent, error) {
	if err := s.check(Stream, ""); err != nil {
		return nil, err
	}
	return s.inner.Stream(ctx, runID, after)
}

// Interrupt implements svc.RunStore.
func (s *Store) Interrupt(ctx context.Context) (int, error) {
	if err := s.check(Interrupt, ""); err != nil {
		return 0, err
	}
	return s.inner.Interrupt(ctx)
}

// Close closes the inner store.
func (s *Store) Close() error { return s.inner.Close() }

// Resumable is a Store over a svc.ResumableStore that is one too, so a
// runtime resumes through it; its StepLog and Recover calls fail on demand
// like the others. (Store is not one: a runtime over it interrupts, as
// over any store that does not resume.)
type Resumable struct {
	*Store
	inner svc.ResumableStore
}

var _ svc.ResumableStore = (*Resumable)(nil)

// NewResumable wraps inner.
func NewResumable(inner svc.ResumableStore) *Resumable {
	return &Resumable{Store: New(inner), inner: inner}
}

// AppendSteps implements svc.StepLog.
func (s *Resumable) AppendSteps(ctx context.Context, runID string, steps ...svc.RunStep) (int64, error) {
	if err := s.check(AppendSteps, ""); err != nil {
		return 0, err
	}
	return s.inner.AppendSteps(ctx, runID, steps...)
}

// Steps implements svc.StepLog.
func (s *Resumable) Steps(ctx context.Context, runID string, after int64) ([]svc.RunStep, error) {
	if err := s.check(Steps, ""); err != nil {
		return nil, err
	}
	return s.inner.Steps(ctx, runID, after)
}

// MaxStepBytes implements svc.StepLog; it never fails.
func (s *Resumable) MaxStepBytes() int64 { return s.inner.MaxStepBytes() }

// Recover implements svc.ResumableStore.
func (s *Resumable) Recover(ctx context.Context) ([]svc.RunRecord, int, error) {
	if err := s.check(Recover, ""); err != nil {
		return nil, 0, err
	}
	return s.inner.Recover(ctx)
}

// Package memstore is the in-memory svc.RunStore: one mutex over a map of
// runs, each with its event slice. It keeps nothing across restarts, so it
// suits tests and single-process deployments that do not need durability.
//
// Streams run the stores' one follow loop (stores/internal/follow), woken
// by a per-run notification channel that every change closes and replaces
// (a broadcast), so a stream wakes only when its run changed: no polling,
// and no goroutine per append.
//
// ListRuns filters and sorts all the runs on every page, O(n log n) for n
// runs: no index to keep, and cheap at the sizes an in-memory store holds.
package memstore

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"sync"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/stores/internal/follow"
	"github.com/svc-dev/svc/stores/internal/runlist"
)

// Store is an in-memory svc.RunStore. The zero value is not usable; call New.
type Store struct {
	mu     sync.Mutex
	runs   map[string]*run
	closed bool
	done   chan struct{} // closed by Close, ends every stream
	// streams counts live stream goroutines so Close can wait for them.
	streams sync.WaitGroup
	// idem holds the Idempotency-Keys; see CreateIdempotent.
	idem map[string]idemEntry
	// maxStepBytes bounds each run's step log (svc.StepLog).
	maxStepBytes int64
	// batches are the svc.BatchStore half (batches.go).
	batches batches
	// webhooks are the svc.WebhookStore half (webhooks.go).
	webhooks webhooks
}

type idemEntry struct {
	fingerprint, runID string
	expires            time.Time
}

type run struct {
	rec svc.RunRecord
	// events[i] has Seq i+1. Elements are never rewritten once appended, so
	// a stream may read a prefix of the slice after releasing the lock.
	events []svc.RunEvent
	// changed is closed and replaced whenever events are appended or the
	// state changes, waking every stream of the run at once.
	changed chan struct{}
	// watched says a stream holds changed; without one, a change need not
	// replace it (appends with nobody streaming allocate nothing for it).
	watched bool
	// steps is the run's step log, steps[i] with Seq i+1; stepBytes is the
	// sum of their Size, checked against the store's bound.
	steps     []svc.RunStep
	stepBytes int64
}

var (
	_ svc.RunStore        = (*Store)(nil)
	_ svc.RunLister       = (*Store)(nil)
	_ svc.IdempotentStore = (*Store)(nil)
	_ svc.StepLog         = (*Store)(nil)
	_ svc.ResumableStore  = (*Store)(nil)
)

// Options tune NewWith; the zero value is New's defaults.
type Options struct {
	// MaxStepBytes bounds each run's step log; 0 means
	// svc.DefaultMaxStepBytes.
	MaxStepBytes int64
}

// New returns an empty store.
func New() *Store { return NewWith(Options{}) }

// NewWith returns an empty store tuned by opts.
func NewWith(opts Options) *Store {
	if opts.MaxStepBytes <= 0 {
		opts.MaxStepBytes = svc.DefaultMaxStepBytes
	}
	return &Store{runs: map[string]*run{}, done: make(chan struct{}), idem: map[string]idemEntry{},
		maxStepBytes: opts.MaxStepBytes}
}

// Create registers a new pending run; see svc.RunStore.
func (s *Store) Create(_ context.Context, rec svc.RunRecord) error {
	if rec.RunID == "" {
		return svc.Errorf(svc.KindSpecValidation, "memstore: empty run id")
	}
	if err := svc.CheckTask(rec.RunID, rec.Task); err != nil {
		return err
	}
	created := now()
	if !rec.CreatedAt.IsZero() {
		created = normTime(rec.CreatedAt)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed()
	}
	return s.create(rec, created)
}

// create adds a pending run; s.mu is held.
func (s *Store) create(rec svc.RunRecord, created time.Time) error {
	if len(rec.Task) == 0 {
		rec.Task = nil
	}
	if r, ok := s.runs[rec.RunID]; ok {
		return svc.Errorf(svc.KindRunState, "memstore: run %q already exists (%s)", rec.RunID, r.rec.State)
	}
	s.runs[rec.RunID] = &run{
		rec: svc.RunRecord{
			RunID: rec.RunID, Target: rec.Target, Kind: rec.Kind, TraceID: rec.TraceID, Tenant: rec.Tenant, State: svc.RunPending,
			Task: cloneBytes(rec.Task), CreatedAt: created, UpdatedAt: created,
		},
		changed: make(chan struct{}),
	}
	return nil
}

// CreateIdempotent reserves key and creates rec under one lock; see
// svc.IdempotentStore. At svc.MaxIdempotencyKeys live keys it drops the
// expired ones, then the oldest.
func (s *Store) CreateIdempotent(_ context.Context, key, fingerprint string, rec svc.RunRecord, ttl time.Duration) (string, bool, error) {
	if rec.RunID == "" {
		return "", false, svc.Errorf(svc.KindSpecValidation, "memstore: empty run id")
	}
	if err := svc.CheckTask(rec.RunID, rec.Task); err != nil {
		return "", false, err
	}
	if ttl <= 0 {
		ttl = svc.DefaultIdempotencyTTL
	}
	t := time.Now()
	created := normTime(t)
	if !rec.CreatedAt.IsZero() {
		created = normTime(rec.CreatedAt)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return "", false, errClosed()
	}
	if e, ok := s.idem[key]; ok && t.Before(e.expires) {
		if e.fingerprint != fingerprint {
			return "", false, svc.IdempotencyConflict(key, e.runID)
		}
		return e.runID, false, nil
	}
	if err := s.create(rec, created); err != nil {
		return "", false, err
	}
	if _, ok := s.idem[key]; !ok && len(s.idem) >= svc.MaxIdempotencyKeys {
		s.evictKeys(t)
	}
	s.idem[key] = idemEntry{fingerprint: fingerprint, runID: rec.RunID, expires: t.Add(ttl)}
	return rec.RunID, true, nil
}

// evictKeys makes room for one key: it drops the expired keys, or else the
// oldest; s.mu is held. O(keys), paid only once the table is full.
func (s *Store) evictKeys(now time.Time) {
	oldest, first := "", time.Time{}
	for k, e := range s.idem {
		if !now.Before(e.expires) {
			delete(s.idem, k)
			continue
		}
		if oldest == "" || e.expires.Before(first) {
			oldest, first = k, e.expires
		}
	}
	if len(s.idem) >= svc.MaxIdempotencyKeys {
		delete(s.idem, oldest)
	}
}

// Get returns a copy of a run's record.
func (s *Store) Get(_ context.Context, runID string) (svc.RunRecord, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.lookup(runID)
	if err != nil {
		return svc.RunRecord{}, err
	}
	return r.record(), nil
}

// record is a copy of the run's record that shares no memory with it,
// with its step count; s.mu is held.
func (r *run) record() svc.RunRecord {
	rec := r.rec
	if rec.Progress != nil {
		p := *rec.Progress
		rec.Progress = &p
	}
	rec.Result = cloneBytes(rec.Result)
	rec.Task = cloneBytes(rec.Task)
	rec.Steps = int64(len(r.steps))
	if n := len(r.steps); n > 0 {
		last := r.steps[n-1]
		rec.CurrentStep = &svc.StepRef{Seq: last.Seq, Kind: last.Kind, Key: last.Key, At: last.Timestamp}
	}
	return rec
}

// SetState moves a run to next, appending final as its last event when not
// nil; see svc.RunStore.
func (s *Store) SetState(_ context.Context, runID string, next svc.RunState, reason string, final *svc.RunEvent) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.lookup(runID)
	if err != nil {
		return err
	}
	if !r.rec.State.CanMove(next) {
		return svc.Errorf(svc.KindRunState, "memstore: run %q is %s, cannot move to %q", runID, r.rec.State, next)
	}
	r.rec.State, r.rec.Reason, r.rec.UpdatedAt = next, reason, now()
	if final != nil {
		r.add(*final)
	}
	r.broadcast()
	return nil
}

// Finish ends a run under one lock: state, reason, result and final event;
// see svc.RunStore.
func (s *Store) Finish(_ context.Context, runID string, next svc.RunState, reason string, result json.RawMessage, final *svc.RunEvent) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.lookup(runID)
	if err != nil {
		return err
	}
	if !next.Terminal() || !r.rec.State.CanMove(next) {
		return svc.Errorf(svc.KindRunState, "memstore: run %q is %s, cannot finish as %q", runID, r.rec.State, next)
	}
	r.rec.State, r.rec.Reason, r.rec.UpdatedAt = next, reason, now()
	if result != nil {
		r.rec.Result = cloneBytes(result)
	}
	if final != nil {
		r.add(*final)
	}
	r.broadcast()
	return nil
}

// SetProgress replaces a run's progress.
func (s *Store) SetProgress(_ context.Context, runID string, p svc.RunProgress) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.live(runID, "progress")
	if err != nil {
		return err
	}
	r.rec.Progress, r.rec.UpdatedAt = &p, now()
	return nil
}

// SetResult stores a copy of a run's result.
func (s *Store) SetResult(_ context.Context, runID string, result json.RawMessage) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.live(runID, "a result")
	if err != nil {
		return err
	}
	r.rec.Result, r.rec.UpdatedAt = cloneBytes(result), now()
	return nil
}

// Append adds an event to a run that is not terminal and returns its Seq.
func (s *Store) Append(_ context.Context, runID string, ev svc.RunEvent) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.live(runID, "events")
	if err != nil {
		return 0, err
	}
	seq := r.add(ev)
	r.broadcast()
	return seq, nil
}

// AppendSteps adds steps to a run's step log under one lock; see
// svc.StepLog.
func (s *Store) AppendSteps(_ context.Context, runID string, steps ...svc.RunStep) (int64, error) {
	if err := svc.CheckSteps(steps); err != nil {
		return 0, err
	}
	var size int64
	for _, st := range steps {
		size += st.Size()
	}
	t := now()
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.live(runID, "steps")
	if err != nil {
		return 0, err
	}
	if r.stepBytes+size > s.maxStepBytes {
		return 0, svc.StepLogFull(runID, r.stepBytes, size, s.maxStepBytes)
	}
	for _, st := range steps {
		st.Seq = int64(len(r.steps)) + 1
		st.Data = cloneBytes(st.Data)
		if st.Timestamp.IsZero() {
			st.Timestamp = t
		} else {
			st.Timestamp = normTime(st.Timestamp)
		}
		r.steps = append(r.steps, st)
	}
	r.stepBytes += size
	return int64(len(r.steps)), nil
}

// Steps returns a copy of a run's steps with Seq > after; see svc.StepLog.
func (s *Store) Steps(_ context.Context, runID string, after int64) ([]svc.RunStep, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.lookup(runID)
	if err != nil {
		return nil, err
	}
	after = max(after, 0)
	if after >= int64(len(r.steps)) {
		return []svc.RunStep{}, nil
	}
	out := make([]svc.RunStep, 0, int64(len(r.steps))-after)
	for _, st := range r.steps[after:] {
		st.Data = cloneBytes(st.Data)
		out = append(out, st)
	}
	return out, nil
}

// MaxStepBytes is the bound of each run's step log; see svc.StepLog.
func (s *Store) MaxStepBytes() int64 { return s.maxStepBytes }

// Events returns a copy of a run's events with Seq > after.
func (s *Store) Events(_ context.Context, runID string, after int64) ([]svc.RunEvent, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.lookup(runID)
	if err != nil {
		return nil, err
	}
	return append([]svc.RunEvent(nil), r.since(after)...), nil
}

// Stream sends a run's events with Seq > after, then follows it until it is
// terminal, ctx ends or the store is closed; see svc.RunStore.
func (s *Store) Stream(ctx context.Context, runID string, after int64) (<-chan svc.RunEvent, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.lookup(runID)
	if err != nil {
		return nil, err
	}
	out := make(chan svc.RunEvent)
	s.streams.Add(1)
	go s.follow(ctx, r, after, out)
	return out, nil
}

func (s *Store) follow(ctx context.Context, r *run, after int64, out chan<- svc.RunEvent) {
	defer s.streams.Done()
	defer close(out)
	follow.Run(ctx, s.done, after, follow.Source{
		Arm: func() <-chan struct{} {
			s.mu.Lock()
			defer s.mu.Unlock()
			r.watched = true
			return r.changed
		},
		// The state and the events are read together: a terminal run has
		// no event left to send.
		Read: func(_ context.Context, after int64) ([]svc.RunEvent, bool, bool, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			return r.since(after), r.rec.State.Terminal(), false, nil
		},
	}, out)
}

// Interrupt fails every pending or running run with reason "interrupted",
// its failed result, progress and run_failed event, under one lock.
func (s *Store) Interrupt(_ context.Context) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, errClosed()
	}
	n, t := 0, now()
	for _, r := range s.runs {
		if r.rec.State.Terminal() || r.rec.State == svc.RunWaiting {
			continue // a waiting run holds nothing a process's death took
		}
		r.interrupt(t)
		n++
	}
	return n, nil
}

// interrupt fails an unfinished run as Interrupt does; s.mu is held.
func (r *run) interrupt(t time.Time) {
	r.rec.State, r.rec.Reason, r.rec.UpdatedAt = svc.RunFailed, svc.ReasonInterrupted, t
	r.rec.Result = svc.InterruptedResult(r.rec.Target)
	r.rec.Progress = svc.InterruptedProgress(r.rec.Progress)
	r.add(svc.InterruptedEvent(t))
	r.broadcast()
}

// Recover claims the unfinished runs that have a Task and fails the others
// as Interrupt does, under one lock; see svc.ResumableStore. A memory store
// keeps nothing across processes, so a fresh one recovers nothing: this
// serves a store a process reuses for a new runtime.
func (s *Store) Recover(_ context.Context) ([]svc.RunRecord, int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, 0, errClosed()
	}
	var claimed []svc.RunRecord
	n, t := 0, now()
	for _, r := range s.runs {
		switch {
		case r.rec.State.Terminal() || r.rec.State == svc.RunWaiting:
			continue
		case r.rec.Resumable():
			r.rec.Resumed++
			r.rec.UpdatedAt = t
			claimed = append(claimed, r.record())
			continue
		}
		r.interrupt(t)
		n++
	}
	svc.SortClaimed(claimed)
	return claimed, n, nil
}

// ListRuns returns a page of runs, newest first; see svc.RunLister and
// package runlist for the order and the cursor.
func (s *Store) ListRuns(_ context.Context, f svc.RunFilter) (svc.RunPage, error) {
	q, err := runlist.Parse("memstore", f)
	if err != nil {
		return svc.RunPage{}, err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return svc.RunPage{}, errClosed()
	}
	var rows []runlist.Row
	for _, r := range s.runs {
		if p := runlist.Of(&r.rec); q.Match(p, r.rec.State, r.rec.Tenant) {
			rows = append(rows, runlist.RowOf(&r.rec))
		}
	}
	s.mu.Unlock()
	slices.SortFunc(rows, func(a, b runlist.Row) int { return runlist.Compare(a.Pos, b.Pos) })
	return q.Page(rows[:min(len(rows), q.Fetch())]), nil
}

// Close ends every stream and waits for their goroutines; later calls are
// no-ops. Every other method fails once the store is closed.
// InMemory reports that the store does no I/O: its calls cannot hang, so
// callers need not bound them with timers.
func (s *Store) InMemory() bool { return true }

func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.done)
	s.mu.Unlock()
	s.streams.Wait()
	return nil
}

// lookup returns a run; s.mu is held.
func (s *Store) lookup(runID string) (*run, error) {
	if s.closed {
		return nil, errClosed()
	}
	r, ok := s.runs[runID]
	if !ok {
		return nil, svc.Errorf(svc.KindRegistry, "unknown run %q", runID)
	}
	return r, nil
}

// live returns a run that may still change; s.mu is held. what names the
// change refused for a terminal run.
func (s *Store) live(runID, what string) (*run, error) {
	r, err := s.lookup(runID)
	if err != nil {
		return nil, err
	}
	if r.rec.State.Terminal() {
		return nil, svc.Errorf(svc.KindRunState, "memstore: run %q is %s and takes no more %s", runID, r.rec.State, what)
	}
	return r, nil
}

// add appends ev with the next Seq and returns it.
func (r *run) add(ev svc.RunEvent) int64 {
	ev.Seq, ev.RunID = int64(len(r.events))+1, r.rec.RunID
	if ev.Timestamp.IsZero() {
		ev.Timestamp = now()
	} else {
		ev.Timestamp = normTime(ev.Timestamp)
	}
	r.events = append(r.events, ev)
	return ev.Seq
}

// since returns the events with Seq > after, sharing r.events.
func (r *run) since(after int64) []svc.RunEvent {
	after = max(after, 0)
	if after >= int64(len(r.events)) {
		return nil
	}
	return r.events[after:len(r.events):len(r.events)]
}

func (r *run) broadcast() {
	if !r.watched {
		return
	}
	close(r.changed)
	r.changed, r.watched = make(chan struct{}), false
}

// normTime keeps times in UTC to the microsecond, the precision every store
// guarantees, so switching stores never changes what callers read.
func normTime(t time.Time) time.Time { return t.Truncate(time.Microsecond).UTC() }

func now() time.Time { return normTime(time.Now()) }

func cloneBytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	return bytes.Clone(b)
}

func errClosed() error { return svc.Errorf(svc.KindShuttingDown, "memstore: store is closed") }

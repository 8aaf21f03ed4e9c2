// Package pebblestore is a svc.RunStore kept in a Pebble database, the pure-Go
// LSM of RocksDB lineage, in one directory owned by one process.
//
// Layout: "run/<id>" holds a run's record as JSON, "ev/<id>/<seq>" (seq
// zero-padded to 20 digits, so keys sort by sequence number) holds each of its
// events as JSON, "step/<id>/<seq>" its step log, and "task/<id>" the bytes
// of its Task (svc.RunRecord.Task), when it has one. Pebble has no transactions, so every change is a read, a
// check against the state machine and one Batch applied with Sync, all under
// the store's write lock: nothing interleaves between the check and the
// write. A call returns once its batch is fsynced, so an acknowledged change
// survives a crash. The writes of runs go through a commit queue
// (stores/internal/groupcommit): its writer applies every queued write in
// turn under the lock, without a sync, then one sync for all of them, and
// answers each caller after it; OpenWith with MaxBatch 1 turns it off.
//
// Pebble locks its directory, so the process that opened the store sees every
// write; Stream runs the stores' follow loop (stores/internal/follow): it
// replays the stored events and then follows in-process notifications
// rather than polling.
//
// ListRuns reads secondary indexes with empty values, written in the same
// batch as the record they index: "idx/created/<ts><id>" for every run and
// "idx/state/<state>/<ts><id>" for its current state, <ts> being the
// creation time in Unix microseconds as 8 big-endian bytes with the sign bit
// flipped (so keys sort by time, then by id). A page is one reverse
// iteration from the cursor's key plus a read of each listed record: it
// costs its own rows, with or without a state filter. "meta/index" says the
// indexes are complete; Open rebuilds them from the records when it is
// missing, so a database written before the indexes lists every run. (A
// build without the indexes writing to the database after that would leave
// its runs out; the marker cannot tell.)
package pebblestore

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/stores/internal/follow"
	"github.com/svc-dev/svc/stores/internal/groupcommit"
	"github.com/svc-dev/svc/stores/internal/runlist"
)

const (
	runPrefix = "run/"
	evPrefix  = "ev/"
	// stepPrefix holds a run's step log: step/<run id>/<seq>, laid out as
	// its events are, so a run's steps are one range.
	stepPrefix = "step/"
	// taskPrefix holds a run's Task: task/<run id>, written once at
	// Create. It is not in the record, which every write of the run
	// rewrites (an event's append included): the task would be rewritten
	// with it each time.
	taskPrefix = "task/"
	// idxPrefix starts every index key; idxCreated and idxState are the
	// two indexes ListRuns reads.
	idxPrefix  = "idx/"
	idxCreated = idxPrefix + "created/"
	idxState   = idxPrefix + "state/"
	// idemPrefix holds an Idempotency-Key's reservation, idemExpPrefix
	// the same keys ordered by expiry (<expiry in Unix microseconds, 8
	// big-endian bytes><key>), for the sweep and the bound.
	idemPrefix    = "idem/"
	idemExpPrefix = "idemexp/"
	// idemSweep bounds the expired keys one CreateIdempotent drops.
	idemSweep = 64
	// indexedKey marks the indexes complete (see the package doc).
	indexedKey = "meta/index"
	// rebuildBatch bounds the keys of one batch while rebuilding.
	rebuildBatch = 4096
	seqDigits    = 20 // enough for any int64
	// slowDisk is how long a write may take before pebble reports the disk
	// slow (pebble's own default).
	slowDisk = 5 * time.Second
)

// Store is a Pebble-backed svc.RunStore. It is safe for concurrent use.
type Store struct {
	db       *pebble.DB
	fsCloser io.Closer
	dir      string

	// mu serialises writers (read-check-write) against each other and lets
	// readers run together; Close takes it to flip closed, so no operation
	// touches db once Close has begun closing it.
	mu     sync.RWMutex
	closed bool
	done   chan struct{}  // closed by Close: stops Stream goroutines
	wg     sync.WaitGroup // Stream goroutines and writes waiting for fsync

	subMu sync.Mutex
	subs  map[string]map[*subscriber]struct{}

	// idemKeys counts the stored Idempotency-Keys (counted at Open), for
	// the bound; changed under mu.
	idemKeys int

	// q is the commit queue the writes of runs go through (nil when
	// Options.MaxBatch is 1: each write is applied and synced alone).
	q *groupcommit.Queue[prepareFunc]
	// syncs counts the fsyncs the writes waited for (Syncs).
	syncs atomic.Int64

	maxStepBytes int64 // Options.MaxStepBytes
}

// prepareFunc reads, checks and fills a batch under the write lock and
// names the runs it changes; see write.
type prepareFunc func(*pebble.Batch) ([]string, error)

// Options tune OpenWith; the zero value is Open's defaults.
type Options struct {
	// MaxBatch is the most writes of many callers that share one fsync
	// (groupcommit.DefaultMaxBatch when 0). 1 turns group commit off:
	// each write is applied with its own sync request, as before group
	// commit (the baseline of the benchmarks).
	MaxBatch int
	// Queue bounds the writes waiting for the writer
	// (groupcommit.DefaultQueue when 0).
	Queue int
	// MaxStepBytes bounds each run's step log (svc.DefaultMaxStepBytes
	// when 0).
	MaxStepBytes int64
}

// subscriber wakes one Stream goroutine; the buffer of one coalesces bursts
// so writers never block on a slow reader.
type subscriber struct{ wake chan struct{} }

var (
	_ svc.RunStore        = (*Store)(nil)
	_ svc.RunLister       = (*Store)(nil)
	_ svc.IdempotentStore = (*Store)(nil)
	_ svc.StepLog         = (*Store)(nil)
	_ svc.ResumableStore  = (*Store)(nil)
)

// Open opens (creating if needed) the store in directory dir. Only one Store
// may hold a directory at a time.
func Open(dir string) (*Store, error) { return OpenWith(dir, Options{}) }

// OpenWith is Open with options.
func OpenWith(dir string, opts Options) (*Store, error) {
	if dir == "" {
		return nil, svc.Errorf(svc.KindSpecValidation, "pebblestore: empty directory")
	}
	// The disk-health wrapper is pebble's default FS, built here because
	// pebble leaks its ticker goroutine when Open fails; the store closes it.
	fs, fsCloser := vfs.WithDiskHealthChecks(vfs.Default, slowDisk, nil, func(info vfs.DiskSlowInfo) {
		pebble.DefaultLogger.Errorf("pebblestore: slow disk under %q: %s", dir, info)
	})
	db, err := pebble.Open(dir, &pebble.Options{FS: fs, Logger: quietLogger{}})
	if err != nil {
		_ = fsCloser.Close()
		return nil, svc.Wrap(svc.KindRuntime, err, fmt.Sprintf("pebblestore: open %q", dir))
	}
	if err := ensureIndexes(db); err != nil {
		_ = db.Close()
		_ = fsCloser.Close()
		return nil, svc.Wrap(svc.KindRuntime, err, fmt.Sprintf("pebblestore: open %q: index runs", dir))
	}
	keys, err := countPrefix(db, idemPrefix)
	if err != nil {
		_ = db.Close()
		_ = fsCloser.Close()
		return nil, svc.Wrap(svc.KindRuntime, err, fmt.Sprintf("pebblestore: open %q: count idempotency keys", dir))
	}
	s := &Store{db: db, fsCloser: fsCloser, dir: dir, done: make(chan struct{}),
		subs: map[string]map[*subscriber]struct{}{}, idemKeys: keys, maxStepBytes: opts.MaxStepBytes}
	if s.maxStepBytes <= 0 {
		s.maxStepBytes = svc.DefaultMaxStepBytes
	}
	if opts.MaxBatch != 1 {
		s.q = groupcommit.New(groupcommit.Options{MaxBatch: opts.MaxBatch, Queue: opts.Queue}, s.commit, errClosed)
	}
	return s, nil
}

func countPrefix(db *pebble.DB, prefix string) (int, error) {
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte(prefix), UpperBound: prefixEnd(prefix)})
	if err != nil {
		return 0, err
	}
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	return n, it.Close()
}

// Syncs is how many fsyncs the writes of runs have waited for since Open:
// with group commit, fewer than the writes.
func (s *Store) Syncs() int64 { return s.syncs.Load() }

// Dir is the directory the store was opened on.
func (s *Store) Dir() string { return s.dir }

// Close stops every Stream, waits for their goroutines and closes the
// database. A second Close returns nil.
func (s *Store) Close() error {
	if s.q != nil {
		s.q.Close() // commits what was queued before the close
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.done)
	s.mu.Unlock()
	// Stream goroutines read the database and writers may still wait for
	// their fsync; pebble must not be closed under either.
	s.wg.Wait()
	err := s.db.Close()
	_ = s.fsCloser.Close()
	if err != nil {
		return svc.Wrap(svc.KindRuntime, err, fmt.Sprintf("pebblestore: close %q", s.dir))
	}
	return nil
}

// Create registers rec as a new pending run.
func (s *Store) Create(ctx context.Context, rec svc.RunRecord) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if rec.RunID == "" {
		return svc.Errorf(svc.KindSpecValidation, "pebblestore: run id is empty")
	}
	if err := svc.CheckTask(rec.RunID, rec.Task); err != nil {
		return err
	}
	if rec.CreatedAt.IsZero() {
		rec.CreatedAt = time.Now()
	}
	// A new run starts bare whatever the caller filled in.
	rec = svc.RunRecord{RunID: rec.RunID, Target: rec.Target, Kind: rec.Kind, TraceID: rec.TraceID, Tenant: rec.Tenant, State: svc.RunPending,
		Task: rec.Task, CreatedAt: rec.CreatedAt.UTC(), UpdatedAt: rec.CreatedAt.UTC()}
	return s.group(ctx, func(b *pebble.Batch) ([]string, error) {
		switch _, err := s.load(rec.RunID); {
		case err == nil:
			return nil, svc.Errorf(svc.KindRunState, "run %q already exists", rec.RunID)
		case !errors.Is(err, svc.ErrRegistry):
			return nil, err
		}
		if err := putNew(b, &rec); err != nil {
			return nil, err
		}
		return []string{rec.RunID}, nil
	})
}

// idemJSON is the stored reservation of an Idempotency-Key.
type idemJSON struct {
	Fingerprint string `json:"fp"`
	RunID       string `json:"run_id"`
	Expires     int64  `json:"expires_us"`
}

// CreateIdempotent reserves key and creates rec in one batch, the check
// and the batch under the write lock; see svc.IdempotentStore. Each call
// also drops up to idemSweep expired keys, and the oldest keys past
// svc.MaxIdempotencyKeys.
func (s *Store) CreateIdempotent(ctx context.Context, key, fingerprint string, rec svc.RunRecord, ttl time.Duration) (string, bool, error) {
	if err := ctx.Err(); err != nil {
		return "", false, err
	}
	if rec.RunID == "" {
		return "", false, svc.Errorf(svc.KindSpecValidation, "pebblestore: run id is empty")
	}
	if err := svc.CheckTask(rec.RunID, rec.Task); err != nil {
		return "", false, err
	}
	if ttl <= 0 {
		ttl = svc.DefaultIdempotencyTTL
	}
	now := time.Now()
	if rec.CreatedAt.IsZero() {
		rec.CreatedAt = now
	}
	rec = svc.RunRecord{RunID: rec.RunID, Target: rec.Target, Kind: rec.Kind, TraceID: rec.TraceID, Tenant: rec.Tenant, State: svc.RunPending,
		Task: rec.Task, CreatedAt: rec.CreatedAt.UTC(), UpdatedAt: rec.CreatedAt.UTC()}
	var (
		held  string
		delta int
	)
	err := s.write(ctx, func(b *pebble.Batch) ([]string, error) {
		delta = 0
		old, err := s.loadIdem(key)
		if err != nil {
			return nil, err
		}
		if old != nil && old.Expires > now.UnixMicro() {
			if old.Fingerprint != fingerprint {
				return nil, svc.IdempotencyConflict(key, old.RunID)
			}
			held = old.RunID
			return nil, nil // nothing to write
		}
		switch _, err := s.load(rec.RunID); {
		case err == nil:
			return nil, svc.Errorf(svc.KindRunState, "run %q already exists", rec.RunID)
		case !errors.Is(err, svc.ErrRegistry):
			return nil, err
		}
		if err := putNew(b, &rec); err != nil {
			return nil, err
		}
		if old != nil {
			if err := b.Delete(idemExpKey(old.Expires, key), nil); err != nil {
				return nil, err
			}
		} else {
			delta = 1
		}
		e := idemJSON{Fingerprint: fingerprint, RunID: rec.RunID, Expires: now.Add(ttl).UnixMicro()}
		v, err := json.Marshal(e)
		if err != nil {
			return nil, err
		}
		if err := b.Set([]byte(idemPrefix+key), v, nil); err != nil {
			return nil, err
		}
		if err := b.Set(idemExpKey(e.Expires, key), nil, nil); err != nil {
			return nil, err
		}
		dropped, err := s.sweepIdem(b, now.UnixMicro(), s.idemKeys+delta-svc.MaxIdempotencyKeys, key)
		delta -= dropped
		// Counted here, under the lock, with the batch about to be
		// applied; a failed apply leaves the count a little high, which
		// only makes the bound evict a little early.
		s.idemKeys += delta
		return []string{rec.RunID}, err
	})
	if err != nil {
		return "", false, err
	}
	if held != "" {
		return held, false, nil
	}
	return rec.RunID, true, nil
}

// sweepIdem adds to b the deletion of up to idemSweep expired keys and of
// the excess oldest keys beyond them, never skip (the key being reserved);
// the caller holds mu. It returns how many keys it deleted.
func (s *Store) sweepIdem(b *pebble.Batch, nowUS int64, excess int, skip string) (int, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte(idemExpPrefix), UpperBound: prefixEnd(idemExpPrefix)})
	if err != nil {
		return 0, err
	}
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if len(k) < len(idemExpPrefix)+8 {
			continue
		}
		exp := int64(binary.BigEndian.Uint64(k[len(idemExpPrefix):]) ^ (1 << 63))
		key := string(k[len(idemExpPrefix)+8:])
		expired := exp <= nowUS && n < idemSweep
		if !expired && n >= excess {
			break
		}
		if key == skip {
			continue // replaced in this batch
		}
		if err := b.Delete([]byte(idemPrefix+key), nil); err != nil {
			_ = it.Close()
			return n, err
		}
		if err := b.Delete(slices.Clone(k), nil); err != nil {
			_ = it.Close()
			return n, err
		}
		n++
	}
	return n, it.Close()
}

// loadIdem reads key's reservation, nil when there is none; the caller
// holds mu.
func (s *Store) loadIdem(key string) (*idemJSON, error) {
	v, closer, err := s.db.Get([]byte(idemPrefix + key))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, svc.Wrap(svc.KindRuntime, err, fmt.Sprintf("pebblestore: read Idempotency-Key %q", key))
	}
	defer closer.Close()
	var e idemJSON
	if err := json.Unmarshal(v, &e); err != nil {
		return nil, svc.Wrap(svc.KindRuntime, err, fmt.Sprintf("pebblestore: decode Idempotency-Key %q", key))
	}
	return &e, nil
}

func idemExpKey(expUS int64, key string) []byte {
	k := make([]byte, 0, len(idemExpPrefix)+8+len(key))
	k = append(k, idemExpPrefix...)
	k = binary.BigEndian.AppendUint64(k, uint64(expUS)^(1<<63))
	return append(k, key...)
}

// Get returns the record of runID.
func (s *Store) Get(ctx context.Context, runID string) (svc.RunRecord, error) {
	if err := ctx.Err(); err != nil {
		return svc.RunRecord{}, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return svc.RunRecord{}, errClosed()
	}
	st, err := s.load(runID)
	if err != nil {
		return svc.RunRecord{}, err
	}
	if st.Task, err = s.loadTask(runID); err != nil {
		return svc.RunRecord{}, err
	}
	if st.StepSeq > 0 {
		last, err := scanSeq[stepJSON](s.db, stepPrefix, runID, st.StepSeq-1, "step")
		if err != nil {
			return svc.RunRecord{}, err
		}
		if len(last) > 0 {
			j := last[0]
			st.CurrentStep = &svc.StepRef{Seq: j.Seq, Kind: j.Kind, Key: j.Key, At: j.Timestamp.UTC()}
		}
	}
	return st.RunRecord, nil
}

// loadTask reads runID's Task, nil when it has none; the caller holds mu.
func (s *Store) loadTask(runID string) (json.RawMessage, error) {
	v, closer, err := s.db.Get(taskKey(runID))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, svc.Wrap(svc.KindRuntime, err, fmt.Sprintf("pebblestore: read the task of run %q", runID))
	}
	defer closer.Close()
	return slices.Clone(v), nil
}

// SetState moves runID to next, appending final in the same batch.
func (s *Store) SetState(ctx context.Context, runID string, next svc.RunState, reason string, final *svc.RunEvent) error {
	return s.update(ctx, runID, func(st *stored, b *pebble.Batch) error {
		if !st.State.CanMove(next) {
			return svc.Errorf(svc.KindRunState, "run %q cannot move from %s to %s", runID, st.State, next)
		}
		if err := moveStateIndex(b, &st.RunRecord, next); err != nil {
			return err
		}
		st.State = next
		st.Reason = reason
		if final != nil {
			if _, err := appendEvent(b, st, *final); err != nil {
				return err
			}
		}
		return nil
	})
}

// Finish ends runID in one batch, under the write lock: state, reason,
// result (when not nil) and final event; see svc.RunStore.
func (s *Store) Finish(ctx context.Context, runID string, next svc.RunState, reason string, result json.RawMessage, final *svc.RunEvent) error {
	if result != nil && !json.Valid(result) {
		return svc.Errorf(svc.KindSpecValidation, "pebblestore: result of run %q is not valid JSON", runID)
	}
	return s.update(ctx, runID, func(st *stored, b *pebble.Batch) error {
		if !next.Terminal() || !st.State.CanMove(next) {
			return svc.Errorf(svc.KindRunState, "run %q cannot finish as %s from %s", runID, next, st.State)
		}
		if err := moveStateIndex(b, &st.RunRecord, next); err != nil {
			return err
		}
		st.State, st.Reason = next, reason
		if result != nil {
			st.Result = append(json.RawMessage(nil), result...)
		}
		if final != nil {
			if _, err := appendEvent(b, st, *final); err != nil {
				return err
			}
		}
		return nil
	})
}

// SetProgress replaces the progress of runID.
func (s *Store) SetProgress(ctx context.Context, runID string, p svc.RunProgress) error {
	return s.update(ctx, runID, func(st *stored, _ *pebble.Batch) error {
		if err := refuseTerminal(st, "progress"); err != nil {
			return err
		}
		st.Progress = &p
		return nil
	})
}

// SetResult stores the result of runID, which must be valid JSON; it is kept
// byte for byte.
func (s *Store) SetResult(ctx context.Context, runID string, result json.RawMessage) error {
	if !json.Valid(result) {
		return svc.Errorf(svc.KindSpecValidation, "pebblestore: result of run %q is not valid JSON", runID)
	}
	return s.update(ctx, runID, func(st *stored, _ *pebble.Batch) error {
		if err := refuseTerminal(st, "result"); err != nil {
			return err
		}
		st.Result = append(json.RawMessage(nil), result...)
		return nil
	})
}

// Append adds ev to runID's events and returns its sequence number. The
// store sets Seq and RunID, and Timestamp when it is zero.
func (s *Store) Append(ctx context.Context, runID string, ev svc.RunEvent) (int64, error) {
	var seq int64
	err := s.update(ctx, runID, func(st *stored, b *pebble.Batch) error {
		if err := refuseTerminal(st, "event"); err != nil {
			return err
		}
		var err error
		seq, err = appendEvent(b, st, ev)
		return err
	})
	if err != nil {
		return 0, err
	}
	return seq, nil
}

// AppendSteps adds steps to runID's step log in one batch, through the
// commit queue like every write of a run, so they share its fsync; see
// svc.StepLog. The checks come before anything is added to the batch.
func (s *Store) AppendSteps(ctx context.Context, runID string, steps ...svc.RunStep) (int64, error) {
	if err := svc.CheckSteps(steps); err != nil {
		return 0, err
	}
	var size int64
	for _, st := range steps {
		size += st.Size()
	}
	now := time.Now().UTC()
	var last int64
	err := s.update(ctx, runID, func(st *stored, b *pebble.Batch) error {
		if err := refuseTerminal(st, "step"); err != nil {
			return err
		}
		if st.StepBytes+size > s.maxStepBytes {
			return svc.StepLogFull(runID, st.StepBytes, size, s.maxStepBytes)
		}
		for _, step := range steps {
			st.StepSeq++
			at := now
			if !step.Timestamp.IsZero() {
				at = step.Timestamp.UTC()
			}
			v, err := json.Marshal(stepJSON{Seq: st.StepSeq, Kind: step.Kind, Key: step.Key, Data: step.Data, Timestamp: at})
			if err != nil {
				return svc.Wrap(svc.KindRuntime, err, fmt.Sprintf("pebblestore: encode step of %q", runID))
			}
			if err := b.Set(seqKey(stepPrefix, runID, st.StepSeq), v, nil); err != nil {
				return svc.Wrap(svc.KindRuntime, err, fmt.Sprintf("pebblestore: write step of %q", runID))
			}
		}
		st.StepBytes += size
		last = st.StepSeq
		return nil
	})
	if err != nil {
		return 0, err
	}
	return last, nil
}

// Steps returns runID's steps with Seq > after, in order; see svc.StepLog.
func (s *Store) Steps(ctx context.Context, runID string, after int64) ([]svc.RunStep, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, errClosed()
	}
	if _, err := s.load(runID); err != nil {
		return nil, err
	}
	stored, err := scanSeq[stepJSON](s.db, stepPrefix, runID, after, "step")
	if err != nil {
		return nil, err
	}
	out := make([]svc.RunStep, len(stored))
	for i, j := range stored {
		out[i] = svc.RunStep{Seq: j.Seq, Kind: j.Kind, Key: j.Key, Data: j.Data, Timestamp: j.Timestamp.UTC()}
	}
	return out, nil
}

// MaxStepBytes is the bound of each run's step log; see svc.StepLog.
func (s *Store) MaxStepBytes() int64 { return s.maxStepBytes }

// stepJSON is a stored step. Data is []byte (base64 in JSON), kept byte
// for byte as a result is.
type stepJSON struct {
	Seq       int64        `json:"seq"`
	Kind      svc.StepKind `json:"kind"`
	Key       string       `json:"key"`
	Data      []byte       `json:"data"`
	Timestamp time.Time    `json:"ts"`
}

// Events returns runID's events with Seq > after, in order.
func (s *Store) Events(ctx context.Context, runID string, after int64) ([]svc.RunEvent, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, errClosed()
	}
	if _, err := s.load(runID); err != nil {
		return nil, err
	}
	return s.events(runID, after)
}

// Stream replays runID's events with Seq > after and follows new ones until
// the run is terminal and every event was sent, ctx ends or the store
// closes. The caller must drain the channel or cancel ctx.
func (s *Store) Stream(ctx context.Context, runID string, after int64) (<-chan svc.RunEvent, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	sub := &subscriber{wake: make(chan struct{}, 1)}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, errClosed()
	}
	if _, err := s.load(runID); err != nil {
		return nil, err
	}
	// Subscribe before the goroutine's first read so no write between that
	// read and the wait goes unnoticed.
	s.subscribe(runID, sub)
	out := make(chan svc.RunEvent)
	// wg.Add under the read lock: Close cannot be waiting yet.
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(out)
		defer s.unsubscribe(runID, sub)
		s.follow(ctx, runID, after, sub, out)
	}()
	return out, nil
}

// follow runs the stores' follow loop; a read error (the store closed, the
// run vanished) ends the stream, as the channel cannot carry it.
func (s *Store) follow(ctx context.Context, runID string, last int64, sub *subscriber, out chan<- svc.RunEvent) {
	follow.Run(ctx, s.done, last, follow.Source{
		// The subscription was made before the first read, and its buffer
		// keeps a wake-up that lands between a read and the wait.
		Arm: func() <-chan struct{} { return sub.wake },
		Read: func(_ context.Context, after int64) ([]svc.RunEvent, bool, bool, error) {
			evs, terminal, err := s.snapshot(runID, after)
			return evs, terminal, false, err
		},
	}, out)
}

// snapshot reads the run's state and its events after last under the read
// lock, so no writer lands between the two: a terminal state read here means
// every event is in evs or was already sent.
func (s *Store) snapshot(runID string, last int64) ([]svc.RunEvent, bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, false, errClosed()
	}
	st, err := s.load(runID)
	if err != nil {
		return nil, false, err
	}
	evs, err := s.events(runID, last)
	return evs, st.State.Terminal(), err
}

// Interrupt fails every pending or running run with reason "interrupted",
// its failed result, progress and run_failed event, in one batch.
func (s *Store) Interrupt(ctx context.Context) (int, error) {
	_, n, err := s.recover(ctx, false)
	return n, err
}

// Recover claims every pending or running run that has a Task (its Resumed
// goes up by one) and fails the others as Interrupt does, in one batch;
// see svc.ResumableStore. The directory has one process (pebble locks
// it), so every unfinished run is that process's to claim.
func (s *Store) Recover(ctx context.Context) ([]svc.RunRecord, int, error) {
	return s.recover(ctx, true)
}

// recover is Recover, or Interrupt when claim is false.
func (s *Store) recover(ctx context.Context, claim bool) ([]svc.RunRecord, int, error) {
	var (
		ids     []string
		claimed []svc.RunRecord
	)
	n := 0
	err := s.write(ctx, func(b *pebble.Batch) ([]string, error) {
		ids, claimed, n = nil, nil, 0
		it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte(runPrefix), UpperBound: prefixEnd(runPrefix)})
		if err != nil {
			return nil, svc.Wrap(svc.KindRuntime, err, "pebblestore: scan runs")
		}
		fail := func(err error) ([]string, error) {
			_ = it.Close()
			return nil, err
		}
		now := time.Now().UTC()
		for ok := it.First(); ok; ok = it.Next() {
			v, err := it.ValueAndErr()
			if err != nil {
				return fail(svc.Wrap(svc.KindRuntime, err, "pebblestore: scan runs"))
			}
			st, err := decodeRecord(v)
			if err != nil {
				return fail(svc.Wrap(svc.KindRuntime, err, fmt.Sprintf("pebblestore: decode %q", it.Key())))
			}
			if st.State.Terminal() || st.State == svc.RunWaiting {
				continue // a waiting run holds nothing a process's death took
			}
			var task json.RawMessage
			if claim {
				if task, err = s.loadTask(st.RunID); err != nil {
					return fail(err)
				}
			}
			if len(task) > 0 {
				st.Resumed++
				st.UpdatedAt = now
				if err := putRecord(b, st); err != nil {
					return fail(err)
				}
				st.Task = task
				claimed = append(claimed, st.RunRecord)
				ids = append(ids, st.RunID)
				continue
			}
			if err := moveStateIndex(b, &st.RunRecord, svc.RunFailed); err != nil {
				return fail(err)
			}
			st.State, st.Reason, st.UpdatedAt = svc.RunFailed, svc.ReasonInterrupted, now
			st.Result = svc.InterruptedResult(st.Target)
			st.Progress = svc.InterruptedProgress(st.Progress)
			if _, err := appendEvent(b, st, svc.InterruptedEvent(now)); err != nil {
				return fail(err)
			}
			if err := putRecord(b, st); err != nil {
				return fail(err)
			}
			ids = append(ids, st.RunID)
			n++
		}
		if err := it.Close(); err != nil {
			return nil, svc.Wrap(svc.KindRuntime, err, "pebblestore: scan runs")
		}
		return ids, nil
	})
	if err != nil {
		return nil, 0, err
	}
	svc.SortClaimed(claimed)
	return claimed, n, nil
}

// ListRuns returns a page of runs, newest first; see svc.RunLister and
// package runlist for the order and the cursor.
func (s *Store) ListRuns(ctx context.Context, f svc.RunFilter) (svc.RunPage, error) {
	q, err := runlist.Parse("pebblestore", f)
	if err != nil {
		return svc.RunPage{}, err
	}
	if err := ctx.Err(); err != nil {
		return svc.RunPage{}, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return svc.RunPage{}, errClosed()
	}
	prefix := idxCreated
	if q.State != "" {
		prefix = idxState + string(q.State) + "/"
	}
	// Keys sort oldest first, so the page is read backwards from the
	// cursor's key, which the exclusive upper bound leaves out.
	upper := prefixEnd(prefix)
	if q.After != nil {
		upper = indexKey(prefix, *q.After)
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte(prefix), UpperBound: upper})
	if err != nil {
		return svc.RunPage{}, svc.Wrap(svc.KindRuntime, err, "pebblestore: list runs")
	}
	var rows []runlist.Row
	for ok := it.Last(); ok && len(rows) < q.Fetch(); ok = it.Prev() {
		if err := ctx.Err(); err != nil {
			_ = it.Close()
			return svc.RunPage{}, err
		}
		pos, ok := parseIndexKey(prefix, it.Key())
		if !ok {
			_ = it.Close()
			return svc.RunPage{}, svc.Errorf(svc.KindRuntime, "pebblestore: corrupt index key %q", it.Key())
		}
		rec, err := s.loadSummary(pos.RunID)
		if err != nil {
			_ = it.Close()
			return svc.RunPage{}, err
		}
		if q.Tenant != "" && rec.Tenant != q.Tenant {
			continue // no index by tenant: the state's or the creation index, filtered
		}
		rows = append(rows, runlist.Row{Pos: pos, Summary: runlist.Summary(rec)})
	}
	if err := it.Close(); err != nil {
		return svc.RunPage{}, svc.Wrap(svc.KindRuntime, err, "pebblestore: list runs")
	}
	return q.Page(rows), nil
}

// loadSummary reads runID's record without its result, which a listing
// does not show and which may be large; the caller holds mu.
func (s *Store) loadSummary(runID string) (*svc.RunRecord, error) {
	v, closer, err := s.db.Get(runKey(runID))
	if err != nil {
		// The index and the records are written in the same batches: an
		// index entry without its record is damage, not a race.
		return nil, svc.Wrap(svc.KindRuntime, err, fmt.Sprintf("pebblestore: read listed run %q", runID))
	}
	defer closer.Close()
	var j summaryJSON
	if err := json.Unmarshal(v, &j); err != nil {
		return nil, svc.Wrap(svc.KindRuntime, err, fmt.Sprintf("pebblestore: decode run %q", runID))
	}
	return &svc.RunRecord{RunID: j.RunID, Target: j.Target, Kind: j.Kind, State: j.State, Progress: j.Progress,
		Reason: j.Reason, TraceID: j.TraceID, Tenant: j.Tenant, CreatedAt: j.CreatedAt.UTC(), UpdatedAt: j.UpdatedAt.UTC()}, nil
}

// update runs fn on runID's record under the write lock and writes the
// record back with whatever fn added to the batch.
func (s *Store) update(ctx context.Context, runID string, fn func(*stored, *pebble.Batch) error) error {
	return s.group(ctx, func(b *pebble.Batch) ([]string, error) {
		st, err := s.load(runID)
		if err != nil {
			return nil, err
		}
		if err := fn(st, b); err != nil {
			return nil, err
		}
		st.UpdatedAt = time.Now().UTC()
		return []string{runID}, putRecord(b, st)
	})
}

// write is every change: prepare reads, checks and fills a batch under the
// write lock and names the runs it changes; the batch is applied before the
// lock is released, so the next writer's check sees it, and the caller then
// waits for the WAL fsync outside the lock. Concurrent writers thereby
// share fsyncs (pebble groups the syncs of batches queued together) while
// each call still returns only once its change is durable.
func (s *Store) write(ctx context.Context, prepare func(*pebble.Batch) ([]string, error)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errClosed()
	}
	b := s.db.NewBatch()
	ids, err := prepare(b)
	if err == nil && len(ids) == 0 {
		s.mu.Unlock()
		_ = b.Close()
		return nil
	}
	if err == nil {
		if err = s.db.ApplyNoSyncWait(b, pebble.Sync); err != nil {
			err = svc.Wrap(svc.KindRuntime, err, fmt.Sprintf("pebblestore: write %q", ids))
		}
	}
	if err != nil {
		s.mu.Unlock()
		_ = b.Close()
		return err
	}
	// Close waits for this sync before closing the database.
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()
	err = b.SyncWait()
	_ = b.Close()
	if err != nil {
		return svc.Wrap(svc.KindRuntime, err, fmt.Sprintf("pebblestore: sync %q", ids))
	}
	s.syncs.Add(1)
	// Streams are woken once the change is durable (a stream woken by
	// another write may see it a little earlier, as pebble makes a batch
	// visible before its fsync).
	for _, id := range ids {
		s.notify(id)
	}
	return nil
}

// group makes a write of a run through the commit queue, or alone
// (write) without one.
func (s *Store) group(ctx context.Context, prepare prepareFunc) error {
	if s.q == nil {
		return s.write(ctx, prepare)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.q.Do(ctx, prepare)
}

// commit is the commit queue's writer. Under the write lock, each write is
// prepared and applied in turn without a sync, as write does, so each
// one's check sees the writes before it; then one empty batch asks for the
// sync, which makes the WAL durable up to it, every write of the batch
// included. Every caller is answered after that one fsync. A write whose
// check refuses it (or whose reads fail) adds nothing and gets its own
// error.
func (s *Store) commit(jobs []*groupcommit.Job[prepareFunc]) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		for _, j := range jobs {
			j.Err = errClosed()
		}
		return
	}
	ids := make([][]string, len(jobs))
	applied := false
	for i, j := range jobs {
		b := s.db.NewBatch()
		got, err := j.Op(b)
		if err == nil && len(got) > 0 {
			if err = s.db.Apply(b, pebble.NoSync); err != nil {
				err = svc.Wrap(svc.KindRuntime, err, fmt.Sprintf("pebblestore: write %q", got))
			} else {
				ids[i], applied = got, true
			}
		}
		_ = b.Close()
		j.Err = err
	}
	if !applied {
		s.mu.Unlock()
		return
	}
	sync := s.db.NewBatch()
	err := sync.LogData(nil, nil)
	if err == nil {
		err = s.db.ApplyNoSyncWait(sync, pebble.Sync)
	}
	if err != nil {
		s.mu.Unlock()
		_ = sync.Close()
	} else {
		s.wg.Add(1) // Close waits for this sync before closing the database
		s.mu.Unlock()
		err = sync.SyncWait()
		_ = sync.Close()
		s.wg.Done()
	}
	if err != nil {
		err = svc.Wrap(svc.KindRuntime, err, "pebblestore: sync a batch of writes")
	} else {
		s.syncs.Add(1)
	}
	for i, j := range jobs {
		if ids[i] == nil {
			continue
		}
		if err != nil {
			j.Err = err
			continue
		}
		for _, id := range ids[i] {
			s.notify(id)
		}
	}
}

// load reads runID's record; the caller holds mu.
func (s *Store) load(runID string) (*stored, error) {
	v, closer, err := s.db.Get(runKey(runID))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, svc.Errorf(svc.KindRegistry, "unknown run %q", runID)
	}
	if err != nil {
		return nil, svc.Wrap(svc.KindRuntime, err, fmt.Sprintf("pebblestore: read run %q", runID))
	}
	defer closer.Close()
	st, err := decodeRecord(v)
	if err != nil {
		return nil, svc.Wrap(svc.KindRuntime, err, fmt.Sprintf("pebblestore: decode run %q", runID))
	}
	return st, nil
}

// events reads runID's events after seq after; the caller holds mu.
func (s *Store) events(runID string, after int64) ([]svc.RunEvent, error) {
	evs, err := scanSeq[svc.RunEvent](s.db, evPrefix, runID, after, "event")
	if len(evs) == 0 {
		evs = nil // as before: no events is a nil list
	}
	return evs, err
}

// scanSeq decodes, in order, the JSON values of run runID's keys under
// prefix (evPrefix, stepPrefix) whose sequence is past after; what names
// them in errors.
func scanSeq[T any](db *pebble.DB, prefix, runID string, after int64, what string) ([]T, error) {
	runPrefix := prefix + runID + "/"
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: seqKey(prefix, runID, max(after, 0)+1), UpperBound: prefixEnd(runPrefix)})
	if err != nil {
		return nil, svc.Wrap(svc.KindRuntime, err, fmt.Sprintf("pebblestore: read %ss of %q", what, runID))
	}
	out := []T{}
	for ok := it.First(); ok; ok = it.Next() {
		// Ids may contain "/", so run "a" sees the keys of run "a/b" in its
		// range; those are longer than prefix+seq and are skipped.
		if len(it.Key()) != len(runPrefix)+seqDigits {
			continue
		}
		v, err := it.ValueAndErr()
		if err == nil {
			var x T
			if err = json.Unmarshal(v, &x); err == nil {
				out = append(out, x)
				continue
			}
		}
		_ = it.Close()
		return nil, svc.Wrap(svc.KindRuntime, err, fmt.Sprintf("pebblestore: read %s %q", what, it.Key()))
	}
	if err := it.Close(); err != nil {
		return nil, svc.Wrap(svc.KindRuntime, err, fmt.Sprintf("pebblestore: read %ss of %q", what, runID))
	}
	return out, nil
}

func (s *Store) subscribe(runID string, sub *subscriber) {
	s.subMu.Lock()
	defer s.subMu.Unlock()
	m := s.subs[runID]
	if m == nil {
		m = map[*subscriber]struct{}{}
		s.subs[runID] = m
	}
	m[sub] = struct{}{}
}

func (s *Store) unsubscribe(runID string, sub *subscriber) {
	s.subMu.Lock()
	defer s.subMu.Unlock()
	delete(s.subs[runID], sub)
	if len(s.subs[runID]) == 0 {
		delete(s.subs, runID)
	}
}

func (s *Store) notify(runID string) {
	s.subMu.Lock()
	defer s.subMu.Unlock()
	for sub := range s.subs[runID] {
		select {
		case sub.wake <- struct{}{}:
		default: // a wake-up is already pending
		}
	}
}

// stored is the on-disk form of a run: the record plus the last sequence
// number handed out, so Append needs no scan.
type stored struct {
	svc.RunRecord
	LastSeq int64
	// StepSeq is the Seq of the run's last step, StepBytes the sum of its
	// steps' Size (the bound's measure).
	StepSeq, StepBytes int64
}

// recordJSON fixes the on-disk field names independently of RunRecord's
// tags. Result is []byte (base64 in JSON) because encoding/json would
// compact a RawMessage and the result must be served byte for byte.
type recordJSON struct {
	RunID     string           `json:"run_id"`
	Target    string           `json:"target"`
	Kind      svc.TargetKind   `json:"kind"`
	State     svc.RunState     `json:"state"`
	Progress  *svc.RunProgress `json:"progress,omitempty"`
	Result    []byte           `json:"result,omitempty"`
	Reason    string           `json:"reason,omitempty"`
	TraceID   string           `json:"trace_id,omitempty"` // absent in records of earlier versions
	Tenant    string           `json:"tenant,omitempty"`   // absent for the default tenant and in records of earlier versions
	CreatedAt time.Time        `json:"created_at"`
	UpdatedAt time.Time        `json:"updated_at"`
	LastSeq   int64            `json:"last_seq"`
	// The step log's length and size; absent (0) in records of earlier
	// versions, which had no steps.
	StepSeq   int64 `json:"step_seq,omitempty"`
	StepBytes int64 `json:"step_bytes,omitempty"`
	// Resumed is RunRecord.Resumed; absent (0) in records of earlier
	// versions, and in those of runs never resumed.
	Resumed int `json:"resumed,omitempty"`
}

// summaryJSON is recordJSON without the result, for listings.
type summaryJSON struct {
	RunID     string           `json:"run_id"`
	Target    string           `json:"target"`
	Kind      svc.TargetKind   `json:"kind"`
	State     svc.RunState     `json:"state"`
	Progress  *svc.RunProgress `json:"progress,omitempty"`
	Reason    string           `json:"reason,omitempty"`
	TraceID   string           `json:"trace_id,omitempty"` // absent in records of earlier versions
	Tenant    string           `json:"tenant,omitempty"`   // absent for the default tenant and in records of earlier versions
	CreatedAt time.Time        `json:"created_at"`
	UpdatedAt time.Time        `json:"updated_at"`
}

func encodeRecord(st *stored) ([]byte, error) {
	return json.Marshal(recordJSON{
		RunID: st.RunID, Target: st.Target, Kind: st.Kind, State: st.State, Progress: st.Progress,
		Result: st.Result, Reason: st.Reason, TraceID: st.TraceID, Tenant: st.Tenant, CreatedAt: st.CreatedAt, UpdatedAt: st.UpdatedAt, LastSeq: st.LastSeq,
		StepSeq: st.StepSeq, StepBytes: st.StepBytes, Resumed: st.Resumed,
	})
}

// decodeRecord parses a stored record, refusing one that could not have
// been written by encodeRecord.
func decodeRecord(b []byte) (*stored, error) {
	var j recordJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return nil, err
	}
	if j.RunID == "" || !j.State.Valid() || j.LastSeq < 0 || j.StepSeq < 0 || j.StepBytes < 0 || j.Resumed < 0 {
		return nil, fmt.Errorf("corrupt record (run_id %q, state %q, last_seq %d)", j.RunID, j.State, j.LastSeq)
	}
	st := &stored{LastSeq: j.LastSeq, StepSeq: j.StepSeq, StepBytes: j.StepBytes, RunRecord: svc.RunRecord{
		RunID: j.RunID, Target: j.Target, Kind: j.Kind, State: j.State, Progress: j.Progress,
		Reason: j.Reason, TraceID: j.TraceID, Tenant: j.Tenant, Resumed: j.Resumed, Steps: j.StepSeq,
		CreatedAt: j.CreatedAt.UTC(), UpdatedAt: j.UpdatedAt.UTC(),
	}}
	if j.Result != nil {
		st.Result = json.RawMessage(j.Result)
	}
	return st, nil
}

// putNew adds a new run to b: its record, its indexes and its Task.
func putNew(b *pebble.Batch, rec *svc.RunRecord) error {
	if err := putIndexes(b, rec); err != nil {
		return err
	}
	if len(rec.Task) > 0 {
		if err := b.Set(taskKey(rec.RunID), rec.Task, nil); err != nil {
			return svc.Wrap(svc.KindRuntime, err, fmt.Sprintf("pebblestore: write the task of run %q", rec.RunID))
		}
	}
	return putRecord(b, &stored{RunRecord: *rec})
}

func putRecord(b *pebble.Batch, st *stored) error {
	v, err := encodeRecord(st)
	if err != nil {
		return svc.Wrap(svc.KindRuntime, err, fmt.Sprintf("pebblestore: encode run %q", st.RunID))
	}
	return b.Set(runKey(st.RunID), v, nil)
}

// appendEvent numbers ev after st's last event and adds it to b.
func appendEvent(b *pebble.Batch, st *stored, ev svc.RunEvent) (int64, error) {
	st.LastSeq++
	ev.Seq = st.LastSeq
	ev.RunID = st.RunID
	if ev.Timestamp.IsZero() {
		ev.Timestamp = time.Now()
	}
	v, err := json.Marshal(ev)
	if err != nil {
		return 0, svc.Wrap(svc.KindRuntime, err, fmt.Sprintf("pebblestore: encode event of %q", st.RunID))
	}
	if err := b.Set(eventKey(st.RunID, ev.Seq), v, nil); err != nil {
		return 0, svc.Wrap(svc.KindRuntime, err, fmt.Sprintf("pebblestore: write event of %q", st.RunID))
	}
	return ev.Seq, nil
}

// indexKey is the key of the run at pos in the index under prefix.
func indexKey(prefix string, pos runlist.Position) []byte {
	k := make([]byte, 0, len(prefix)+8+len(pos.RunID))
	k = append(k, prefix...)
	// Flipping the sign bit makes the unsigned byte order that of the
	// signed times, times before 1970 included.
	k = binary.BigEndian.AppendUint64(k, uint64(pos.CreatedUS)^(1<<63))
	return append(k, pos.RunID...)
}

// parseIndexKey reads the position out of an index key under prefix.
func parseIndexKey(prefix string, key []byte) (runlist.Position, bool) {
	if len(key) <= len(prefix)+8 || string(key[:len(prefix)]) != prefix {
		return runlist.Position{}, false
	}
	us := int64(binary.BigEndian.Uint64(key[len(prefix):]) ^ (1 << 63))
	return runlist.Position{CreatedUS: us, RunID: string(key[len(prefix)+8:])}, true
}

func stateIndex(state svc.RunState) string { return idxState + string(state) + "/" }

// putIndexes adds rec's index entries to b.
func putIndexes(b *pebble.Batch, rec *svc.RunRecord) error {
	pos := runlist.Of(rec)
	if err := b.Set(indexKey(idxCreated, pos), nil, nil); err != nil {
		return svc.Wrap(svc.KindRuntime, err, fmt.Sprintf("pebblestore: index run %q", rec.RunID))
	}
	if err := b.Set(indexKey(stateIndex(rec.State), pos), nil, nil); err != nil {
		return svc.Wrap(svc.KindRuntime, err, fmt.Sprintf("pebblestore: index run %q", rec.RunID))
	}
	return nil
}

// moveStateIndex moves rec's state index entry to next, in b.
func moveStateIndex(b *pebble.Batch, rec *svc.RunRecord, next svc.RunState) error {
	pos := runlist.Of(rec)
	if err := b.Delete(indexKey(stateIndex(rec.State), pos), nil); err != nil {
		return svc.Wrap(svc.KindRuntime, err, fmt.Sprintf("pebblestore: index run %q", rec.RunID))
	}
	if err := b.Set(indexKey(stateIndex(next), pos), nil, nil); err != nil {
		return svc.Wrap(svc.KindRuntime, err, fmt.Sprintf("pebblestore: index run %q", rec.RunID))
	}
	return nil
}

// ensureIndexes rebuilds the indexes from the records unless indexedKey
// says they are complete. The marker is written last, in the batch of the
// last entries, so a rebuild cut short starts over (it first drops any
// index key it finds) at the next Open.
func ensureIndexes(db *pebble.DB) error {
	_, closer, err := db.Get([]byte(indexedKey))
	if err == nil {
		return closer.Close()
	}
	if !errors.Is(err, pebble.ErrNotFound) {
		return err
	}
	b := db.NewBatch()
	defer func() { _ = b.Close() }()
	if err := b.DeleteRange([]byte(idxPrefix), prefixEnd(idxPrefix), nil); err != nil {
		return err
	}
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte(runPrefix), UpperBound: prefixEnd(runPrefix)})
	if err != nil {
		return err
	}
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			_ = it.Close()
			return err
		}
		st, err := decodeRecord(v)
		if err != nil {
			_ = it.Close()
			return fmt.Errorf("decode %q: %w", it.Key(), err)
		}
		if err := putIndexes(b, &st.RunRecord); err != nil {
			_ = it.Close()
			return err
		}
		if b.Count() >= rebuildBatch {
			if err := b.Commit(pebble.NoSync); err != nil {
				_ = it.Close()
				return err
			}
			_ = b.Close()
			b = db.NewBatch()
		}
	}
	if err := it.Close(); err != nil {
		return err
	}
	if err := b.Set([]byte(indexedKey), []byte("1"), nil); err != nil {
		return err
	}
	// Sync makes the earlier NoSync batches durable too: the WAL is one
	// sequence.
	return b.Commit(pebble.Sync)
}

func refuseTerminal(st *stored, what string) error {
	if st.State.Terminal() {
		return svc.Errorf(svc.KindRunState, "run %q is %s: %s refused", st.RunID, st.State, what)
	}
	return nil
}

func runKey(runID string) []byte { return []byte(runPrefix + runID) }

func taskKey(runID string) []byte { return []byte(taskPrefix + runID) }

func eventKey(runID string, seq int64) []byte { return seqKey(evPrefix, runID, seq) }

// seqKey is <prefix><run id>/<seq, zero-padded>: a run's events or steps
// sort by Seq.
func seqKey(prefix, runID string, seq int64) []byte {
	k := make([]byte, 0, len(prefix)+len(runID)+1+seqDigits)
	k = append(k, prefix...)
	k = append(k, runID...)
	k = append(k, '/')
	n := strconv.AppendInt(nil, seq, 10)
	for range seqDigits - len(n) {
		k = append(k, '0')
	}
	return append(k, n...)
}

// prefixEnd is the first key after every key starting with prefix; prefixes
// here end in '/', which has a successor byte.
func prefixEnd(prefix string) []byte {
	end := []byte(prefix)
	end[len(end)-1]++
	return end
}

func errClosed() error { return svc.Errorf(svc.KindShuttingDown, "pebblestore: store is closed") }

// quietLogger drops pebble's informational chatter (a library must not
// write to the process log on every open) and keeps its errors.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any) {}

func (quietLogger) Errorf(format string, args ...any) { pebble.DefaultLogger.Errorf(format, args...) }

func (quietLogger) Fatalf(format string, args ...any) { pebble.DefaultLogger.Fatalf(format, args...) }

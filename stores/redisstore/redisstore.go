// Package redisstore is a svc.RunStore kept in Redis, shared by every process
// that opens it with the same server and key prefix.
//
// Layout, for a run id under prefix P (default "svc:runs"):
//
//	P:<id>         hash    the record: run_id, target, kind, state, reason,
//	                       trace_id (absent in records of earlier versions),
//	                       tenant (absent for the default tenant and in
//	                       records of earlier versions),
//	                       created_at, updated_at (RFC 3339, UTC), seq (the
//	                       last sequence number), progress (JSON) and result
//	                       (the bytes given), the last two once set; owner
//	                       (see below), task (the bytes of RunRecord.Task,
//	                       absent without one), resumed (absent until the
//	                       run is first claimed), step_bytes
//	P:<id>:steps   list    the step log, one JSON step per entry
//	P:<id>:events  stream  the events; event n has the entry id "n-0" and the
//	                       fields type, agent, task_id, error, ts. The
//	                       transition to a terminal state adds the entry
//	                       "n-1" (field "end"), n being the last event's seq,
//	                       which wakes and ends every stream reader
//	P::active      set     ids of the runs not yet terminal, for Interrupt
//	P::created     zset    every run id, scored by created_at in Unix
//	                       microseconds, for ListRuns
//	P::expiring    zset    ids of the terminal runs whose keys have a TTL,
//	                       scored by when they expire (server clock, Unix
//	                       milliseconds)
//	P::indexed     string  "1" once P::created holds every run (see Open)
//	P::idem:<key>  hash    an Idempotency-Key's reservation: fp, run;
//	                       expires with the key's TTL
//	P::idemkeys    zset    the live keys, scored by expiry (server clock,
//	                       Unix milliseconds), for the bound
//	P::node:<id>   string  the lease of node <id> (a Store): "<time>
//	                       <token>", the last renewal (RFC 3339) and a token
//	                       random per Store; taken at Open unless another
//	                       Store's token holds it, renewed every LeaseTTL/3
//	                       with a TTL of LeaseTTL, deleted at Close
//
// Run ownership (svc.SharedRunStore): a record's "owner" field is the node
// id of the Store that created it, or last claimed it. Interrupt and Sweep
// fail a run only when its owner is gone (no lease), is this node (an
// earlier life of a stable NodeID; Interrupt only), or is unset (a run an
// older build created; Interrupt only), so one node's start never fails the
// runs another live node is running. Recover and ClaimExpired take the same
// runs as Interrupt and Sweep, but claim those with a task instead of
// failing them: the owner becomes this node, in the script that checked
// the old owner's lease, so of nodes racing exactly one gets each run.
//
// Every change is one Lua script that checks the state machine and writes, so
// the rules hold across processes: no change after a terminal state, and a
// final event is appended in the same step as the transition. Once a run is
// terminal its two keys get Options.TTL. Streams follow the events streams
// with XREAD BLOCK, so they see writes made by any process; one blocking
// reader per Store serves all of them (see stream.go). The change scripts
// of concurrent callers go out together: a commit queue
// (stores/internal/groupcommit) sends what is queued in one pipeline (up
// to four in flight) and answers each caller with its own script's reply;
// Options.MaxBatch 1 sends each alone.
//
// ListRuns walks P::created from the cursor down (ZREVRANGEBYSCORE orders
// the members of one score by id, descending: the listing order) and reads
// the records of each batch in one pipeline. A state filter is applied to
// the records read, so a page of a rare state reads the runs in between:
// its cost is the runs scanned, not the runs listed. A run's keys expire
// (Options.TTL) without telling its index entry: Create trims the entries of
// the runs whose expiry is due in P::expiring, and a listing skips and
// drops any entry whose record is gone.
//
// Run ids must not contain ':' (they would collide with another run's keys);
// Create refuses them. The scripts touch a run's keys and the active set
// together, so a Redis Cluster is not supported.
package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/stores/internal/groupcommit"
	"github.com/svc-dev/svc/stores/internal/runlist"
)

// DefaultKeyPrefix is the key prefix when Options.KeyPrefix is empty.
const DefaultKeyPrefix = "svc:runs"

const (
	// block is how long one XREAD of the hub waits before it looks again at
	// which runs to follow.
	block = time.Second
	// readBatch caps the entries one XREAD or XRANGE returns.
	readBatch = 256
	// pingTimeout bounds the reachability check of Open.
	pingTimeout = 5 * time.Second
)

// Options configures Open. Exactly one of URL and Client must be set.
type Options struct {
	// URL is a redis:// or rediss:// URL (see redis.ParseURL); the store
	// creates its own client and Close disconnects it.
	URL string
	// Client is an existing client; the store never closes it.
	Client redis.UniversalClient
	// KeyPrefix starts every key; trailing colons are stripped. Empty means
	// DefaultKeyPrefix.
	KeyPrefix string
	// TTL is set on a run's keys once it is terminal; 0 keeps runs forever.
	TTL time.Duration
	// NodeID names this Store as the owner of the runs it creates (see
	// svc.SharedRunStore); "" means a fresh one, host-pid-random. Give a
	// stable id to have a restarted node fail its own earlier runs at
	// once rather than after their lease expires.
	NodeID string
	// LeaseTTL is how long this node's lease outlives its last renewal;
	// it is renewed every LeaseTTL/3. 0 means DefaultLeaseTTL.
	LeaseTTL time.Duration
	// MaxStepBytes bounds each run's step log (svc.DefaultMaxStepBytes
	// when 0).
	MaxStepBytes int64
	// MaxBatch is the most writes of many callers sent in one pipeline
	// (one round trip; groupcommit.DefaultMaxBatch when 0). 1 turns this
	// off: each write is its own round trip, as before (the benchmarks'
	// baseline).
	MaxBatch int
}

// DefaultLeaseTTL is Options.LeaseTTL when zero: a killed node's runs are
// failed by the others within about this long.
const DefaultLeaseTTL = 15 * time.Second

// Store is a Redis-backed svc.RunStore. It is safe for concurrent use, and
// several Stores, in one process or many, may share a server and prefix.
type Store struct {
	c      redis.UniversalClient
	owned  bool // c was created by Open: Close closes it
	prefix string
	ttl    time.Duration
	node   string        // the owner written into the runs created here
	lease  time.Duration // the node lease's TTL
	// maxStepBytes bounds each run's step log (Options.MaxStepBytes).
	maxStepBytes int64
	token        string // tells this Store's lease from another's of the same node id
	// leaseCtx ends at Close, or when a test stops the renewals to play a
	// killed node (export_test.go).
	leaseCtx  context.Context
	leaseStop context.CancelFunc

	// q is the commit queue the writes of runs go through (nil when
	// Options.MaxBatch is 1): the writes queued while one pipeline is in
	// flight go out together in the next.
	q *groupcommit.Queue[*call]

	// mu is held shared by every call and exclusively by Close, so Close
	// never closes the client under a command and no Stream starts after it.
	mu     sync.RWMutex
	closed bool
	ctx    context.Context    // ends at Close; every Stream and the hub watch it
	stop   context.CancelFunc // ends ctx
	wg     sync.WaitGroup     // Stream goroutines and the hub

	// The hub (stream.go) follows the runs Streams wait on.
	hubMu      sync.Mutex
	watching   map[string]*watched // run id → its readers
	hubStarted bool
	hubBlocked bool          // the hub is in (or about to enter) XREAD
	hubKick    chan struct{} // wakes an idle hub
	wakeKey    string        // interrupts a blocked hub
}

var (
	_ svc.RunStore        = (*Store)(nil)
	_ svc.RunLister       = (*Store)(nil)
	_ svc.IdempotentStore = (*Store)(nil)
	_ svc.StepLog         = (*Store)(nil)
	_ svc.SharedRunStore  = (*Store)(nil)
	_ svc.NodeLister      = (*Store)(nil)
	_ svc.ResumableStore  = (*Store)(nil)
)

// Open connects to Redis (checking it answers PING) and returns the store.
// The first Open of a prefix whose runs were written without the listing
// index (before P::indexed exists) adds them to it, scanning the prefix's
// keys once; runs that an older build writes afterwards stay out of
// listings.
func Open(opts Options) (*Store, error) {
	if (opts.URL == "") == (opts.Client == nil) {
		return nil, svc.Errorf(svc.KindSpecValidation, "redisstore: give exactly one of URL and Client")
	}
	if opts.TTL < 0 {
		return nil, svc.Errorf(svc.KindSpecValidation, "redisstore: negative TTL %v", opts.TTL)
	}
	switch {
	case opts.LeaseTTL < 0:
		return nil, svc.Errorf(svc.KindSpecValidation, "redisstore: negative LeaseTTL %v", opts.LeaseTTL)
	case opts.LeaseTTL == 0:
		opts.LeaseTTL = DefaultLeaseTTL
	case opts.LeaseTTL < 30*time.Millisecond:
		return nil, svc.Errorf(svc.KindSpecValidation, "redisstore: LeaseTTL %v is below 30ms", opts.LeaseTTL)
	}
	if opts.NodeID == "" {
		opts.NodeID = defaultNodeID()
	}
	prefix := strings.TrimRight(opts.KeyPrefix, ":")
	if prefix == "" {
		prefix = DefaultKeyPrefix
	}
	c, owned, where := opts.Client, false, "the given client"
	if opts.URL != "" {
		where = redactURL(opts.URL)
		o, err := redis.ParseURL(opts.URL)
		if err != nil {
			// ParseURL's message may quote the URL; Redact hides a password.
			return nil, svc.Errorf(svc.KindSpecValidation, "redisstore: bad URL %s: %s", where, redactErr(err, opts.URL))
		}
		c, owned = redis.NewClient(o), true
	}
	pctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
	defer cancel()
	if err := c.Ping(pctx).Err(); err != nil {
		if owned {
			_ = c.Close()
		}
		return nil, svc.Errorf(svc.KindRuntime, "redisstore: cannot reach redis at %s: %s", where, redactErr(err, opts.URL))
	}
	ctx, stop := context.WithCancel(context.Background())
	s := &Store{c: c, owned: owned, prefix: prefix, ttl: opts.TTL, node: opts.NodeID, lease: opts.LeaseTTL, token: randomHex(),
		maxStepBytes: opts.MaxStepBytes,
		ctx:          ctx, stop: stop, watching: map[string]*watched{}, hubKick: make(chan struct{}, 1)}
	if s.maxStepBytes <= 0 {
		s.maxStepBytes = svc.DefaultMaxStepBytes
	}
	err := s.ensureIndex(context.Background())
	if err != nil {
		err = svc.Wrap(svc.KindRuntime, err, "redisstore: index the runs under "+strconv.Quote(prefix))
	} else if err = s.renew(pctx); err != nil {
		var held *NodeInUseError
		if !errors.As(err, &held) {
			err = svc.Wrap(svc.KindRuntime, err, "redisstore: take the lease of node "+strconv.Quote(s.node))
		}
	}
	if err != nil {
		stop()
		if owned {
			_ = c.Close()
		}
		return nil, err
	}
	s.leaseCtx, s.leaseStop = context.WithCancel(ctx)
	s.wg.Add(1)
	go s.keepLease()
	if opts.MaxBatch != 1 {
		// A few pipelines in flight keep the server busy while one
		// batch's replies travel back.
		s.q = groupcommit.New(groupcommit.Options{MaxBatch: opts.MaxBatch, Writers: pipelines}, s.commit, errClosed)
	}
	return s, nil
}

// pipelines is how many batches of writes may be in flight at once.
const pipelines = 4

// call is one write script's run through the commit queue; cmd is its
// reply.
type call struct {
	script *redis.Script
	keys   []string
	args   []any
	cmd    *redis.Cmd
}

// eval runs a write script: through the commit queue, or alone without
// one.
func (s *Store) eval(ctx context.Context, script *redis.Script, keys []string, args ...any) *redis.Cmd {
	if s.q == nil {
		return script.Run(ctx, s.c, keys, args...)
	}
	c := &call{script: script, keys: keys, args: args}
	if err := s.q.Do(ctx, c); err != nil {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(err)
		return cmd
	}
	return c.cmd
}

// commit is the commit queue's writer: the batch's scripts go out in one
// pipeline, in order, each answered with its own reply. The scripts
// are atomic and Redis runs a connection's commands in order, so each
// sees the writes before it. A script the server does not have cached
// (NOSCRIPT, after a restart or SCRIPT FLUSH) is run again alone, which
// loads it; the batch's writes are concurrent (none of their callers has
// been answered), so running one after the others is an order they might
// have had anyway.
func (s *Store) commit(jobs []*groupcommit.Job[*call]) {
	ctx := context.Background()
	if len(jobs) == 1 {
		c := jobs[0].Op
		c.cmd = c.script.Run(jobs[0].Ctx, s.c, c.keys, c.args...)
		return
	}
	pipe := s.c.Pipeline()
	for _, j := range jobs {
		j.Op.cmd = j.Op.script.EvalSha(ctx, pipe, j.Op.keys, j.Op.args...)
	}
	_, _ = pipe.Exec(ctx) // each reply carries its own error
	for _, j := range jobs {
		if err := j.Op.cmd.Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			j.Op.cmd = j.Op.script.Run(ctx, s.c, j.Op.keys, j.Op.args...)
		}
	}
}

// ensureIndex adds every run to P::created unless P::indexed says they are
// there. Two processes doing it at once do the same idempotent writes.
func (s *Store) ensureIndex(ctx context.Context) error {
	marker := s.prefix + "::indexed"
	if n, err := s.c.Exists(ctx, marker).Result(); err != nil || n == 1 {
		return err
	}
	// Records are the hashes named P:<id>, <id> without ':'.
	it := s.c.ScanType(ctx, 0, globEscape(s.prefix)+":*", readBatch, "hash").Iterator()
	for it.Next(ctx) {
		key := it.Val()
		id := strings.TrimPrefix(key, s.prefix+":")
		if id == "" || strings.Contains(id, ":") {
			continue
		}
		created, err := s.c.HGet(ctx, key, "created_at").Result()
		if errors.Is(err, redis.Nil) {
			continue // expired since the scan saw it
		}
		if err != nil {
			return err
		}
		t, err := time.Parse(time.RFC3339Nano, created)
		if err != nil {
			return fmt.Errorf("run %q: created_at: %w", id, err)
		}
		if err := indexScript.Run(ctx, s.c, []string{key, s.createdKey(), s.expiringKey()}, id, t.UnixMicro()).Err(); err != nil {
			return err
		}
	}
	if err := it.Err(); err != nil {
		return err
	}
	return s.c.Set(ctx, marker, "1", 0).Err()
}

// globEscape quotes the pattern characters of SCAN MATCH.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// KeyPrefix is the prefix of the store's keys, trailing colons stripped.
func (s *Store) KeyPrefix() string { return s.prefix }

// Close ends every Stream and closes the client if Open created it. A second
// Close returns nil.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.stop()
	s.mu.Unlock()
	if s.q != nil {
		s.q.Close() // no write is under way any more (they hold mu)
	}
	s.hubMu.Lock()
	blocked := s.hubBlocked
	s.hubMu.Unlock()
	if blocked {
		// Spare Close the rest of the hub's XREAD block.
		ctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
		s.wakeHub(ctx)
		cancel()
	}
	s.wg.Wait()
	// A clean stop gives the lease up at once: what this node leaves
	// unfinished is the others' to fail now, not after the TTL.
	ctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
	_ = releaseScript.Run(ctx, s.c, []string{s.leaseKey(s.node)}, s.token).Err()
	cancel()
	if !s.owned {
		return nil
	}
	if err := s.c.Close(); err != nil {
		return svc.Wrap(svc.KindRuntime, err, "redisstore: close client")
	}
	return nil
}

// fields are the record hash of a new run rec, created at created.
func (s *Store) fields(rec svc.RunRecord, created string) []any {
	f := []any{"run_id", rec.RunID, "target", rec.Target, "kind", string(rec.Kind), "state", string(svc.RunPending),
		"reason", "", "trace_id", rec.TraceID, "created_at", created, "updated_at", created, "seq", 0, "owner", s.node}
	if len(rec.Task) > 0 {
		f = append(f, "task", []byte(rec.Task))
	}
	if rec.Tenant != "" {
		f = append(f, "tenant", rec.Tenant)
	}
	return f
}

// Create registers rec as a new pending run.
func (s *Store) Create(ctx context.Context, rec svc.RunRecord) error {
	if rec.RunID == "" || strings.Contains(rec.RunID, ":") {
		return svc.Errorf(svc.KindSpecValidation, "redisstore: bad run id %q (empty or containing ':')", rec.RunID)
	}
	if err := svc.CheckTask(rec.RunID, rec.Task); err != nil {
		return err
	}
	if rec.CreatedAt.IsZero() {
		rec.CreatedAt = time.Now()
	}
	created := formatTime(rec.CreatedAt)
	return s.do(ctx, rec.RunID, func(ctx context.Context) error {
		args := append([]any{rec.RunID, rec.CreatedAt.UnixMicro(), s.prefix}, s.fields(rec, created)...)
		n, err := s.eval(ctx, createScript, s.keys(rec.RunID), args...).Int()
		if err != nil {
			return s.fail(err, "create", rec.RunID)
		}
		if n == 0 {
			return svc.Errorf(svc.KindRunState, "run %q already exists", rec.RunID)
		}
		return nil
	})
}

// CreateIdempotent reserves key and creates rec in one script; see
// svc.IdempotentStore. The reservation expires by Redis's own TTL; past
// svc.MaxIdempotencyKeys live keys the script drops the oldest.
func (s *Store) CreateIdempotent(ctx context.Context, key, fingerprint string, rec svc.RunRecord, ttl time.Duration) (string, bool, error) {
	if rec.RunID == "" || strings.Contains(rec.RunID, ":") {
		return "", false, svc.Errorf(svc.KindSpecValidation, "redisstore: bad run id %q (empty or containing ':')", rec.RunID)
	}
	if err := svc.CheckTask(rec.RunID, rec.Task); err != nil {
		return "", false, err
	}
	if ttl <= 0 {
		ttl = svc.DefaultIdempotencyTTL
	}
	if rec.CreatedAt.IsZero() {
		rec.CreatedAt = time.Now()
	}
	created := formatTime(rec.CreatedAt)
	var (
		runID string
		made  bool
	)
	err := s.do(ctx, rec.RunID, func(ctx context.Context) error {
		keys := append(s.keys(rec.RunID), s.prefix+"::idem:"+key, s.prefix+"::idemkeys")
		args := append([]any{fingerprint, max(ttl.Milliseconds(), 1), svc.MaxIdempotencyKeys, key,
			rec.RunID, rec.CreatedAt.UnixMicro(), s.prefix}, s.fields(rec, created)...)
		res, err := createIdemScript.Run(ctx, s.c, keys, args...).Slice()
		if err != nil {
			return s.fail(err, "create", rec.RunID)
		}
		var code int64
		if len(res) == 2 {
			code, _ = res[0].(int64)
			runID, _ = res[1].(string)
		}
		switch {
		case len(res) != 2:
			return svc.Errorf(svc.KindRuntime, "redisstore: create run %q: unexpected reply %v", rec.RunID, res)
		case code == 0:
			made = true
		case code == 1:
		case code == 2:
			return svc.IdempotencyConflict(key, runID)
		default:
			return svc.Errorf(svc.KindRunState, "run %q already exists", rec.RunID)
		}
		return nil
	})
	if err != nil {
		return "", false, err
	}
	return runID, made, nil
}

// Get returns the record of runID.
func (s *Store) Get(ctx context.Context, runID string) (svc.RunRecord, error) {
	var rec svc.RunRecord
	err := s.do(ctx, runID, func(ctx context.Context) error {
		var err error
		rec, err = s.get(ctx, runID)
		return err
	})
	return rec, err
}

// get reads runID's record and counts its steps, at one moment (MULTI).
func (s *Store) get(ctx context.Context, runID string) (svc.RunRecord, error) {
	var h *redis.MapStringStringCmd
	var steps *redis.IntCmd
	var last *redis.StringCmd
	_, err := s.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		h = p.HGetAll(ctx, s.recKey(runID))
		steps = p.LLen(ctx, s.stepsKey(runID))
		last = p.LIndex(ctx, s.stepsKey(runID), -1)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) { // Nil: no steps (LINDEX)
		return svc.RunRecord{}, s.fail(err, "read", runID)
	}
	if len(h.Val()) == 0 {
		return svc.RunRecord{}, notFound(runID)
	}
	rec, err := decodeRecord(h.Val())
	if err != nil {
		return svc.RunRecord{}, svc.Wrap(svc.KindRuntime, err, fmt.Sprintf("redisstore: decode run %q", runID))
	}
	rec.Steps = steps.Val()
	if v := last.Val(); v != "" {
		var j stepJSON
		if err := json.Unmarshal([]byte(v), &j); err != nil {
			return svc.RunRecord{}, svc.Wrap(svc.KindRuntime, err, fmt.Sprintf("redisstore: decode the last step of run %q", runID))
		}
		rec.CurrentStep = &svc.StepRef{Seq: rec.Steps, Kind: j.Kind, Key: j.Key, At: j.Timestamp.UTC()}
	}
	return rec, nil
}

// SetState moves runID to next, appending final in the same script.
func (s *Store) SetState(ctx context.Context, runID string, next svc.RunState, reason string, final *svc.RunEvent) error {
	args := []any{runID, string(next), reason, formatTime(time.Now()), s.ttl.Milliseconds(), s.node}
	if final != nil {
		args = append(args, eventFields(*final)...)
	}
	return s.do(ctx, runID, func(ctx context.Context) error {
		r, err := s.run(ctx, setStateScript, runID, "state", args...)
		if err == nil && r.code == 2 {
			return svc.Errorf(svc.KindRunState, "run %q cannot move from %s to %s", runID, r.state, next)
		}
		return err
	})
}

// Finish ends runID in one script: state, reason, result (when not nil) and
// final event; see svc.RunStore.
func (s *Store) Finish(ctx context.Context, runID string, next svc.RunState, reason string, result json.RawMessage, final *svc.RunEvent) error {
	has := "0"
	if result != nil {
		if !json.Valid(result) {
			return svc.Errorf(svc.KindSpecValidation, "redisstore: result of run %q is not valid JSON", runID)
		}
		has = "1"
	}
	args := []any{runID, string(next), reason, formatTime(time.Now()), s.ttl.Milliseconds(), has, []byte(result)}
	if final != nil {
		args = append(args, eventFields(*final)...)
	}
	return s.do(ctx, runID, func(ctx context.Context) error {
		r, err := s.run(ctx, finishScript, runID, "state", args...)
		if err == nil && r.code == 2 {
			return svc.Errorf(svc.KindRunState, "run %q cannot finish as %s from %s", runID, next, r.state)
		}
		return err
	})
}

// SetProgress replaces the progress of runID.
func (s *Store) SetProgress(ctx context.Context, runID string, p svc.RunProgress) error {
	b, err := json.Marshal(p)
	if err != nil {
		return svc.Wrap(svc.KindRuntime, err, "redisstore: encode progress")
	}
	return s.setField(ctx, runID, "progress", b)
}

// SetResult stores the result of runID, which must be valid JSON; it is kept
// byte for byte.
func (s *Store) SetResult(ctx context.Context, runID string, result json.RawMessage) error {
	if !json.Valid(result) {
		return svc.Errorf(svc.KindSpecValidation, "redisstore: result of run %q is not valid JSON", runID)
	}
	return s.setField(ctx, runID, "result", []byte(result))
}

func (s *Store) setField(ctx context.Context, runID, field string, v []byte) error {
	return s.do(ctx, runID, func(ctx context.Context) error {
		r, err := s.run(ctx, setFieldScript, runID, field, field, v, formatTime(time.Now()))
		if err == nil && r.code == 2 {
			return refused(runID, r, field)
		}
		return err
	})
}

// Append adds ev to runID's events and returns its sequence number. The
// store sets Seq and RunID, and Timestamp when it is zero.
func (s *Store) Append(ctx context.Context, runID string, ev svc.RunEvent) (int64, error) {
	var seq int64
	err := s.do(ctx, runID, func(ctx context.Context) error {
		r, err := s.run(ctx, appendScript, runID, "event", eventFields(ev)...)
		if err == nil && r.code == 2 {
			return refused(runID, r, "event")
		}
		seq = r.seq
		return err
	})
	return seq, err
}

// AppendSteps adds steps to runID's step log in one script, through the
// commit queue like every write of a run, so it shares their pipeline;
// see svc.StepLog.
func (s *Store) AppendSteps(ctx context.Context, runID string, steps ...svc.RunStep) (int64, error) {
	if err := svc.CheckSteps(steps); err != nil {
		return 0, err
	}
	args := make([]any, 2, 2+len(steps))
	var size int64
	now := time.Now()
	for _, st := range steps {
		size += st.Size()
		if st.Timestamp.IsZero() {
			st.Timestamp = now
		}
		v, err := json.Marshal(stepJSON{Kind: st.Kind, Key: st.Key, Data: st.Data, Timestamp: st.Timestamp.UTC()})
		if err != nil {
			return 0, svc.Wrap(svc.KindRuntime, err, fmt.Sprintf("redisstore: encode step of run %q", runID))
		}
		args = append(args, v)
	}
	args[0], args[1] = size, s.maxStepBytes
	var last int64
	err := s.do(ctx, runID, func(ctx context.Context) error {
		res, err := s.eval(ctx, appendStepsScript, s.keys(runID), args...).Int64Slice()
		if err != nil {
			return s.fail(err, "append steps to", runID)
		}
		if len(res) != 2 {
			return svc.Errorf(svc.KindRuntime, "redisstore: append steps to run %q: unexpected reply %v", runID, res)
		}
		switch res[0] {
		case 0:
			last = res[1]
			return nil
		case 1:
			return notFound(runID)
		case 2:
			return refused(runID, reply{state: stateNames[res[1]]}, "step")
		case 3:
			return svc.StepLogFull(runID, res[1], size, s.maxStepBytes)
		}
		return svc.Errorf(svc.KindRuntime, "redisstore: append steps to run %q: unexpected reply %v", runID, res)
	})
	return last, err
}

// Steps returns runID's steps with Seq > after, in order; see svc.StepLog.
// A step's Seq is its place in the list, which only grows.
func (s *Store) Steps(ctx context.Context, runID string, after int64) ([]svc.RunStep, error) {
	out := []svc.RunStep{}
	err := s.do(ctx, runID, func(ctx context.Context) error {
		after = max(after, 0)
		var exists *redis.IntCmd
		var rng *redis.StringSliceCmd
		_, err := s.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			exists = p.Exists(ctx, s.recKey(runID))
			rng = p.LRange(ctx, s.stepsKey(runID), after, -1)
			return nil
		})
		if err != nil {
			return s.fail(err, "read steps of", runID)
		}
		if exists.Val() == 0 {
			return notFound(runID)
		}
		for i, v := range rng.Val() {
			var j stepJSON
			if err := json.Unmarshal([]byte(v), &j); err != nil {
				return svc.Wrap(svc.KindRuntime, err, fmt.Sprintf("redisstore: decode step %d of run %q", after+int64(i)+1, runID))
			}
			out = append(out, svc.RunStep{Seq: after + int64(i) + 1, Kind: j.Kind, Key: j.Key, Data: j.Data, Timestamp: j.Timestamp.UTC()})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// MaxStepBytes is the bound of each run's step log; see svc.StepLog.
func (s *Store) MaxStepBytes() int64 { return s.maxStepBytes }

// stepJSON is a stored step. Data is []byte (base64 in JSON), kept byte
// for byte as a result is.
type stepJSON struct {
	Kind      svc.StepKind `json:"kind"`
	Key       string       `json:"key"`
	Data      []byte       `json:"data"`
	Timestamp time.Time    `json:"ts"`
}

// Events returns runID's events with Seq > after, in order.
func (s *Store) Events(ctx context.Context, runID string, after int64) ([]svc.RunEvent, error) {
	var evs []svc.RunEvent
	err := s.do(ctx, runID, func(ctx context.Context) error {
		after = max(after, 0)
		if after == math.MaxInt64 {
			after-- // nothing follows; keeps after+1 from overflowing
		}
		var exists *redis.IntCmd
		var rng *redis.XMessageSliceCmd
		// MULTI/EXEC: the existence check and the read see the same moment.
		_, err := s.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			exists = p.Exists(ctx, s.recKey(runID))
			rng = p.XRange(ctx, s.evKey(runID), seqID(after+1, 0), "+")
			return nil
		})
		if err != nil {
			return s.fail(err, "read events of", runID)
		}
		if exists.Val() == 0 {
			return notFound(runID)
		}
		for _, m := range rng.Val() {
			ev, end, err := decodeEntry(m.ID, m.Values)
			if err != nil {
				return svc.Wrap(svc.KindRuntime, err, fmt.Sprintf("redisstore: decode event %s of run %q", m.ID, runID))
			}
			if !end {
				ev.RunID = runID
				evs = append(evs, ev)
			}
		}
		return nil
	})
	return evs, err
}

// Interrupt fails every pending or running run no live node owns, with
// reason "interrupted": this node's own (left by an earlier life of its
// NodeID), those of nodes whose lease expired, and those without an owner.
// The runs of the other live nodes sharing the prefix are left alone.
func (s *Store) Interrupt(ctx context.Context) (int, error) {
	n, _, _, err := s.interruptAll(ctx, true, false)
	return n, err
}

// Recover takes the runs Interrupt would fail: it claims those with a
// task for this node and fails the others; see svc.ResumableStore.
func (s *Store) Recover(ctx context.Context) ([]svc.RunRecord, int, error) {
	n, _, claimed, err := s.interruptAll(ctx, true, true)
	return claimed, n, err
}

// ClaimExpired takes the runs Sweep would fail: it claims those with a
// task for this node and fails the others; see svc.SharedRunStore.
func (s *Store) ClaimExpired(ctx context.Context) ([]svc.RunRecord, int, error) {
	n, _, claimed, err := s.interruptAll(ctx, false, true)
	return claimed, n, err
}

// Sweep fails the unfinished runs of the other nodes whose lease expired,
// as Interrupt does; see svc.SharedRunStore. Runs without an owner (an
// older build's, perhaps still running them) are left to Interrupt.
func (s *Store) Sweep(ctx context.Context) (int, []string, error) {
	n, nodes, _, err := s.interruptAll(ctx, false, false)
	return n, nodes, err
}

// NodeID is the owner written into the runs this Store creates.
func (s *Store) NodeID() string { return s.node }

// LeaseTTL is how long this node's lease outlives its last renewal.
func (s *Store) LeaseTTL() time.Duration { return s.lease }

// interruptAll fails the unfinished runs no live node owns (this node's
// too when own), or, when claim, claims those of them with a task: it
// returns how many it failed, their owners, and the records it claimed,
// oldest first.
func (s *Store) interruptAll(ctx context.Context, own, claim bool) (int, []string, []svc.RunRecord, error) {
	n := 0
	var nodes []string
	var claimed []svc.RunRecord
	err := s.do(ctx, "", func(ctx context.Context) error {
		active := s.prefix + "::active"
		t := time.Now()
		now := formatTime(t)
		// SSCAN visits every member present throughout, even as the script
		// removes the ones it handles.
		it := s.c.SScan(ctx, active, 0, "", readBatch).Iterator()
		for it.Next(ctx) {
			id := it.Val()
			owner, done, rec, err := s.interrupt(ctx, id, now, t, own, claim)
			if err != nil {
				return err
			}
			if rec != nil {
				claimed = append(claimed, *rec)
				continue
			}
			n += done
			if done == 1 && owner != "" && !slices.Contains(nodes, owner) {
				nodes = append(nodes, owner)
			}
		}
		if err := it.Err(); err != nil {
			return svc.Wrap(svc.KindRuntime, err, "redisstore: scan active runs")
		}
		return nil
	})
	if err != nil {
		return 0, nil, nil, err
	}
	svc.SortClaimed(claimed)
	return n, nodes, claimed, nil
}

// interrupt fails one run as Interrupt does and answers 1, or 0 when it
// was terminal, gone, or owned by a live node (this one too unless own);
// or, when claim is set and the run has a task, claims it instead and
// returns its record as the claim left it. The result names the target
// and the owner, read first; the script checks they are still the run's.
func (s *Store) interrupt(ctx context.Context, id, now string, t time.Time, own, claim bool) (string, int, *svc.RunRecord, error) {
	mode, claimArg := "others", "0"
	if own {
		mode = "all"
	}
	if claim {
		claimArg = "1"
	}
	for {
		vals, err := s.c.HMGet(ctx, s.recKey(id), "target", "owner").Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return "", 0, nil, s.fail(err, "interrupt", id)
		}
		target, owner := "", ""
		if len(vals) == 2 {
			target, _ = vals[0].(string)
			owner, _ = vals[1].(string)
		}
		result := svc.InterruptedResult(target)
		if owner != "" && owner != s.node {
			result = svc.NodeLostResult(target, owner)
		}
		args := append([]any{id, now, s.ttl.Milliseconds(), target, []byte(result), owner, s.node, mode, s.prefix + "::node:", claimArg},
			eventFields(svc.InterruptedEvent(t))...)
		res, err := interruptScript.Run(ctx, s.c, s.keys(id), args...).Result()
		if err != nil {
			return "", 0, nil, s.fail(err, "interrupt", id)
		}
		if claimed, ok := res.([]any); ok {
			rec, err := decodeClaim(claimed)
			if err != nil {
				return "", 0, nil, svc.Wrap(svc.KindRuntime, err, fmt.Sprintf("redisstore: claim run %q", id))
			}
			return owner, 0, rec, nil
		}
		done, _ := res.(int64)
		switch done {
		case 2:
			continue
		case 3:
			return owner, 0, nil, nil
		}
		return owner, int(done), nil, nil
	}
}

// decodeClaim parses interruptScript's answer for a claimed run: {4, the
// record's fields and values, the step log's length}.
func decodeClaim(res []any) (*svc.RunRecord, error) {
	code, _ := res[0].(int64)
	if len(res) != 3 || code != 4 {
		return nil, fmt.Errorf("unexpected reply %v", res)
	}
	flat, _ := res[1].([]any)
	h := make(map[string]string, len(flat)/2)
	for i := 0; i+1 < len(flat); i += 2 {
		k, _ := flat[i].(string)
		v, _ := flat[i+1].(string)
		h[k] = v
	}
	rec, err := decodeRecord(h)
	if err != nil {
		return nil, err
	}
	rec.Steps, _ = res[2].(int64)
	return &rec, nil
}

// keepLease renews the node's lease every third of its TTL until Close. A
// renewal that fails is retried at the next tick: should the lease lapse
// meanwhile, the other nodes fail this node's runs, and its own later
// writes to them are refused (a terminal run takes no change).
func (s *Store) keepLease() {
	defer s.wg.Done()
	t := time.NewTicker(s.lease / 3)
	defer t.Stop()
	for {
		select {
		case <-s.leaseCtx.Done():
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(s.leaseCtx, s.lease/3)
			_ = s.renew(ctx)
			cancel()
		}
	}
}

// ServeNodes lists the nodes whose lease is current, this one included,
// sorted by node id.
func (s *Store) ServeNodes(ctx context.Context) ([]svc.ServeNode, error) {
	var nodes []svc.ServeNode
	err := s.do(ctx, "", func(ctx context.Context) error {
		lead := s.leaseKey("")
		it := s.c.Scan(ctx, 0, globEscape(lead)+"*", readBatch).Iterator()
		for it.Next(ctx) {
			at, err := s.c.Get(ctx, it.Val()).Result()
			if errors.Is(err, redis.Nil) {
				continue // expired since the scan saw it
			}
			if err != nil {
				return svc.Wrap(svc.KindRuntime, err, "redisstore: read node leases")
			}
			n := svc.ServeNode{NodeID: strings.TrimPrefix(it.Val(), lead)}
			at, _, _ = strings.Cut(at, " ")
			n.LastRenewal, _ = time.Parse(time.RFC3339Nano, at)
			n.Self = n.NodeID == s.node
			nodes = append(nodes, n)
		}
		if err := it.Err(); err != nil {
			return svc.Wrap(svc.KindRuntime, err, "redisstore: scan node leases")
		}
		return nil
	})
	slices.SortFunc(nodes, func(a, b svc.ServeNode) int { return strings.Compare(a.NodeID, b.NodeID) })
	return nodes, err
}

// NodeInUseError is Open's error when another Store, live, holds the lease
// of Options.NodeID: two nodes of one id would fail each other's runs as
// their own. It names the id and when the lease expires, should that
// Store stop renewing it.
type NodeInUseError struct {
	NodeID string
	// Expires is how long the lease has left without a renewal.
	Expires time.Duration
}

func (e *NodeInUseError) Error() string {
	return fmt.Sprintf("redisstore: node id %q is in use: its lease is held by another node, which renews it while it runs "+
		"(it expires in %s otherwise); give this node another node id, or stop that node first",
		e.NodeID, e.Expires.Round(time.Millisecond))
}

// renew takes or renews the node's lease for another LeaseTTL, unless
// another Store holds it (*NodeInUseError).
func (s *Store) renew(ctx context.Context) error {
	n, err := leaseScript.Run(ctx, s.c, []string{s.leaseKey(s.node)},
		formatTime(time.Now())+" "+s.token, s.token, s.lease.Milliseconds()).Int64()
	if err != nil {
		return err
	}
	if n != -3 {
		return &NodeInUseError{NodeID: s.node, Expires: time.Duration(max(n, 0)) * time.Millisecond}
	}
	return nil
}

func (s *Store) leaseKey(node string) string { return s.prefix + "::node:" + node }

// defaultNodeID is host-pid-random: unique per Open, readable in a log.
func defaultNodeID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "node"
	}
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), randomHex()[:6])
}

// ListRuns returns a page of runs, newest first; see svc.RunLister and
// package runlist for the order and the cursor.
func (s *Store) ListRuns(ctx context.Context, f svc.RunFilter) (svc.RunPage, error) {
	q, err := runlist.Parse("redisstore", f)
	if err != nil {
		return svc.RunPage{}, err
	}
	var page svc.RunPage
	err = s.do(ctx, "", func(ctx context.Context) error {
		rows, err := s.list(ctx, q)
		if err != nil {
			return svc.Wrap(svc.KindRuntime, err, "redisstore: list runs")
		}
		page = q.Page(rows)
		return nil
	})
	return page, err
}

// listFields are the record fields a listing reads: all but the result.
var listFields = []string{"run_id", "target", "kind", "state", "reason", "trace_id", "tenant", "progress", "created_at", "updated_at"}

// list reads the rows of q's page: batches of index entries after the
// cursor, then their records, until the page is full or the index ends.
// Each batch goes on from the last entry of the one before (keyset, like the
// pages), so entries added or dropped meanwhile shift nothing.
func (s *Store) list(ctx context.Context, q runlist.Query) ([]runlist.Row, error) {
	batch := min(max(q.Fetch(), 64), svc.MaxRunPage)
	var rows []runlist.Row
	after := q.After
	for len(rows) < q.Fetch() {
		entries, more, err := s.entriesAfter(ctx, after, batch)
		if err != nil || len(entries) == 0 {
			return rows, err
		}
		cmds, err := s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, e := range entries {
				p.HMGet(ctx, s.recKey(e.RunID), listFields...)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		var gone []any
		for i, e := range entries {
			vals := cmds[i].(*redis.SliceCmd).Val()
			h := make(map[string]string, len(listFields))
			for j, v := range vals {
				if str, ok := v.(string); ok {
					h[listFields[j]] = str
				}
			}
			if len(h) == 0 {
				gone = append(gone, e.RunID)
				continue
			}
			rec, err := decodeRecord(h)
			if err != nil {
				return nil, fmt.Errorf("decode run %q: %w", e.RunID, err)
			}
			if q.Keeps(rec.State, rec.Tenant) {
				rows = append(rows, runlist.Row{Pos: e, Summary: runlist.Summary(&rec)})
				if len(rows) == q.Fetch() {
					break
				}
			}
		}
		if len(gone) > 0 {
			args := append([]any{s.prefix}, gone...)
			if err := dropGoneScript.Run(ctx, s.c, []string{s.createdKey(), s.expiringKey()}, args...).Err(); err != nil {
				return nil, err
			}
		}
		if !more {
			break
		}
		after = &entries[len(entries)-1]
	}
	return rows, nil
}

// entriesAfter reads index entries listed after the position after (from
// the newest when nil), in listing order: up to n of those with an older
// score, preceded by those that share after's score but have a smaller id
// (ties are rare; all of them are read). more says the index may go on.
func (s *Store) entriesAfter(ctx context.Context, after *runlist.Position, n int) (entries []runlist.Position, more bool, err error) {
	key := s.createdKey()
	older := &redis.ZRangeBy{Max: "+inf", Min: "-inf", Count: int64(n)}
	var ties *redis.StringSliceCmd
	var next *redis.ZSliceCmd
	_, err = s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		if after != nil {
			score := strconv.FormatInt(after.CreatedUS, 10)
			ties = p.ZRevRangeByScore(ctx, key, &redis.ZRangeBy{Max: score, Min: score})
			older.Max = "(" + score
		}
		next = p.ZRevRangeByScoreWithScores(ctx, key, older)
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	if ties != nil {
		for _, id := range ties.Val() {
			if id < after.RunID {
				entries = append(entries, runlist.Position{CreatedUS: after.CreatedUS, RunID: id})
			}
		}
	}
	for _, z := range next.Val() {
		id, _ := z.Member.(string)
		// Scores are microseconds, exact in a float64 for ±285 years
		// around 1970.
		entries = append(entries, runlist.Position{CreatedUS: int64(math.Round(z.Score)), RunID: id})
	}
	return entries, len(next.Val()) == n, nil
}

// do runs fn unless the store is closed, holding the read lock so Close
// waits for it, and answers an id that cannot name a run with RegistryError.
func (s *Store) do(ctx context.Context, runID string, fn func(context.Context) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return errClosed()
	}
	if strings.Contains(runID, ":") {
		return notFound(runID)
	}
	return fn(ctx)
}

// reply is what a change script answers: {0, seq} on success, {1, 0} for
// an unknown run, {2, state code} for a refused change.
type reply struct {
	code  int64
	seq   int64
	state svc.RunState // the run's state, on a refusal
}

// run executes a change script on runID; what names the change in errors.
func (s *Store) run(ctx context.Context, script *redis.Script, runID, what string, args ...any) (reply, error) {
	res, err := s.eval(ctx, script, s.keys(runID), args...).Int64Slice()
	if err != nil {
		return reply{}, s.fail(err, "write "+what+" of", runID)
	}
	if len(res) != 2 || res[0] < 0 || res[0] > 2 {
		return reply{}, svc.Errorf(svc.KindRuntime, "redisstore: write %s of run %q: unexpected reply %v", what, runID, res)
	}
	r := reply{code: res[0]}
	switch r.code {
	case 0:
		r.seq = res[1]
	case 1:
		return r, notFound(runID)
	case 2:
		r.state = stateNames[res[1]]
	}
	return r, nil
}

// refused is the RunStateError for a change the script refused because the
// run is terminal.
func refused(runID string, r reply, what string) error {
	return svc.Errorf(svc.KindRunState, "run %q is %s: %s refused", runID, r.state, what)
}

func (s *Store) fail(err error, what, runID string) error {
	return svc.Wrap(svc.KindRuntime, err, fmt.Sprintf("redisstore: %s run %q", what, runID))
}

func (s *Store) recKey(runID string) string { return s.prefix + ":" + runID }
func (s *Store) evKey(runID string) string  { return s.prefix + ":" + runID + ":events" }

// stepsKey is the run's step log; the scripts name it from the record key.
func (s *Store) stepsKey(runID string) string { return s.recKey(runID) + ":steps" }

// keys are the KEYS of every run script: record, events, active set,
// created index, expiring set.
func (s *Store) keys(runID string) []string {
	return []string{s.recKey(runID), s.evKey(runID), s.prefix + "::active", s.createdKey(), s.expiringKey()}
}

func (s *Store) createdKey() string  { return s.prefix + "::created" }
func (s *Store) expiringKey() string { return s.prefix + "::expiring" }

// stateNames decodes the state a script reports with a refusal (scripts
// return numbers, so the Int64Slice reply stays uniform).
var stateNames = map[int64]svc.RunState{1: svc.RunPending, 2: svc.RunRunning, 3: svc.RunCompleted, 4: svc.RunFailed, 5: svc.RunCancelled, 6: svc.RunWaiting}

func notFound(runID string) error { return svc.Errorf(svc.KindRegistry, "unknown run %q", runID) }

func errClosed() error { return svc.Errorf(svc.KindShuttingDown, "redisstore: store is closed") }

func formatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func seqID(seq int64, sub int) string { return strconv.FormatInt(seq, 10) + "-" + strconv.Itoa(sub) }

func parseInt(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// eventFields are the stream fields of ev; empty ones are left out.
func eventFields(ev svc.RunEvent) []any {
	if ev.Timestamp.IsZero() {
		ev.Timestamp = time.Now()
	}
	f := []any{"type", string(ev.Type), "ts", formatTime(ev.Timestamp)}
	for _, kv := range [][2]string{{"agent", ev.Agent}, {"task_id", ev.TaskID}, {"error", ev.Error}} {
		if kv[1] != "" {
			f = append(f, kv[0], kv[1])
		}
	}
	if ev.Request != nil {
		b, _ := json.Marshal(ev.Request) // plain fields: cannot fail
		f = append(f, "request", string(b))
	}
	return f
}

// decodeEntry parses an events stream entry: an event ("<seq>-0") or the
// end marker ("<seq>-1"). RunID is left to the caller.
func decodeEntry(id string, values map[string]any) (ev svc.RunEvent, end bool, err error) {
	seqPart, sub, ok := strings.Cut(id, "-")
	seq, err := strconv.ParseInt(seqPart, 10, 64)
	if !ok || err != nil || seq < 0 {
		return ev, false, fmt.Errorf("bad entry id %q", id)
	}
	str := func(k string) string { v, _ := values[k].(string); return v }
	switch sub {
	case "1":
		if _, ok := values["end"]; !ok {
			return ev, false, fmt.Errorf("entry %q: marker without end field", id)
		}
		return ev, true, nil
	case "0":
	default:
		return ev, false, fmt.Errorf("bad entry id %q", id)
	}
	if seq == 0 || str("type") == "" {
		return ev, false, fmt.Errorf("entry %q: no event", id)
	}
	ts, err := time.Parse(time.RFC3339Nano, str("ts"))
	if err != nil {
		return ev, false, fmt.Errorf("entry %q: timestamp: %w", id, err)
	}
	ev = svc.RunEvent{Seq: seq, Type: svc.RunEventType(str("type")), Agent: str("agent"),
		TaskID: str("task_id"), Error: str("error"), Timestamp: ts}
	if r := str("request"); r != "" {
		ev.Request = new(svc.WaitRequest)
		if err := json.Unmarshal([]byte(r), ev.Request); err != nil {
			return svc.RunEvent{}, false, fmt.Errorf("entry %q: request: %w", id, err)
		}
	}
	return ev, false, nil
}

// decodeRecord parses a record hash.
func decodeRecord(h map[string]string) (svc.RunRecord, error) {
	rec := svc.RunRecord{RunID: h["run_id"], Target: h["target"], Kind: svc.TargetKind(h["kind"]), State: svc.RunState(h["state"]), Reason: h["reason"],
		TraceID: h["trace_id"], Tenant: h["tenant"]} // both absent in records of earlier versions
	if rec.RunID == "" || !rec.State.Valid() {
		return svc.RunRecord{}, fmt.Errorf("corrupt record (run_id %q, state %q)", rec.RunID, rec.State)
	}
	var err error
	if rec.CreatedAt, err = time.Parse(time.RFC3339Nano, h["created_at"]); err != nil {
		return svc.RunRecord{}, fmt.Errorf("created_at: %w", err)
	}
	if rec.UpdatedAt, err = time.Parse(time.RFC3339Nano, h["updated_at"]); err != nil {
		return svc.RunRecord{}, fmt.Errorf("updated_at: %w", err)
	}
	if p, ok := h["progress"]; ok {
		rec.Progress = new(svc.RunProgress)
		if err := json.Unmarshal([]byte(p), rec.Progress); err != nil {
			return svc.RunRecord{}, fmt.Errorf("progress: %w", err)
		}
	}
	if r, ok := h["result"]; ok {
		rec.Result = json.RawMessage(r)
	}
	if task := h["task"]; task != "" { // absent in runs created without one, and by earlier versions
		rec.Task = json.RawMessage(task)
	}
	if r, ok := h["resumed"]; ok { // absent until the first claim
		n, err := strconv.Atoi(r)
		if err != nil || n < 0 {
			return svc.RunRecord{}, fmt.Errorf("resumed %q: not a count", r)
		}
		rec.Resumed = n
	}
	return rec, nil
}

// redactURL names a URL without its password, for errors.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable URL)"
	}
	return strconv.Quote(u.Redacted())
}

// redactErr is err's text with any password of raw masked.
func redactErr(err error, raw string) string {
	msg := err.Error()
	if u, perr := url.Parse(raw); perr == nil && u.User != nil {
		if pw, ok := u.User.Password(); ok && pw != "" {
			msg = strings.ReplaceAll(msg, pw, "xxxxx")
		}
	}
	return msg
}

// Package batch runs batches (POST /batches): it stores a batch's tasks in
// the run store (svc.BatchStore) before it answers, runs them through the
// runtime's streamed gather (the same window, rate limits and fleet
// dispatch as a gather) and stores each result as it finishes, so a batch
// outlives the request that made it and, claimed through the owner of its
// record, the process that ran it.
//
// A Manager serves svc.BatchBackend. Each batch it owns has one runner
// goroutine, which the Manager starts and Close stops; nothing else lives
// past a call.
package batch

import (
	"context"
	"encoding/json"
	"errors"
	"iter"
	"sync"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/agent"
)

// Runner is what a Manager runs batches on: the runtime.
type Runner interface {
	svc.GatherStreamer
	AgentSchema(ctx context.Context, name string) (svc.AgentSchema, error)
}

// Config configures New.
type Config struct {
	Store  svc.BatchStore
	Runner Runner
	// Owner names this process in the batches it owns: the node id of a
	// shared store, then "/" and a token of this process's life, so a
	// restarted node tells its batches of an earlier life from its own.
	// Empty: a new UUIDv7.
	Owner string
	Log   *zap.Logger
	// ClaimEvery, when positive, claims the batches of dead owners that
	// often (a shared store: half its lease); Start claims once anyway.
	ClaimEvery time.Duration
	// Poll is how often a follower of results and a runner watching for a
	// cancel made elsewhere look at the store (default 200 ms).
	Poll time.Duration
	// ProviderPoll is how often a batch of mode provider asks the
	// provider about its provider batches (DefaultProviderPoll when 0),
	// bounded to MinProviderPoll..MaxProviderPoll.
	ProviderPoll time.Duration
	// ProviderPart is how many tasks go in one provider batch
	// (DefaultProviderPart when 0; OpenAI takes up to 50,000 requests a
	// batch, Anthropic 100,000).
	ProviderPart int
	// Callbacks, when set, takes a batch's callback_url (package
	// webhook); without it a batch with one is refused.
	Callbacks svc.Callbacks
}

// Provider polling.
const (
	DefaultProviderPoll = 30 * time.Second
	MinProviderPoll     = 100 * time.Millisecond
	MaxProviderPoll     = 10 * time.Minute
	DefaultProviderPart = 10_000
)

// OneCaller is a Runner that can run batches of mode provider: it gives
// an agent's one model call (see agent.OneCall). The runtime is one.
type OneCaller interface {
	OneCall(ctx context.Context, agent string) (*agent.OneCall, error)
}

// Manager serves batches; see the package doc.
type Manager struct {
	cfg    Config
	log    *zap.Logger
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	closed  bool
	runners map[string]context.CancelFunc
}

var _ svc.BatchBackend = (*Manager)(nil)

// New returns a Manager; Start resumes the batches it may claim.
func New(cfg Config) (*Manager, error) {
	if cfg.Store == nil || cfg.Runner == nil {
		return nil, errors.New("batch: New: a store and a runner are required")
	}
	if cfg.Owner == "" {
		cfg.Owner = newID()
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 200 * time.Millisecond
	}
	if cfg.ProviderPoll == 0 {
		cfg.ProviderPoll = DefaultProviderPoll
	}
	cfg.ProviderPoll = min(max(cfg.ProviderPoll, MinProviderPoll), MaxProviderPoll)
	if cfg.ProviderPart <= 0 {
		cfg.ProviderPart = DefaultProviderPart
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Manager{cfg: cfg, log: cfg.Log, ctx: ctx, cancel: cancel, runners: map[string]context.CancelFunc{}}, nil
}

func newID() string {
	id, err := uuid.NewV7()
	if err != nil {
		return uuid.NewString()
	}
	return id.String()
}

// Start claims the batches a stopped process left unfinished and runs
// them, then, with ClaimEvery, keeps claiming those of dead owners.
func (m *Manager) Start(ctx context.Context) error {
	if err := m.claim(ctx); err != nil {
		return err
	}
	if m.cfg.ClaimEvery > 0 {
		m.wg.Go(func() {
			t := time.NewTicker(m.cfg.ClaimEvery)
			defer t.Stop()
			for {
				select {
				case <-m.ctx.Done():
					return
				case <-t.C:
				}
				if err := m.claim(m.ctx); err != nil && m.ctx.Err() == nil {
					m.log.Warn("claiming the batches of stopped owners failed; trying again", zap.Error(err))
				}
			}
		})
	}
	return nil
}

func (m *Manager) claim(ctx context.Context) error {
	recs, err := m.cfg.Store.ClaimBatches(ctx, m.cfg.Owner)
	if err != nil {
		return svc.Wrap(svc.KindRuntime, err, "batch: claim")
	}
	for _, rec := range recs {
		m.log.Warn("batch left unfinished by a stopped process resumed", zap.String("batch_id", rec.BatchID),
			zap.Int64("done", rec.Counts.Succeeded+rec.Counts.Failed), zap.Int64("total", rec.Counts.Total),
			zap.Int("resumed", rec.Resumed))
		m.start(rec)
	}
	return nil
}

// Close stops the runners (the batches stay as they are in the store, for
// the next process to resume) and waits for them.
func (m *Manager) Close() error {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.cancel()
	m.wg.Wait()
	return nil
}

// Running is how many batches this process runs now.
func (m *Manager) Running() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.runners)
}

// start runs rec on its own goroutine, unless the manager is closed.
func (m *Manager) start(rec svc.BatchRecord) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	if _, ok := m.runners[rec.BatchID]; ok {
		return
	}
	ctx, cancel := context.WithCancel(m.ctx)
	m.runners[rec.BatchID] = cancel
	m.wg.Go(func() {
		defer func() {
			m.mu.Lock()
			delete(m.runners, rec.BatchID)
			m.mu.Unlock()
			cancel()
		}()
		(&runner{m: m, rec: rec}).run(ctx)
	})
}

// storedTask is a task as a chunk keeps it: the TaskSpec, or, for a line
// that could not be read, what could be of it and why.
type storedTask struct {
	svc.TaskSpec
	Invalid *svc.ErrorInfo `json:"invalid,omitempty"`
}

func encodeTask(t svc.TaskSpec) (json.RawMessage, error) {
	st := storedTask{TaskSpec: t}
	if t.Invalid != nil {
		st.TaskSpec = svc.TaskSpec{ID: t.ID, RequestID: t.RequestID, Input: json.RawMessage("null")}
		st.Invalid = svc.ErrorInfoOf(t.Invalid)
	}
	if len(st.Input) == 0 {
		st.Input = json.RawMessage("null")
	}
	return json.Marshal(st)
}

func decodeTask(raw json.RawMessage) svc.TaskSpec {
	var st storedTask
	if err := json.Unmarshal(raw, &st); err != nil {
		return svc.TaskSpec{Invalid: svc.Wrap(svc.KindRuntime, err, "batch: a stored task is corrupt")}
	}
	t := st.TaskSpec
	if st.Invalid != nil {
		t.Invalid = st.Invalid.Err()
	}
	return t
}

// SubmitBatch implements svc.BatchBackend: it checks the target, the
// concurrency and the mode (a batch of mode provider needs an agent whose
// run is one model call), stores every task, chunk by chunk, then the
// batch's record, and starts it. An error (the client went away
// half-way) removes what was stored.
func (m *Manager) SubmitBatch(ctx context.Context, target string, tasks iter.Seq[svc.TaskSpec], opts svc.BatchOptions) (svc.BatchAccepted, error) {
	if target == "" {
		return svc.BatchAccepted{}, svc.Errorf(svc.KindSpecValidation, "batch: target is required (an agent name)")
	}
	mode, err := svc.CheckBatchMode(opts.Mode)
	if err != nil {
		return svc.BatchAccepted{}, err
	}
	if mode == svc.BatchProvider {
		oc, ok := m.cfg.Runner.(OneCaller)
		if !ok {
			return svc.BatchAccepted{}, svc.Errorf(svc.KindSpecValidation, "batch: this server cannot run batches of mode provider")
		}
		if _, err := oc.OneCall(ctx, target); err != nil {
			return svc.BatchAccepted{}, err
		}
	} else if _, err := m.cfg.Runner.AgentSchema(ctx, target); err != nil {
		return svc.BatchAccepted{}, err
	}
	if opts.MaxConcurrency == 0 {
		opts.MaxConcurrency = svc.DefaultGatherConcurrency
	}
	conc, err := svc.CheckGatherConcurrency(opts.MaxConcurrency)
	if err != nil {
		return svc.BatchAccepted{}, err
	}
	if mode == svc.BatchRuntime {
		mode = "" // the record's default
	}
	if opts.CallbackURL != "" {
		if m.cfg.Callbacks == nil {
			return svc.BatchAccepted{}, svc.Errorf(svc.KindSpecValidation, "callback_url: this server sends no callbacks (start svc serve with --webhook-key-file)")
		}
		if err := m.cfg.Callbacks.CheckCallback(ctx, opts.CallbackURL); err != nil {
			return svc.BatchAccepted{}, err
		}
	}
	if tasks == nil {
		return svc.BatchAccepted{}, svc.Wrap(svc.KindSpecValidation, svc.ErrNoTasks, "batch")
	}
	id := newID()
	st := m.cfg.Store
	var chunk []json.RawMessage
	var n, total int
	var stored bool
	fail := func(err error) (svc.BatchAccepted, error) {
		if stored {
			// Without its record the batch is invisible; its chunks go.
			if derr := st.DeleteBatch(context.WithoutCancel(ctx), id); derr != nil {
				m.log.Warn("removing the chunks of a batch whose upload failed", zap.String("batch_id", id), zap.Error(derr))
			}
		}
		return svc.BatchAccepted{}, err
	}
	flush := func() error {
		if len(chunk) == 0 {
			return nil
		}
		stored = true
		if err := st.PutBatchChunk(ctx, id, n, chunk); err != nil {
			return err
		}
		n++
		chunk = chunk[:0]
		return nil
	}
	for t := range tasks {
		raw, err := encodeTask(t)
		if err != nil {
			return fail(svc.Wrap(svc.KindSpecValidation, err, "batch: task "+itoa(total)))
		}
		chunk = append(chunk, raw)
		total++
		if len(chunk) == svc.BatchChunkSize {
			if err := flush(); err != nil {
				return fail(err)
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return fail(svc.Wrap(svc.KindCancelled, err, "batch: reading the tasks"))
	}
	if total == 0 {
		return fail(svc.Wrap(svc.KindSpecValidation, svc.ErrNoTasks, "batch"))
	}
	if err := flush(); err != nil {
		return fail(err)
	}
	rec := svc.BatchRecord{BatchStatus: svc.BatchStatus{BatchID: id, Target: target, State: svc.BatchQueued,
		MaxConcurrency: conc, Mode: mode, Counts: svc.BatchCounts{Total: int64(total)}}, Owner: m.cfg.Owner}
	if opts.CallbackURL != "" {
		// Stored before the record, so that no batch ends without its
		// callback; one whose batch is never stored ends failed.
		if err := m.cfg.Callbacks.ArmCallback(ctx, svc.CallbackBatch, id, opts.CallbackURL); err != nil {
			return fail(err)
		}
	}
	if err := st.CreateBatch(ctx, rec); err != nil {
		return fail(err)
	}
	m.start(rec)
	return svc.BatchAccepted{BatchID: id, Total: int64(total)}, nil
}

// BatchStatus implements svc.BatchBackend.
func (m *Manager) BatchStatus(ctx context.Context, batchID string) (svc.BatchStatus, error) {
	rec, err := m.cfg.Store.GetBatch(ctx, batchID)
	if err == nil && m.cfg.Callbacks != nil {
		rec.Callback = m.cfg.Callbacks.Callback(ctx, svc.CallbackBatch, batchID)
	}
	return rec.BatchStatus, err
}

// ended tells the callbacks that a batch may have ended.
func (m *Manager) ended(batchID string) {
	if m.cfg.Callbacks != nil {
		m.cfg.Callbacks.Ended(svc.CallbackBatch, batchID)
	}
}

// ListBatches implements svc.BatchBackend.
func (m *Manager) ListBatches(ctx context.Context, cursor string, limit int) (svc.BatchPage, error) {
	return m.cfg.Store.ListBatches(ctx, cursor, limit)
}

// CancelBatch implements svc.BatchBackend: the batch is cancelled in the
// store (its owner, wherever it runs, sees it there and stops), and its
// runner here, if it runs here, is stopped.
func (m *Manager) CancelBatch(ctx context.Context, batchID string) error {
	rec, err := m.cfg.Store.GetBatch(ctx, batchID)
	if err != nil {
		return err
	}
	if !rec.State.Terminal() {
		if err := m.cfg.Store.SetBatchState(ctx, batchID, svc.BatchCancelled, "cancelled"); err != nil && svc.KindOf(err) != svc.KindRunState {
			return err
		}
	}
	m.mu.Lock()
	stop := m.runners[batchID]
	m.mu.Unlock()
	if stop != nil {
		stop()
	}
	m.ended(batchID)
	return nil
}

// resultPage is how many results one read of the store returns.
const resultPage = 256

// BatchResults implements svc.BatchBackend. By index with follow, results
// come in index order without a gap: a result waits for those before it
// (until the batch ends; then the rest come as they are).
func (m *Manager) BatchResults(ctx context.Context, batchID string, order svc.BatchOrder, after int64, follow bool) iter.Seq2[svc.BatchResult, error] {
	return func(yield func(svc.BatchResult, error) bool) {
		if order == "" {
			order = svc.BatchByIndex
		}
		if order != svc.BatchByIndex && order != svc.BatchByFinish {
			yield(svc.BatchResult{}, svc.Errorf(svc.KindSpecValidation, "order %q: want index or finish", order))
			return
		}
		if after < -1 || (order == svc.BatchByFinish && after < 0) {
			yield(svc.BatchResult{}, svc.Errorf(svc.KindSpecValidation, "after %d: want an index (-1 for none) or a seq (0 for none)", after))
			return
		}
		st := m.cfg.Store
		rec, err := st.GetBatch(ctx, batchID)
		if err != nil {
			yield(svc.BatchResult{}, err)
			return
		}
		ended := rec.State.Terminal() || !follow
		for {
			page, err := st.BatchResults(ctx, batchID, order, after, resultPage)
			if err != nil {
				yield(svc.BatchResult{}, err)
				return
			}
			// Without a gap, the page goes out whole.
			if follow && !ended && order == svc.BatchByIndex {
				for i, r := range page {
					if r.Index != after+1+int64(i) {
						page = page[:i]
						break
					}
				}
			}
			sent := 0
			for i, r := range page {
				r.More = i+1 < len(page)
				if !yield(r, nil) {
					return
				}
				sent++
				if order == svc.BatchByIndex {
					after = r.Index
				} else {
					after = r.Seq
				}
			}
			if sent == resultPage {
				continue // more to read now
			}
			if ended {
				return
			}
			if sent > 0 {
				continue
			}
			select {
			case <-ctx.Done():
				yield(svc.BatchResult{}, svc.Wrap(svc.KindCancelled, ctx.Err(), "batch "+batchID+": following results"))
				return
			case <-m.ctx.Done():
				yield(svc.BatchResult{}, svc.Errorf(svc.KindShuttingDown, "batch %s: following results: the server is shutting down; follow again with after=%d", batchID, after))
				return
			case <-time.After(m.cfg.Poll):
			}
			rec, err := st.GetBatch(ctx, batchID)
			if err != nil {
				yield(svc.BatchResult{}, err)
				return
			}
			// One more read once it has ended: results stored before the
			// state changed are all there.
			ended = rec.State.Terminal()
		}
	}
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

package svc

import (
	"context"
	"encoding/json"
	"iter"
	"time"
)

// Batches (POST /batches) are gathers that outlive the request: the tasks
// are stored in the run store before the answer (202 {batch_id}), run by
// the process that owns the batch, and their results stored as they
// finish, so the client may go away and come back for them, and a restart
// (or another serve node, through the owner lease) goes on where the batch
// stopped. Tasks and results are kept in chunks of BatchChunkSize, so the
// memory a batch takes does not grow with its size.

// BatchState is the lifecycle state of a batch:
//
//	queued → running → completed | failed | cancelled
//	queued → cancelled | failed
type BatchState string

// Batch states.
const (
	BatchQueued    BatchState = "queued"
	BatchRunning   BatchState = "running"
	BatchCompleted BatchState = "completed"
	BatchCancelled BatchState = "cancelled"
	BatchFailed    BatchState = "failed"
)

// Terminal reports whether s is final.
func (s BatchState) Terminal() bool {
	return s == BatchCompleted || s == BatchCancelled || s == BatchFailed
}

// Valid reports whether s is one of the five states.
func (s BatchState) Valid() bool {
	switch s {
	case BatchQueued, BatchRunning, BatchCompleted, BatchCancelled, BatchFailed:
		return true
	}
	return false
}

// CanMove reports whether a batch may go from s to next.
func (s BatchState) CanMove(next BatchState) bool {
	switch s {
	case BatchQueued:
		return next == BatchRunning || next == BatchCancelled || next == BatchFailed
	case BatchRunning:
		return next.Terminal()
	}
	return false
}

// BatchMode is how a batch makes its tasks' model calls.
type BatchMode string

// Batch modes.
const (
	// BatchRuntime runs each task as a gather does (the default; the
	// empty mode is this one).
	BatchRuntime BatchMode = "runtime"
	// BatchProvider sends the tasks' model calls to the provider's batch
	// API (OpenAI's Batch API, Anthropic's Message Batches): half the
	// price, answered within the provider's window (up to 24 h). Only for
	// an agent whose run is one model call: no tools, MCP servers,
	// builtin tools or hooks, and a model whose provider has a batch API
	// (svc.BatchModel).
	BatchProvider BatchMode = "provider"
)

// CheckBatchMode checks a requested mode: "" is BatchRuntime.
func CheckBatchMode(m BatchMode) (BatchMode, error) {
	switch m {
	case "", BatchRuntime:
		return BatchRuntime, nil
	case BatchProvider:
		return m, nil
	}
	return "", Errorf(KindSpecValidation, "mode %q: want runtime or provider", m)
}

// BatchChunkSize is how many tasks one stored chunk holds: tasks are
// written and read a chunk at a time.
const BatchChunkSize = 256

// BatchCounts counts a batch's tasks.
type BatchCounts struct {
	Total     int64 `json:"total"`
	Succeeded int64 `json:"succeeded"`
	Failed    int64 `json:"failed"`
	// Running is how many tasks the owner had in flight at its last
	// write of results.
	Running int64 `json:"running"`
}

// BatchStatus is what GET /batches/{id} serves and a row of GET /batches.
type BatchStatus struct {
	BatchID        string     `json:"batch_id"`
	Target         string     `json:"target"`
	State          BatchState `json:"state"`
	MaxConcurrency int        `json:"max_concurrency"`
	// Mode is BatchProvider for a batch whose model calls go to the
	// provider's batch API; absent for BatchRuntime.
	Mode       BatchMode   `json:"mode,omitempty"`
	Counts     BatchCounts `json:"counts"`
	TokensUsed int64       `json:"tokens_used"`
	CostUSD    float64     `json:"cost_usd"`
	// Reason says why a batch failed or was cancelled; absent otherwise.
	Reason string `json:"reason,omitempty"`
	// Resumed counts the times another process took the batch over from
	// one that stopped; absent for a batch never resumed.
	Resumed int `json:"resumed,omitempty"`
	// Callback is the delivery log of the batch's callback_url; absent
	// without one. Not kept by a BatchStore (svc.WebhookStore keeps it).
	Callback  *CallbackStatus `json:"callback,omitempty"`
	CreatedAt time.Time       `json:"created_at"`
	UpdatedAt time.Time       `json:"updated_at"`
}

// BatchRecord is everything a BatchStore keeps about a batch but its
// tasks and results.
type BatchRecord struct {
	BatchStatus
	// Owner is the node (or process) that runs the batch; see
	// BatchStore.ClaimBatches.
	Owner string `json:"owner,omitempty"`
	// Provider is what a batch of mode provider keeps of its provider
	// batches (their ids, and which tasks each holds), so that the
	// process that resumes it polls them instead of submitting again:
	// a JSON value its runner alone reads (BatchStore.SetBatchProvider).
	Provider json.RawMessage `json:"provider,omitempty"`
}

// BatchResult is one stored result of a batch.
type BatchResult struct {
	// Index is the task's place in the batch, from 0.
	Index int64 `json:"index"`
	// Seq is the result's place in finish order, from 1, assigned by the
	// store.
	Seq int64 `json:"seq"`
	// Result is the AgentResult JSON, kept byte-exact.
	Result json.RawMessage `json:"result"`
	// Success, Tokens and Cost are what the store counts; they are not
	// read back.
	Success bool    `json:"-"`
	Tokens  int64   `json:"-"`
	Cost    float64 `json:"-"`
	// More is a hint of BatchBackend.BatchResults, never stored nor on
	// the wire: another result follows at once, so a writer may hold this
	// one back and send both together.
	More bool `json:"-"`
}

// BatchOrder is the order GET /batches/{id}/results serves.
type BatchOrder string

// Result orders.
const (
	// BatchByIndex serves the results by task index; after is the last
	// index read.
	BatchByIndex BatchOrder = "index"
	// BatchByFinish serves them in the order they finished; after is the
	// last seq read (the count of results read before).
	BatchByFinish BatchOrder = "finish"
)

// BatchPage is a page of GET /batches, newest first.
type BatchPage struct {
	Batches []BatchStatus `json:"batches"`
	// NextCursor reads the next (older) page; empty on the last page.
	NextCursor string `json:"next_cursor,omitempty"`
}

// BatchStore keeps batches: their record, their tasks in chunks and their
// results. Every store in stores/ implements it; package stores/storetest
// checks it (the Batches subtests). A terminal batch takes no more
// results nor state changes (a RunStateError); an unknown batch is a
// RegistryError.
type BatchStore interface {
	// PutBatchChunk stores chunk n (from 0) of a batch's tasks, each one
	// JSON value, before CreateBatch makes the batch visible. Every chunk
	// but the last holds BatchChunkSize tasks. Writing a chunk again
	// replaces it.
	PutBatchChunk(ctx context.Context, batchID string, n int, tasks []json.RawMessage) error
	// BatchChunk returns chunk n of a batch's tasks.
	BatchChunk(ctx context.Context, batchID string, n int) ([]json.RawMessage, error)
	// CreateBatch stores the record of a batch whose chunks are all
	// stored: from then on it is listed and runnable. A duplicate id is a
	// RunStateError.
	CreateBatch(ctx context.Context, rec BatchRecord) error
	// GetBatch returns a batch's record.
	GetBatch(ctx context.Context, batchID string) (BatchRecord, error)
	// ListBatches returns up to limit batches (newest first) older than
	// the batch cursor names ("" for the newest).
	ListBatches(ctx context.Context, cursor string, limit int) (BatchPage, error)
	// AddBatchResults stores results in one atomic step, with their
	// counts, tokens and cost, and running as the tasks in flight; a
	// result whose index is already stored is skipped (a task's first
	// result stays). It returns how many were new. A terminal batch is a
	// RunStateError, and nothing is written.
	AddBatchResults(ctx context.Context, batchID string, running int64, results []BatchResult) (int, error)
	// BatchResults returns up to limit results: by index, those with
	// Index > after; by finish, those with Seq > after.
	BatchResults(ctx context.Context, batchID string, order BatchOrder, after int64, limit int) ([]BatchResult, error)
	// SetBatchState moves a batch to next (BatchState.CanMove), keeping
	// reason; a refused move is a RunStateError. A terminal state sets
	// Running to 0.
	SetBatchState(ctx context.Context, batchID string, next BatchState, reason string) error
	// ClaimBatches claims for owner the unfinished batches no live owner
	// runs and returns them, oldest first, their Resumed up by one: in a
	// file store (one process) all the unfinished batches whose owner is
	// not owner already; in a shared store, those whose owner's node
	// lease expired. Each claim is atomic.
	ClaimBatches(ctx context.Context, owner string) ([]BatchRecord, error)
	// SetBatchProvider replaces the Provider value of a batch's record (a
	// JSON value). A terminal batch is a RunStateError, and nothing is
	// written.
	SetBatchProvider(ctx context.Context, batchID string, provider json.RawMessage) error
	// DeleteBatch removes a batch, its chunks and its results (an upload
	// that failed half-way).
	DeleteBatch(ctx context.Context, batchID string) error
}

// BatchRequest is the body of POST /batches (JSON form).
type BatchRequest struct {
	Target string     `json:"target"`
	Tasks  []TaskSpec `json:"tasks"`
	// MaxConcurrency bounds the tasks in flight, as in a gather.
	MaxConcurrency int `json:"max_concurrency,omitempty"`
	// Mode is runtime (the default) or provider (BatchProvider).
	Mode BatchMode `json:"mode,omitempty"`
	// CallbackURL gets one signed POST when the batch ends (Callbacks).
	CallbackURL string `json:"callback_url,omitempty"`
}

// BatchOptions are how a batch runs, beside its target and tasks.
type BatchOptions struct {
	// MaxConcurrency bounds the tasks in flight, as in a gather (0: the
	// default); a batch of mode provider ignores it.
	MaxConcurrency int
	// Mode is BatchRuntime ("") or BatchProvider.
	Mode BatchMode
	// CallbackURL, when set, gets one signed POST when the batch ends: its
	// BatchStatus (see Callbacks).
	CallbackURL string
}

// BatchAccepted is the answer of POST /batches: 202 once every task is
// stored.
type BatchAccepted struct {
	BatchID string `json:"batch_id"`
	Total   int64  `json:"total"`
}

// BatchBackend serves batches; the batch manager and the HTTP client
// implement it.
type BatchBackend interface {
	// SubmitBatch stores every task of tasks (a task with Invalid set
	// fails as its own result) and starts the batch on target, an agent.
	// A batch of mode provider whose target does not qualify (see
	// BatchProvider) is a SpecValidationError saying why, before any
	// task is read.
	SubmitBatch(ctx context.Context, target string, tasks iter.Seq[TaskSpec], opts BatchOptions) (BatchAccepted, error)
	// BatchStatus returns a batch's state, counts, tokens and cost.
	BatchStatus(ctx context.Context, batchID string) (BatchStatus, error)
	// BatchResults yields the stored results, by order, after the cursor
	// after (an index, or a seq); with follow it waits for the results to
	// come until the batch ends.
	BatchResults(ctx context.Context, batchID string, order BatchOrder, after int64, follow bool) iter.Seq2[BatchResult, error]
	// CancelBatch cancels a batch: idempotent for a known batch.
	CancelBatch(ctx context.Context, batchID string) error
	// ListBatches lists batches newest first.
	ListBatches(ctx context.Context, cursor string, limit int) (BatchPage, error)
}

// BatchResultLine is one line of GET /batches/{id}/results.
type BatchResultLine struct {
	Index  int64           `json:"index"`
	Seq    int64           `json:"seq"`
	Result json.RawMessage `json:"result"`
}

// Batch limits.
const (
	DefaultBatchPage = 50
	MaxBatchPage     = 1000
)

// UnknownBatch is the RegistryError of a batch id no store knows.
func UnknownBatch(batchID string) error { return Errorf(KindRegistry, "unknown batch %q", batchID) }

// BatchMoveRefused is the RunStateError of a refused batch state change.
func BatchMoveRefused(batchID string, from, to BatchState) error {
	return Errorf(KindRunState, "batch %q is %s: it cannot become %s", batchID, from, to)
}

// BatchEnded is the RunStateError of results written to a terminal batch.
func BatchEnded(batchID string, state BatchState) error {
	return Errorf(KindRunState, "batch %q is %s: it takes no more results", batchID, state)
}

// CheckBatchRecord refuses, as a SpecValidationError, a record a store must
// not create.
func CheckBatchRecord(rec *BatchRecord) error {
	switch {
	case rec.BatchID == "":
		return Errorf(KindSpecValidation, "batch: empty id")
	case rec.Target == "":
		return Errorf(KindSpecValidation, "batch %q: empty target", rec.BatchID)
	case !rec.State.Valid():
		return Errorf(KindSpecValidation, "batch %q: unknown state %q", rec.BatchID, rec.State)
	case rec.Counts.Total < 0:
		return Errorf(KindSpecValidation, "batch %q: negative total", rec.BatchID)
	case rec.Mode != "" && rec.Mode != BatchRuntime && rec.Mode != BatchProvider:
		return Errorf(KindSpecValidation, "batch %q: unknown mode %q", rec.BatchID, rec.Mode)
	}
	return CheckBatchProvider(rec.BatchID, rec.Provider)
}

// CheckBatchProvider refuses, as a SpecValidationError, a Provider value
// that is not one JSON value.
func CheckBatchProvider(batchID string, provider json.RawMessage) error {
	if len(provider) > 0 && !json.Valid(provider) {
		return Errorf(KindSpecValidation, "batch %q: its provider value is not JSON", batchID)
	}
	return nil
}

// BatchPageLimit checks a page size: 0 means DefaultBatchPage.
func BatchPageLimit(limit int) (int, error) {
	switch {
	case limit == 0:
		return DefaultBatchPage, nil
	case limit < 0 || limit > MaxBatchPage:
		return 0, Errorf(KindSpecValidation, "limit %d: must be between 1 and %d", limit, MaxBatchPage)
	}
	return limit, nil
}

// EncodeBatchChunk writes tasks as one JSON array, each task byte-exact
// (json.Marshal would compact them), for the stores that keep a chunk as
// one value; json.Unmarshal into []json.RawMessage reads it back. A task
// that is not one JSON value is a SpecValidationError.
func EncodeBatchChunk(tasks []json.RawMessage) ([]byte, error) {
	n := 2
	for i, t := range tasks {
		if !json.Valid(t) {
			return nil, Errorf(KindSpecValidation, "batch chunk: task %d is not a JSON value", i)
		}
		n += len(t) + 1
	}
	b := make([]byte, 0, n)
	b = append(b, '[')
	for i, t := range tasks {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, t...)
	}
	return append(b, ']'), nil
}

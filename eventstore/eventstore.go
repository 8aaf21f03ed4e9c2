// Package eventstore keeps runtime events for the read-only rollup routes:
// Store, the interface every event store backend implements, Retention
// (a row cap and a maximum age), and Emitter, the store emitter adapter
// that batches events so that Emit stays cheap.
//
// The backends are packages of their own: memevents keeps events in
// process memory, sqliteevents in one SQLite file; eventstoretest is the
// conformance suite both pass. Both implement svc.EventReader: Events,
// Usage, ToolUsage, RuntimeStats and Tree (and svc.WindowedEventReader,
// the same over a time window, and svc.RunHistoryReader, the top-level
// runs for GET /runs), computed on demand, read-only,
// and defined once (in eventstore/internal/rollup) so that both give
// exactly the same answers for the same events. The memory store computes
// them by scanning what it holds; the SQLite store extracts what they need
// when it writes an event (fact columns, and totals tables it keeps in
// step with its writes and prunes), so that they cost the number of keys
// rather than of events.
//
// Every backend normalises what it keeps the same way, so rollups see the
// same values whichever store is wired:
//   - timestamps are truncated to microseconds and returned in UTC;
//   - payloads round-trip through JSON: numbers come back as float64 (never
//     json.Number), lists as []any, objects as map[string]any. A payload
//     value JSON cannot encode (NaN, ±Inf, a func, a channel, or a container
//     holding one) is kept as null, so one bad value loses neither its event
//     nor the batch around it. A nil payload comes back as an empty one.
package eventstore

import (
	"context"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/eventstore/internal/rollup"
)

// Query limits: svc's, under the names this package has always used.
const (
	// DefaultLimit is the number of events a Query with Limit 0 returns.
	DefaultLimit = svc.DefaultEventLimit
	// MaxLimit is the largest Limit a Query accepts.
	MaxLimit = svc.MaxEventLimit
)

// Query selects stored events; see svc.EventQuery. Since is inclusive and
// Until exclusive, so adjacent windows never count an event twice.
type Query = svc.EventQuery

// Store keeps runtime events. Implementations are safe for concurrent use.
type Store interface {
	// Write stores evs. An empty slice is a no-op. Write does not keep
	// evs (or alter it) after it returns, so the caller may reuse it.
	Write(ctx context.Context, evs []svc.RuntimeEvent) error
	// Query returns the events matching q, newest first (ties in
	// timestamp: the later written first). It is Events under its older
	// name.
	Query(ctx context.Context, q Query) ([]svc.RuntimeEvent, error)
	// EventReader is the read side the rollup routes use: Events, Usage,
	// ToolUsage, RuntimeStats and Tree, computed on demand from what the
	// store holds. Every store gives exactly the same answers for the
	// same events (eventstoretest holds them to it).
	svc.EventReader
	// Close releases the store; later calls fail with ShuttingDownError.
	Close() error
}

// Retention bounds what a store keeps. Zero fields mean unlimited.
// sqliteevents.Open refuses negative fields; memevents.New treats them as
// zero.
type Retention struct {
	// MaxRows keeps only the newest MaxRows events (by timestamp).
	MaxRows int
	// MaxAge drops events whose timestamp is older than now - MaxAge.
	MaxAge time.Duration
}

// BurnWindow is the window of RuntimeStats' token burn rate: the tokens of
// agent_completed events in (now-BurnWindow, now].
const BurnWindow = rollup.BurnWindow

// MaxTreeDepth is how many levels of child runs Tree follows below the
// requested run; deeper runs are left out.
const MaxTreeDepth = rollup.MaxTreeDepth

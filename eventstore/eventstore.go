// Package eventstore keeps runtime events for the read-only rollup routes:
// a Store interface with an in-memory and a SQLite implementation, both with
// retention (a row cap and a maximum age), and Emitter, the store emitter
// adapter that batches events so that Emit stays cheap.
//
// Both stores implement svc.EventReader: Events, Usage, ToolUsage,
// RuntimeStats and Tree, computed on demand, read-only, and defined once
// (rollup.go, tree.go) so that both give exactly the same answers for the
// same events. The memory store computes them by scanning what it holds;
// the SQLite store extracts what they need when it writes an event (fact
// columns, and totals tables it keeps in step with its writes and
// prunes), so that they cost the number of keys rather than of events.
//
// Both stores normalise what they keep the same way, so rollups see the
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
	"encoding/json"
	"time"

	"github.com/svc-dev/svc"
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

// normalizeQuery checks q and returns it with the default limit filled in.
func normalizeQuery(q Query) (Query, error) {
	switch {
	case q.Limit < 0:
		return q, svc.Errorf(svc.KindSpecValidation, "eventstore: limit %d is negative", q.Limit)
	case q.Limit > MaxLimit:
		return q, svc.Errorf(svc.KindSpecValidation, "eventstore: limit %d is above the maximum of %d", q.Limit, MaxLimit)
	case q.Limit == 0:
		q.Limit = DefaultLimit
	}
	if !q.Since.IsZero() && !q.Until.IsZero() && q.Until.Before(q.Since) {
		return q, svc.Errorf(svc.KindSpecValidation, "eventstore: until %s is before since %s",
			q.Until.Format(time.RFC3339Nano), q.Since.Format(time.RFC3339Nano))
	}
	return q, nil
}

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
	// store holds. Both stores give exactly the same answers for the same
	// events (see rollup.go for the definitions).
	svc.EventReader
	// Close releases the store; later calls fail with ShuttingDownError.
	Close() error
}

// Retention bounds what a store keeps. Zero fields mean unlimited.
// OpenSQLite refuses negative fields; NewMemory treats them as zero.
type Retention struct {
	// MaxRows keeps only the newest MaxRows events (by timestamp).
	MaxRows int
	// MaxAge drops events whose timestamp is older than now - MaxAge.
	MaxAge time.Duration
}

// DefaultPruneInterval is how often a SQLite store applies its retention.
const DefaultPruneInterval = 30 * time.Second

// normTime is the stored form of a timestamp: microsecond precision, UTC.
func normTime(t time.Time) time.Time { return time.UnixMicro(t.UnixMicro()).UTC() }

// encodePayload returns the JSON form of p. Values JSON cannot encode are
// written as null rather than failing the event (see the package doc).
func encodePayload(p svc.Payload) []byte {
	if b, ok := appendFlatPayload(nil, p); ok {
		return b
	}
	return encodePayloadJSON(p)
}

// encodePayloadJSON is encodePayload by encoding/json, for any payload.
func encodePayloadJSON(p svc.Payload) []byte {
	if p == nil {
		return []byte("{}")
	}
	if b, err := json.Marshal(p); err == nil {
		return b
	}
	safe := make(map[string]any, len(p))
	for k, v := range p {
		if _, err := json.Marshal(v); err != nil {
			v = nil
		}
		safe[k] = v
	}
	b, err := json.Marshal(safe)
	if err != nil {
		// Unreachable: every value left encodes on its own.
		return []byte("{}")
	}
	return b
}

// decodePayload reads what encodePayload wrote.
func decodePayload(b []byte) (svc.Payload, error) {
	p := svc.Payload{}
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, err
	}
	if p == nil { // the JSON was null
		p = svc.Payload{}
	}
	return p, nil
}

// normalize returns ev as a store returns it.
func normalize(ev svc.RuntimeEvent) svc.RuntimeEvent {
	ev.Timestamp = normTime(ev.Timestamp)
	p, err := decodePayload(encodePayload(ev.Payload))
	if err != nil {
		p = svc.Payload{} // unreachable: encodePayload writes valid JSON
	}
	ev.Payload = p
	return ev
}

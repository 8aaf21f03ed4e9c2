// Package eventstoretest is the conformance suite every eventstore.Store
// passes, in the style of testing/fstest.TestFS and storetest for run
// stores.
//
// A backend's tests call Run with a function that opens a fresh, empty
// store with the given retention. Each subtest opens its own stores; open
// closes them at the test's cleanup (Close is idempotent, and the suite
// closes some itself).
//
// Beyond the doc comments of eventstore.Store and svc.EventReader, the
// suite holds stores to these rules, so that callers see the same
// behaviour whatever the store:
//
//   - Events (and Query) return the newest first, ties in timestamp the
//     later written first; Since is inclusive and Until exclusive; a limit
//     of 0 is eventstore.DefaultLimit; a negative limit, one above
//     eventstore.MaxLimit, or Until before Since is a SpecValidationError.
//     Nothing matching is an empty slice, never nil.
//   - Timestamps are kept to the microsecond and returned in UTC; payloads
//     come back as their JSON round trip (numbers float64, lists []any),
//     a value JSON cannot encode as null, a nil payload as an empty one;
//     Write keeps no reference to, and does not alter, what it is given.
//   - Retention keeps the newest MaxRows events by timestamp and drops
//     those older than MaxAge. A store that applies it in the background
//     implements Pruner; the suite calls Prune before it checks.
//   - Usage, ToolUsage, RuntimeStats and Tree follow the definitions of the
//     eventstore package (percentiles by nearest rank, costs summed in
//     nano-dollars, cached_tokens read as tokens_used is, worker health by
//     svc.WorkerHealth, trees linked by span ids), and give to the last
//     bit what the memory store gives for the same events, with or without
//     retention, whatever the batch sizes they were written in.
//   - A bad group_by is a SpecValidationError, an unknown or empty trace
//     a RegistryError; a cancelled context is a CancelledError; after
//     Close every call is a ShuttingDownError, and Close again is nil.
package eventstoretest

import (
	"context"
	"testing"

	"github.com/svc-dev/svc/eventstore"
	"github.com/svc-dev/svc/eventstore/memevents"
)

// Open returns a fresh, empty store with retention r, closed when t ends.
type Open func(t *testing.T, r eventstore.Retention) eventstore.Store

// Pruner is implemented by a store that applies its retention in the
// background: Prune applies it now. A store that applies it on every call
// (the memory store) need not implement it.
type Pruner interface {
	Prune(ctx context.Context) (int64, error)
}

// Run runs the suite against the stores open returns.
func Run(t *testing.T, open Open) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, open Open)
	}{
		{"Query", testQuery},
		{"QueryLimits", testQueryLimits},
		{"QueryWindows", testQueryWindows},
		{"RetentionByRows", testRetentionByRows},
		{"RetentionByAge", testRetentionByAge},
		{"RetentionBoth", testRetentionBoth},
		{"TimestampRoundTrip", testTimestampRoundTrip},
		{"EventRoundTrip", testEventRoundTrip},
		{"ClosedAndCancelled", testClosedAndCancelled},
		{"Rollups", testRollups},
		{"RollupsEmpty", testRollupsEmpty},
		{"UsageCachedTokens", testUsageCachedTokens},
		{"RollupBadArguments", testRollupBadArguments},
		{"Percentiles", testPercentiles},
		{"WorkerHealth", testWorkerHealth},
		{"Tree", testTree},
		{"TreeDepth", testTreeDepth},
		{"TreeLinksBySpanID", testTreeLinksBySpanID},
		{"BatchSizes", testBatchSizes},
		{"AgreesWithMemory", testAgreesWithMemory},
		{"RunHistory", testRunHistory},
		{"Windows", testWindows},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, open) })
	}
}

// prune applies s's retention now, when it applies it in the background.
func prune(t *testing.T, s eventstore.Store) {
	t.Helper()
	if p, ok := s.(Pruner); ok {
		if _, err := p.Prune(context.Background()); err != nil {
			t.Fatalf("Prune: %v", err)
		}
	}
}

// skipReference skips a comparison with the reference when open makes the
// reference itself: it would compare the memory store with itself.
func skipReference(t *testing.T, open Open) {
	t.Helper()
	if _, ok := open(t, eventstore.Retention{}).(*memevents.Store); ok {
		t.Skip("the memory store is the reference")
	}
}

// reference opens the memory store, whose rollups are the definitions'
// direct reading, for the store under test to agree with.
func reference(t *testing.T, r eventstore.Retention) eventstore.Store {
	s := memevents.New(r)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

package memevents_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/svc-dev/svc/eventstore"
	"github.com/svc-dev/svc/eventstore/eventstoretest"
	"github.com/svc-dev/svc/eventstore/memevents"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestSuite runs the event store conformance suite on fresh stores.
func TestSuite(t *testing.T) {
	eventstoretest.Run(t, func(t *testing.T, r eventstore.Retention) eventstore.Store {
		s := memevents.New(r)
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

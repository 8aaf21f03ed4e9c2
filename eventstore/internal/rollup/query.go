package rollup

import (
	"time"

	"github.com/svc-dev/svc"
)

// CheckQuery checks q and returns it with the default limit filled in.
func CheckQuery(q svc.EventQuery) (svc.EventQuery, error) {
	switch {
	case q.Limit < 0:
		return q, svc.Errorf(svc.KindSpecValidation, "eventstore: limit %d is negative", q.Limit)
	case q.Limit > svc.MaxEventLimit:
		return q, svc.Errorf(svc.KindSpecValidation, "eventstore: limit %d is above the maximum of %d", q.Limit, svc.MaxEventLimit)
	case q.Limit == 0:
		q.Limit = svc.DefaultEventLimit
	}
	if !q.Since.IsZero() && !q.Until.IsZero() && q.Until.Before(q.Since) {
		return q, svc.Errorf(svc.KindSpecValidation, "eventstore: until %s is before since %s",
			q.Until.Format(time.RFC3339Nano), q.Since.Format(time.RFC3339Nano))
	}
	return q, nil
}

// ErrClosed is the error of a call on a closed store; which names it
// ("memory", "sqlite").
func ErrClosed(which string) error {
	return svc.Errorf(svc.KindShuttingDown, "eventstore: %s store is closed", which)
}

// IsWorkerEvent reports whether t is a worker lifecycle event, whose trace
// id is its runtime id (so RuntimeStats does not count it as a trace).
func IsWorkerEvent(t svc.EventType) bool {
	return t == svc.EventWorkerStarted || t == svc.EventWorkerStopped || t == svc.EventWorkerHeartbeat
}

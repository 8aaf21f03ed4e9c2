package emitters

import "github.com/svc-dev/svc"

// Multi returns an emitter that hands each event to every one of es, in
// order. A panic in one of them is contained: it is recovered and the
// remaining emitters still receive the event. Nil entries are skipped and
// nested Multi emitters are flattened, so stacking them costs nothing extra.
func Multi(es ...svc.Emitter) svc.Emitter {
	m := make(multi, 0, len(es))
	for _, e := range es {
		switch x := e.(type) {
		case nil:
		case multi:
			// Already flat and nil-free: it was built by Multi.
			m = append(m, x...)
		default:
			m = append(m, e)
		}
	}
	return m
}

type multi []svc.Emitter

// Emit fans ev out. The event is shared, not copied: emitters treat events
// as immutable (see svc.RuntimeEvent).
func (m multi) Emit(ev svc.RuntimeEvent) {
	for _, e := range m {
		emitContained(e, ev)
	}
}

// emitContained calls e.Emit and recovers its panic (counted and logged by
// recoverEmit). The Emitter contract forbids panics, so one here is a bug
// in e; letting it escape would silence every emitter after e and could
// crash the run that emitted.
func emitContained(e svc.Emitter, ev svc.RuntimeEvent) {
	defer recoverEmit("multi")
	e.Emit(ev)
}

package emitters

import (
	"sync/atomic"

	"go.uber.org/zap"
)

// recovered counts the panics this package's emitters recovered.
var recovered atomic.Int64

// RecoveredPanics is how many panics the emitters of this package (the log,
// multi and OTel emitters) recovered in this process: an emitter's own, or
// one from the logger core, marshaller or meter provider under it. Each is
// also logged, with its stack, at zap.L().
func RecoveredPanics() int64 { return recovered.Load() }

// recoverEmit, deferred directly in an Emit, recovers its panic, counts it
// and logs it. Recovering is right there: Emit is called on the runtime's
// hot paths (invocations, supervisors, the store's writer), the Emitter
// contract forbids panics, and an event is never worth a run or the
// process. The log goes to zap.L(), the process's global logger, not to
// the emitter's: that may be what panicked.
func recoverEmit(emitter string) {
	v := recover()
	if v == nil {
		return
	}
	recovered.Add(1)
	logRecovered(emitter, v)
}

// logRecovered logs a recovered panic. A global logger that panics in turn
// (a host that made the broken logger global) is counted, not logged: there
// is nowhere left to log it.
func logRecovered(emitter string, v any) {
	defer func() {
		if recover() != nil {
			recovered.Add(1)
		}
	}()
	zap.L().Error("emitter panicked; recovered, the event dropped for it", zap.String("emitter", emitter),
		zap.Any("panic", v), zap.Stack("stack"))
}

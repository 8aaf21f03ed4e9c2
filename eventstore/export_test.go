package eventstore

import "time"

// NewEmitterQueue is NewEmitter with an explicit queue length.
func NewEmitterQueue(s Store, batch int, flush time.Duration, queue int) *Emitter {
	return newEmitter(s, batch, flush, queue)
}

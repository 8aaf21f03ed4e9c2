package eventstore

import "time"

// OpenSQLiteEvery opens a store that prunes every every and signals pruned
// (if not nil, without blocking) after each background prune.
func OpenSQLiteEvery(path string, r Retention, every time.Duration, pruned chan struct{}) (*SQLite, error) {
	return openSQLite(path, r, every, pruned)
}

// NewEmitterQueue is NewEmitter with an explicit queue length.
func NewEmitterQueue(s Store, batch int, flush time.Duration, queue int) *Emitter {
	return newEmitter(s, batch, flush, queue)
}

package pebblestore

// Syncs is how many fsyncs s's writes waited for.
func Syncs(s *Store) int64 { return s.syncs.Load() }

// Pending is how many writes wait in s's commit queue or its batch.
func Pending(s *Store) int { return s.q.Pending() }

// Sent is how many writes s's commit queue has handed to its writer in all.
func Sent(s *Store) int64 { return s.q.Sent() }

// HoldWriteLock takes s's write lock until release is called, so writes
// queue behind it.
func HoldWriteLock(s *Store) (release func()) {
	s.mu.Lock()
	return s.mu.Unlock
}

package sqlitestore

import (
	"context"
	"time"
)

// OpenPolling opens a store whose streams poll every poll instead of
// PollInterval.
func OpenPolling(path string, poll time.Duration) (*Store, error) {
	s, err := Open(path)
	if s != nil {
		s.poll = poll
	}
	return s, err
}

// Commits is how many transactions s's run writes committed.
func Commits(s *Store) int64 { return s.commits.Load() }

// Pending is how many writes wait in s's commit queue or its batch.
func Pending(s *Store) int { return s.q.Pending() }

// Sent is how many writes s's commit queue has handed to its writer in all.
func Sent(s *Store) int64 { return s.q.Sent() }

// HoldWriter takes s's one writer connection until release is called, so
// writes queue behind it.
func HoldWriter(t interface{ Fatal(...any) }, s *Store) (release func()) {
	c, err := s.writer.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return func() { _ = c.Close() }
}

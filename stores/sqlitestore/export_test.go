package sqlitestore

import "time"

// OpenPolling opens a store whose streams poll every poll instead of
// PollInterval.
func OpenPolling(path string, poll time.Duration) (*Store, error) {
	s, err := Open(path)
	if s != nil {
		s.poll = poll
	}
	return s, err
}

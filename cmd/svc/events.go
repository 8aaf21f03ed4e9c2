package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/svc-dev/svc/eventstore"
)

// openEventStore opens the event store --events names:
//
//	""            a SQLite file under --data-dir (the default)
//	memory        in memory, bounded by the retention
//	sqlite:PATH   a SQLite file
//	none          no event store: the rollup routes are not served
func openEventStore(spec, dataDir string, r eventstore.Retention) (eventstore.Store, string, error) {
	switch {
	case spec == "none":
		return nil, "none", nil
	case spec == "memory":
		return eventstore.NewMemory(r), "memory", nil
	case spec == "":
		if err := os.MkdirAll(dataDir, 0o755); err != nil {
			return nil, "", fmt.Errorf("--data-dir %s: %w", dataDir, err)
		}
		path := filepath.Join(dataDir, "events.db")
		s, err := eventstore.OpenSQLite(path, r)
		if err != nil {
			return nil, "", fmt.Errorf("--events (default %s): %w", path, err)
		}
		return s, "sqlite:" + path, nil
	case strings.HasPrefix(spec, "sqlite:"):
		s, err := eventstore.OpenSQLite(strings.TrimPrefix(spec, "sqlite:"), r)
		if err != nil {
			return nil, "", fmt.Errorf("--events %s: %w", spec, err)
		}
		return s, spec, nil
	}
	return nil, "", fmt.Errorf("--events %q: want memory, sqlite:PATH or none", spec)
}

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/stores/memstore"
	"github.com/svc-dev/svc/stores/pebblestore"
	"github.com/svc-dev/svc/stores/redisstore"
	"github.com/svc-dev/svc/stores/sqlitestore"
)

// openStore opens the run store --store names:
//
//	""             a SQLite file under --data-dir (the default)
//	memory         in memory: runs die with the process
//	sqlite:PATH    a SQLite file
//	pebble:PATH    a Pebble directory
//	redis://…      a Redis server (rediss:// for TLS)
func openStore(spec, dataDir string) (svc.RunStore, string, error) {
	switch {
	case spec == "":
		if err := os.MkdirAll(dataDir, 0o755); err != nil {
			return nil, "", fmt.Errorf("--data-dir %s: %w", dataDir, err)
		}
		path := filepath.Join(dataDir, "runs.db")
		s, err := sqlitestore.Open(path)
		return s, "sqlite:" + path, err
	case spec == "memory":
		return memstore.New(), "memory", nil
	case strings.HasPrefix(spec, "sqlite:"):
		s, err := sqlitestore.Open(strings.TrimPrefix(spec, "sqlite:"))
		return s, spec, err
	case strings.HasPrefix(spec, "pebble:"):
		s, err := pebblestore.Open(strings.TrimPrefix(spec, "pebble:"))
		return s, spec, err
	case strings.HasPrefix(spec, "redis://"), strings.HasPrefix(spec, "rediss://"):
		s, err := redisstore.Open(redisstore.Options{URL: spec})
		return s, "redis", err
	}
	return nil, "", fmt.Errorf("--store %q: want memory, sqlite:PATH, pebble:PATH or redis://HOST:PORT", spec)
}

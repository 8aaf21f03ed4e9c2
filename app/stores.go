package app

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/eventstore"
	"github.com/svc-dev/svc/eventstore/memevents"
	"github.com/svc-dev/svc/eventstore/sqliteevents"
	"github.com/svc-dev/svc/stores/memstore"
	"github.com/svc-dev/svc/stores/pebblestore"
	"github.com/svc-dev/svc/stores/redisstore"
	"github.com/svc-dev/svc/stores/sqlitestore"
)

// checkStoreSpec refuses a Store value openStore would not understand,
// before anything is opened.
func checkStoreSpec(spec string) error {
	switch {
	case spec == "", spec == "memory", strings.HasPrefix(spec, "sqlite:"), strings.HasPrefix(spec, "pebble:"),
		strings.HasPrefix(spec, "redis://"), strings.HasPrefix(spec, "rediss://"):
		return nil
	}
	return fmt.Errorf("%q: want memory, sqlite:PATH, pebble:PATH or redis://HOST:PORT", spec)
}

// openStore opens the run store Options.Store names:
//
//	""             a SQLite file under DataDir (the default)
//	memory         in memory: runs die with the process
//	sqlite:PATH    a SQLite file
//	pebble:PATH    a Pebble directory
//	redis://…      a Redis server (rediss:// for TLS), shared by every
//	               node that opens it: node and lease are its node id
//	               and lease (see svc.SharedRunStore; "" and 0: the
//	               defaults)
//
// It returns the store and where it is, for the log.
func openStore(spec, dataDir, node string, lease time.Duration) (svc.RunStore, string, error) {
	if err := checkStoreSpec(spec); err != nil {
		return nil, "", &ConfigError{Option: "Store", Err: err}
	}
	fail := func(err error) error { return &ConfigError{Option: "Store", Err: err} }
	switch {
	case spec == "":
		if err := os.MkdirAll(dataDir, 0o755); err != nil {
			return nil, "", &ConfigError{Option: "DataDir", Err: err}
		}
		path := filepath.Join(dataDir, "runs.db")
		s, err := sqlitestore.Open(path)
		if err != nil {
			return nil, "", fail(fmt.Errorf("(default %s): %w", path, err))
		}
		return s, "sqlite:" + path, nil
	case spec == "memory":
		return memstore.New(), "memory", nil
	case strings.HasPrefix(spec, "sqlite:"):
		s, err := sqlitestore.Open(strings.TrimPrefix(spec, "sqlite:"))
		if err != nil {
			return nil, "", fail(err)
		}
		return s, spec, nil
	case strings.HasPrefix(spec, "pebble:"):
		s, err := pebblestore.Open(strings.TrimPrefix(spec, "pebble:"))
		if err != nil {
			return nil, "", fail(err)
		}
		return s, spec, nil
	default: // redis:// or rediss://
		s, err := redisstore.Open(redisstore.Options{URL: spec, NodeID: node, LeaseTTL: lease})
		var held *redisstore.NodeInUseError
		if errors.As(err, &held) {
			return nil, "", &ConfigError{Option: "NodeID", Err: err}
		}
		if err != nil {
			return nil, "", fail(err)
		}
		return s, "redis", nil
	}
}

// checkEventsSpec refuses an Events value openEventStore would not
// understand, before anything is created on disk.
func checkEventsSpec(spec string) error {
	if spec == "" || spec == "none" || spec == "memory" || strings.HasPrefix(spec, "sqlite:") {
		return nil
	}
	return fmt.Errorf("%q: want memory, sqlite:PATH or none", spec)
}

// openEventStore opens the event store Options.Events names:
//
//	""            a SQLite file under DataDir (the default)
//	memory        in memory, bounded by the retention
//	sqlite:PATH   a SQLite file
//	none          no event store: the rollup routes are not served
func openEventStore(spec, dataDir string, r eventstore.Retention) (eventstore.Store, string, error) {
	if err := checkEventsSpec(spec); err != nil {
		return nil, "", &ConfigError{Option: "Events", Err: err}
	}
	fail := func(err error) error { return &ConfigError{Option: "Events", Err: err} }
	switch {
	case spec == "none":
		return nil, "none", nil
	case spec == "memory":
		return memevents.New(r), "memory", nil
	case spec == "":
		if err := os.MkdirAll(dataDir, 0o755); err != nil {
			return nil, "", &ConfigError{Option: "DataDir", Err: err}
		}
		path := filepath.Join(dataDir, "events.db")
		s, err := sqliteevents.Open(path, r)
		if err != nil {
			return nil, "", fail(fmt.Errorf("(default %s): %w", path, err))
		}
		return s, "sqlite:" + path, nil
	default: // sqlite:PATH
		s, err := sqliteevents.Open(strings.TrimPrefix(spec, "sqlite:"), r)
		if err != nil {
			return nil, "", fail(fmt.Errorf("%s: %w", spec, err))
		}
		return s, spec, nil
	}
}

package sqliteevents

import (
	"time"

	"github.com/svc-dev/svc/eventstore"
)

// OpenEvery opens a store that prunes every every and signals pruned (if
// not nil, without blocking) after each background prune.
func OpenEvery(path string, r eventstore.Retention, every time.Duration, pruned chan struct{}) (*Store, error) {
	return open(path, r, every, pruned)
}

// SchemaVersion is the schema this build writes.
const SchemaVersion = schemaVersion

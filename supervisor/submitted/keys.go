package submitted

import (
	"context"
	"sync"
	"time"

	"github.com/svc-dev/svc"
)

// localKeys keeps Idempotency-Keys in memory for a store that is no
// svc.IdempotentStore: one process, forgotten at restart. No lock is held
// while the store creates the run: the key is reserved first, and a retry
// racing the first call waits for that call's outcome.
type localKeys struct {
	svc.RunStore
	mu   sync.Mutex
	keys map[string]*localKey
}

type localKey struct {
	fp, runID string
	expires   time.Time
	ready     chan struct{} // closed once the run is created or failed
	failed    bool          // written under mu before ready closes
}

func (l *localKeys) CreateIdempotent(ctx context.Context, key, fp string, rec svc.RunRecord, ttl time.Duration) (string, bool, error) {
	if ttl <= 0 {
		ttl = svc.DefaultIdempotencyTTL
	}
	for {
		now := time.Now()
		l.mu.Lock()
		if k, ok := l.keys[key]; ok && now.Before(k.expires) {
			l.mu.Unlock()
			select {
			case <-k.ready:
			case <-ctx.Done():
				return "", false, ctx.Err()
			}
			l.mu.Lock()
			failed := k.failed
			l.mu.Unlock()
			switch {
			case failed:
				continue // its call failed and dropped the key: try ours
			case k.fp != fp:
				return "", false, svc.IdempotencyConflict(key, k.runID)
			}
			return k.runID, false, nil
		}
		if len(l.keys) >= svc.MaxIdempotencyKeys {
			l.evict(now)
		}
		k := &localKey{fp: fp, runID: rec.RunID, expires: now.Add(ttl), ready: make(chan struct{})}
		l.keys[key] = k
		l.mu.Unlock()
		err := l.Create(ctx, rec)
		l.mu.Lock()
		if err != nil {
			k.failed = true
			if l.keys[key] == k {
				delete(l.keys, key)
			}
		}
		l.mu.Unlock()
		close(k.ready)
		if err != nil {
			return "", false, err
		}
		return rec.RunID, true, nil
	}
}

// evict drops the expired keys, or else the oldest settled one; l.mu is
// held.
func (l *localKeys) evict(now time.Time) {
	oldest := ""
	for key, k := range l.keys {
		select {
		case <-k.ready:
		default:
			continue // its run is being created
		}
		if !now.Before(k.expires) {
			delete(l.keys, key)
		} else if oldest == "" || k.expires.Before(l.keys[oldest].expires) {
			oldest = key
		}
	}
	if len(l.keys) >= svc.MaxIdempotencyKeys && oldest != "" {
		delete(l.keys, oldest)
	}
}

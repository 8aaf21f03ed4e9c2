package storetest

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc"
)

// Idempotency-Key rules every store keeps (svc.IdempotentStore):
//
//   - The first CreateIdempotent of a key creates the run; later ones with
//     the same fingerprint create nothing and return that run, whatever run
//     id they carry.
//   - Another fingerprint under a live key is a RunStateError that names
//     the run holding the key.
//   - Once the TTL has passed, the key makes a new run, with any
//     fingerprint.
//   - A refused create (a duplicate run id) reserves nothing.
//   - Racing calls with one key make one run.

// IdemTTL is the short TTL the expiry subtest uses; stores keep keys to the
// millisecond at least.
const IdemTTL = 150 * time.Millisecond

func idem(t *testing.T, s svc.RunStore) svc.IdempotentStore {
	t.Helper()
	is, ok := s.(svc.IdempotentStore)
	if !ok {
		t.Fatalf("%T is not a svc.IdempotentStore", s)
	}
	return is
}

func createIdem(t *testing.T, s svc.IdempotentStore, key, fp, id string, ttl time.Duration) (string, bool) {
	t.Helper()
	got, created, err := s.CreateIdempotent(t.Context(), key, fp, svc.RunRecord{RunID: id, Target: "echo", Kind: "agent", TraceID: traceOf(id), CreatedAt: ts(0)}, ttl)
	mustOK(t, fmt.Sprintf("CreateIdempotent(%q, %q, %q)", key, fp, id), err)
	return got, created
}

func testIdempotentSameKey(t *testing.T, st svc.RunStore) {
	s := idem(t, st)
	id, created := createIdem(t, s, "k1", "fp1", "r1", time.Hour)
	if id != "r1" || !created {
		t.Fatalf("first CreateIdempotent = %q, %v; want r1, true", id, created)
	}
	checkRecord(t, "run created with a key", get(t, s, "r1"), svc.RunRecord{
		RunID: "r1", Target: "echo", Kind: "agent", TraceID: traceOf("r1"), State: svc.RunPending, CreatedAt: ts(0), UpdatedAt: ts(0)})
	// The retry carries a run id of its own, which must not be created.
	id, created = createIdem(t, s, "k1", "fp1", "r2", time.Hour)
	if id != "r1" || created {
		t.Fatalf("retried CreateIdempotent = %q, %v; want r1, false", id, created)
	}
	mustKind(t, "Get of the retry's run id", func() error { _, err := s.Get(t.Context(), "r2"); return err }(), svc.ErrRegistry)
	// The key holds whatever became of the run.
	drive(t, s, "other", svc.RunRunning)
	mustOK(t, "SetState", s.SetState(t.Context(), "r1", svc.RunCancelled, "", nil))
	if id, created = createIdem(t, s, "k1", "fp1", "r3", time.Hour); id != "r1" || created {
		t.Fatalf("CreateIdempotent after the run ended = %q, %v; want r1, false", id, created)
	}
	// Another key is another run; a zero TTL is the default one.
	if id, created = createIdem(t, s, "k2", "fp1", "r4", 0); id != "r4" || !created {
		t.Fatalf("CreateIdempotent of a second key = %q, %v; want r4, true", id, created)
	}
	if id, created = createIdem(t, s, "k2", "fp1", "r5", 0); id != "r4" || created {
		t.Fatalf("retry of a key kept for the default TTL = %q, %v; want r4, false", id, created)
	}
	// Keys may hold any text.
	odd := "a:b/c?d e\u00e9*[x]"
	if id, _ = createIdem(t, s, odd, "fp", "r6", time.Hour); id != "r6" {
		t.Fatalf("CreateIdempotent with key %q = %q", odd, id)
	}
	if id, _ = createIdem(t, s, odd, "fp", "r7", time.Hour); id != "r6" {
		t.Fatalf("retry with key %q = %q, want r6", odd, id)
	}
}

func testIdempotentConflict(t *testing.T, st svc.RunStore) {
	s := idem(t, st)
	createIdem(t, s, "k", "fp1", "r1", time.Hour)
	_, _, err := s.CreateIdempotent(t.Context(), "k", "fp2", svc.RunRecord{RunID: "r2", Target: "echo", Kind: "agent"}, time.Hour)
	mustKind(t, "CreateIdempotent with another fingerprint", err, svc.ErrRunState)
	if err != nil && !strings.Contains(err.Error(), "r1") {
		t.Errorf("conflict error %q does not name the run r1 holding the key", err)
	}
	mustKind(t, "Get of the refused run", func() error { _, err := s.Get(t.Context(), "r2"); return err }(), svc.ErrRegistry)
	// A duplicate run id under a new key reserves nothing.
	_, _, err = s.CreateIdempotent(t.Context(), "fresh", "fp", svc.RunRecord{RunID: "r1", Target: "echo", Kind: "agent"}, time.Hour)
	mustKind(t, "CreateIdempotent of an existing run id", err, svc.ErrRunState)
	if id, created := createIdem(t, s, "fresh", "fp", "r3", time.Hour); id != "r3" || !created {
		t.Fatalf("key after a refused create = %q, %v; want r3, true", id, created)
	}
}

func testIdempotentExpiry(t *testing.T, st svc.RunStore) {
	s := idem(t, st)
	createIdem(t, s, "k", "fp1", "r1", IdemTTL)
	createIdem(t, s, "long", "fp1", "r2", time.Hour)
	time.Sleep(IdemTTL + 150*time.Millisecond)
	// Expired: a new run, even for another request.
	if id, created := createIdem(t, s, "k", "fp2", "r3", time.Hour); id != "r3" || !created {
		t.Fatalf("CreateIdempotent after expiry = %q, %v; want r3, true", id, created)
	}
	if id, created := createIdem(t, s, "k", "fp2", "r4", time.Hour); id != "r3" || created {
		t.Fatalf("retry after the key was taken again = %q, %v; want r3, false", id, created)
	}
	if id, created := createIdem(t, s, "long", "fp1", "r5", time.Hour); id != "r2" || created {
		t.Fatalf("a key with a long TTL = %q, %v; want r2, false", id, created)
	}
	if rec := get(t, s, "r1"); rec.State != svc.RunPending {
		t.Errorf("the first run after its key expired: %+v", rec)
	}
}

func testIdempotentConcurrent(t *testing.T, st svc.RunStore) {
	s := idem(t, st)
	const n = 16
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		ids     = map[string]int{}
		created int
	)
	for i := range n {
		wg.Go(func() {
			id, c, err := s.CreateIdempotent(t.Context(), "race", "fp", svc.RunRecord{RunID: fmt.Sprintf("r%02d", i), Target: "echo", Kind: "agent"}, time.Hour)
			if err != nil {
				t.Errorf("CreateIdempotent %d: %v", i, err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			ids[id]++
			if c {
				created++
			}
		})
	}
	wg.Wait()
	if len(ids) != 1 || created != 1 {
		t.Fatalf("%d racing CreateIdempotent calls made runs %v (%d created), want one", n, ids, created)
	}
	page := listPage(t, s, svc.RunFilter{Limit: n})
	if len(page.Runs) != 1 {
		t.Errorf("the store lists %d runs, want 1", len(page.Runs))
	}
}

func testIdempotentClosed(t *testing.T, st svc.RunStore) {
	s := idem(t, st)
	mustOK(t, "Close", s.Close())
	if _, _, err := s.CreateIdempotent(t.Context(), "k", "fp", svc.RunRecord{RunID: "r1", Target: "echo", Kind: "agent"}, time.Hour); err == nil {
		t.Errorf("CreateIdempotent after Close succeeded")
	}
}

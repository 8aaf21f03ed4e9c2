package redisstore_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/internal/testutil"
	"github.com/svc-dev/svc/stores/redisstore"
)

func listIDs(t *testing.T, s *redisstore.Store, f svc.RunFilter) []string {
	t.Helper()
	var ids []string
	for {
		page, err := s.ListRuns(t.Context(), f)
		if err != nil {
			t.Fatalf("ListRuns(%+v): %v", f, err)
		}
		for _, r := range page.Runs {
			ids = append(ids, r.RunID)
		}
		if page.NextCursor == "" {
			return ids
		}
		f.Cursor = page.NextCursor
	}
}

// awaitExpired waits until the keys of run id have expired.
func awaitExpired(t *testing.T, s *redisstore.Store, id string) {
	t.Helper()
	testutil.Eventually(t, "Get "+id+" to give a RegistryError after its TTL", func() bool {
		_, err := s.Get(t.Context(), id)
		return errors.Is(err, svc.ErrRegistry)
	})
}

// Runs whose keys expired leave the listing, and their index entries go:
// dropped by the listing that meets them, or trimmed by a later Create.
func TestListExpiredRuns(t *testing.T) {
	url := startRedis(t)
	raw := rawClient(t, url)
	ctx := t.Context()
	prefix := uniquePrefix()
	s := open(t, redisstore.Options{URL: url, KeyPrefix: prefix, TTL: 50 * time.Millisecond})
	created := prefix + "::created"
	base := time.Date(2025, 3, 14, 15, 9, 26, 0, time.UTC)
	for i := range 10 {
		id := fmt.Sprint("r", i)
		if err := s.Create(ctx, svc.RunRecord{RunID: id, Target: "t", Kind: "agent", CreatedAt: base.Add(time.Duration(i) * time.Second)}); err != nil {
			t.Fatal(err)
		}
	}
	// The even runs end and expire.
	for i := 0; i < 10; i += 2 {
		if err := s.SetState(ctx, fmt.Sprint("r", i), svc.RunCancelled, "", nil); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 10; i += 2 {
		awaitExpired(t, s, fmt.Sprint("r", i))
	}
	if n := raw.ZCard(ctx, created).Val(); n != 10 {
		t.Fatalf("ZCARD %s before any listing = %d, want the 10 entries", created, n)
	}
	// Pages of two: the expired runs between the live ones are skipped.
	if got, want := listIDs(t, s, svc.RunFilter{Limit: 2}), []string{"r9", "r7", "r5", "r3", "r1"}; !slices.Equal(got, want) {
		t.Fatalf("listed %q, want the live runs %q", got, want)
	}
	if got := raw.ZRange(ctx, created, 0, -1).Val(); !slices.Equal(got, []string{"r1", "r3", "r5", "r7", "r9"}) {
		t.Errorf("index after the listing = %q, want the live runs only", got)
	}

	// Without a listing, Create trims the runs whose expiry is due.
	for _, id := range []string{"r1", "r3"} {
		if err := s.SetState(ctx, id, svc.RunCancelled, "", nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"r1", "r3"} {
		awaitExpired(t, s, id)
	}
	if err := s.Create(ctx, svc.RunRecord{RunID: "new", Target: "t", Kind: "agent"}); err != nil {
		t.Fatal(err)
	}
	if got := raw.ZRange(ctx, created, 0, -1).Val(); !slices.Equal(got, []string{"r5", "r7", "r9", "new"}) {
		t.Errorf("index after a Create = %q, want [r5 r7 r9 new]", got)
	}
	if n := raw.ZCard(ctx, prefix+"::expiring").Val(); n != 0 {
		t.Errorf("expiring set after the trim has %d entries, want none", n)
	}
	// An id created anew after its first run expired is listed once, at
	// its new time.
	if err := s.Create(ctx, svc.RunRecord{RunID: "r1", Target: "again", Kind: "agent"}); err != nil {
		t.Fatal(err)
	}
	if got, want := listIDs(t, s, svc.RunFilter{Limit: 1}), []string{"r1", "new", "r9", "r7", "r5"}; !slices.Equal(got, want) {
		t.Errorf("listed %q, want %q", got, want)
	}
}

// A prefix whose runs were written before the index (no P::created, no
// P::indexed) is indexed by the first Open, expiring runs included.
func TestListIndexesOldRuns(t *testing.T) {
	url := startRedis(t)
	raw := rawClient(t, url)
	ctx := t.Context()
	prefix := uniquePrefix()
	old := open(t, redisstore.Options{URL: url, KeyPrefix: prefix, TTL: time.Hour})
	base := time.Date(2025, 3, 14, 15, 9, 26, 0, time.UTC)
	var want []string
	for i := range 30 {
		id := fmt.Sprintf("r%02d", i)
		if err := old.Create(ctx, svc.RunRecord{RunID: id, Target: "t", Kind: "agent", CreatedAt: base.Add(time.Duration(i) * time.Millisecond)}); err != nil {
			t.Fatal(err)
		}
		want = append([]string{id}, want...)
	}
	if err := old.SetState(ctx, "r00", svc.RunCancelled, "", nil); err != nil {
		t.Fatal(err)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	// A run whose id has ':' is no record of this prefix, whatever its type.
	if err := raw.HSet(ctx, prefix+":sub:x", "run_id", "x").Err(); err != nil {
		t.Fatal(err)
	}
	if err := raw.Del(ctx, prefix+"::created", prefix+"::expiring", prefix+"::indexed").Err(); err != nil {
		t.Fatal(err)
	}

	s := open(t, redisstore.Options{URL: url, KeyPrefix: prefix})
	if got := listIDs(t, s, svc.RunFilter{Limit: 7}); !slices.Equal(got, want) {
		t.Fatalf("listed %q after indexing, want %q", got, want)
	}
	if got := raw.Get(ctx, prefix+"::indexed").Val(); got != "1" {
		t.Errorf("%s::indexed = %q, want 1", prefix, got)
	}
	if got := raw.ZRange(ctx, prefix+"::expiring", 0, -1).Val(); !slices.Equal(got, []string{"r00"}) {
		t.Errorf("expiring set = %q, want [r00], the run with a TTL", got)
	}
	// Once indexed, Open does not scan again: a run hidden from the index
	// stays hidden (the marker is what Open trusts).
	if err := raw.ZRem(ctx, prefix+"::created", "r29").Err(); err != nil {
		t.Fatal(err)
	}
	again := open(t, redisstore.Options{URL: url, KeyPrefix: prefix})
	if got := listIDs(t, again, svc.RunFilter{}); !slices.Equal(got, want[1:]) {
		t.Errorf("listed %q after a second Open, want %q", got, want[1:])
	}
}

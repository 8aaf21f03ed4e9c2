package storetest

import (
	"cmp"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/svc-dev/svc"
)

// The svc.RunLister part of the contract. Every store lists its runs, and
// beyond the svc doc comments the suite holds them to these rules:
//
//   - Runs come newest first by CreatedAt, compared to the microsecond;
//     runs created in the same microsecond come by RunID, descending (byte
//     order). Run ids are UUIDv7 in production, so that is creation order
//     too.
//   - A page is never empty unless it is the only one: NextCursor is empty
//     exactly when no run follows the page.
//   - Runs of an empty page is empty, not nil (it encodes as []).
//   - Paging is keyset paging: every run that exists throughout is listed
//     exactly once, whatever is created or changed between two pages, and a
//     run created between two pages with a newer CreatedAt does not show in
//     the later pages.
//   - A State outside the five run states, a negative Limit or one above
//     svc.MaxRunPage, and a cursor the store did not make are
//     SpecValidationErrors.

// lister is s as a svc.RunLister; every store must be one.
func lister(t *testing.T, s svc.RunStore) svc.RunLister {
	t.Helper()
	l, ok := s.(svc.RunLister)
	if !ok {
		t.Fatalf("%T does not implement svc.RunLister", s)
	}
	return l
}

func listPage(t *testing.T, s svc.RunStore, f svc.RunFilter) svc.RunPage {
	t.Helper()
	page, err := lister(t, s).ListRuns(t.Context(), f)
	mustOK(t, fmt.Sprintf("ListRuns(%+v)", f), err)
	return page
}

// listAll follows f's cursors to the last page and returns the runs and
// the pages. It fails on a duplicate run, on an empty page that is not the
// only one, and on a page larger than the limit.
func listAll(t *testing.T, s svc.RunStore, f svc.RunFilter) ([]svc.RunSummary, []svc.RunPage) {
	t.Helper()
	limit := cmp.Or(f.Limit, svc.DefaultRunPage)
	seen := map[string]bool{}
	var runs []svc.RunSummary
	var pages []svc.RunPage
	for {
		page := listPage(t, s, f)
		pages = append(pages, page)
		if len(page.Runs) > limit {
			t.Fatalf("page %d of %+v has %d runs, above the limit %d", len(pages), f, len(page.Runs), limit)
		}
		if len(page.Runs) == 0 && len(pages) > 1 {
			t.Fatalf("page %d of %+v is empty: the cursor before it should have been empty", len(pages), f)
		}
		for _, r := range page.Runs {
			if seen[r.RunID] {
				t.Fatalf("page %d of %+v lists %s again", len(pages), f, r.RunID)
			}
			seen[r.RunID] = true
		}
		runs = append(runs, page.Runs...)
		if page.NextCursor == "" {
			return runs, pages
		}
		if len(page.Runs) == 0 {
			t.Fatalf("page %d of %+v is empty but has a cursor", len(pages), f)
		}
		f.Cursor = page.NextCursor
	}
}

func runIDs(runs []svc.RunSummary) []string {
	out := make([]string, 0, len(runs))
	for _, r := range runs {
		out = append(out, r.RunID)
	}
	return out
}

// checkListing pages through f and checks the runs are want, in order, and
// that each row matches the run's record.
func checkListing(t *testing.T, what string, s svc.RunStore, f svc.RunFilter, want []string) {
	t.Helper()
	runs, _ := listAll(t, s, f)
	if got := runIDs(runs); !slices.Equal(got, want) {
		t.Fatalf("%s: ListRuns(%+v) listed %q, want %q", what, f, got, want)
	}
	for _, r := range runs {
		checkSummary(t, what, r, get(t, s, r.RunID))
	}
}

// checkSummary checks a listed row against the run's record.
func checkSummary(t *testing.T, what string, got svc.RunSummary, rec svc.RunRecord) {
	t.Helper()
	want := svc.RunSummary{RunID: rec.RunID, Target: rec.Target, Kind: rec.Kind, State: rec.State,
		Reason: rec.Reason, TraceID: rec.TraceID, Tenant: rec.Tenant, Progress: rec.Progress, CreatedAt: rec.CreatedAt, UpdatedAt: rec.UpdatedAt}
	if got.RunID != want.RunID || got.Tenant != want.Tenant || got.Target != want.Target || got.Kind != want.Kind || got.State != want.State ||
		got.Reason != want.Reason || got.TraceID != want.TraceID || !got.CreatedAt.Equal(want.CreatedAt) || !got.UpdatedAt.Equal(want.UpdatedAt) ||
		(got.Progress == nil) != (want.Progress == nil) || got.Progress != nil && *got.Progress != *want.Progress {
		t.Errorf("%s: listed %+v (progress %v), want %+v (progress %v) as Get has it", what, got, got.Progress, want, want.Progress)
	}
}

// listed is a run the test created and where it must be listed.
type listed struct {
	id string
	at time.Time
}

// newestFirst sorts runs into the listing order: by time to the
// microsecond, then by id.
func newestFirst(runs []listed) []string {
	runs = slices.Clone(runs)
	slices.SortFunc(runs, func(a, b listed) int {
		if c := cmp.Compare(b.at.UnixMicro(), a.at.UnixMicro()); c != 0 {
			return c
		}
		return cmp.Compare(b.id, a.id)
	})
	out := make([]string, 0, len(runs))
	for _, r := range runs {
		out = append(out, r.id)
	}
	return out
}

func testListEmpty(t *testing.T, s svc.RunStore) {
	for _, f := range []svc.RunFilter{{}, {Limit: 1}, {State: svc.RunRunning}, {Limit: svc.MaxRunPage}} {
		page := listPage(t, s, f)
		if page.Runs == nil || len(page.Runs) != 0 || page.NextCursor != "" {
			t.Errorf("ListRuns(%+v) of an empty store = %+v (nil runs: %v), want no runs (not nil) and no cursor",
				f, page, page.Runs == nil)
		}
	}
	// A state nobody is in, in a store that is not empty.
	create(t, s, "p")
	page := listPage(t, s, svc.RunFilter{State: svc.RunCompleted})
	if page.Runs == nil || len(page.Runs) != 0 || page.NextCursor != "" {
		t.Errorf("ListRuns(completed) with only a pending run = %+v, want no runs (not nil) and no cursor", page)
	}
}

func testListOrder(t *testing.T, s svc.RunStore) {
	ctx := t.Context()
	// Created out of order, with a tie of four at ts(5) whose ids share
	// prefixes, and one timestamp in another location.
	runs := []listed{
		{"b", ts(5)}, {"old", ts(1)}, {"a", ts(5)}, {"new", ts(9)}, {"c", ts(5)},
		{"mid", ts(3).In(time.FixedZone("X", -7*3600))}, {"ab", ts(5)},
		// Two runs a microsecond apart, ids against time order: time wins.
		{"z-older", ts(7)}, {"a-newer", ts(7).Add(time.Microsecond)},
	}
	for _, r := range runs {
		createAt(t, s, r.id, r.at)
	}
	want := newestFirst(runs)
	if !slices.Equal(want, []string{"new", "a-newer", "z-older", "c", "b", "ab", "a", "mid", "old"}) {
		t.Fatalf("the suite's own order is wrong: %q", want)
	}
	// Every field of a row comes from the record.
	mustOK(t, "SetState", s.SetState(ctx, "mid", svc.RunRunning, "", nil))
	mustOK(t, "SetProgress", s.SetProgress(ctx, "mid", svc.RunProgress{Total: 4, Completed: 1, Failed: 1, Running: 2}))
	moveTo(t, s, "a", svc.RunRunning)
	mustOK(t, "SetResult", s.SetResult(ctx, "a", json.RawMessage(`{"output":"x"}`)))
	mustOK(t, "SetState", s.SetState(ctx, "a", svc.RunCompleted, "", nil))
	mustOK(t, "SetState", s.SetState(ctx, "old", svc.RunCancelled, "user", nil))
	checkListing(t, "one page", s, svc.RunFilter{}, want)
	checkListing(t, "pages of one", s, svc.RunFilter{Limit: 1}, want)

	// A run created with a zero CreatedAt is created now: the newest.
	mustOK(t, "Create", s.Create(ctx, svc.RunRecord{RunID: "now", Target: "pipeline", Kind: "group"}))
	page := listPage(t, s, svc.RunFilter{Limit: 2})
	if got := runIDs(page.Runs); !slices.Equal(got, []string{"now", "new"}) || page.NextCursor == "" {
		t.Fatalf("first page of 2 = %q (cursor %q), want [now new] and a cursor", got, page.NextCursor)
	}
	checkSummary(t, "run created now", page.Runs[0], get(t, s, "now"))
	// The caller's copy of a row is its own.
	page = listPage(t, s, svc.RunFilter{State: svc.RunRunning})
	if len(page.Runs) != 1 || page.Runs[0].Progress == nil {
		t.Fatalf("running runs = %+v, want mid with its progress", page.Runs)
	}
	page.Runs[0].Progress.Total = 1000
	if p := get(t, s, "mid").Progress; p == nil || p.Total != 4 {
		t.Errorf("changing a listed Progress changed the store: %v", p)
	}
}

func testListPaging(t *testing.T, s svc.RunStore) {
	// 23 runs in ties of three (so page boundaries fall inside ties),
	// created in a scrambled order.
	const n = 23
	var runs []listed
	for i := range n {
		j := i * 7 % n
		r := listed{fmt.Sprintf("run-%02d", j), ts(j / 3)}
		createAt(t, s, r.id, r.at)
		runs = append(runs, r)
	}
	want := newestFirst(runs)
	for _, limit := range []int{1, 2, 3, 4, 5, 7, 22, 23, 24, svc.MaxRunPage} {
		t.Run(fmt.Sprint("limit", limit), func(t *testing.T) {
			got, pages := listAll(t, s, svc.RunFilter{Limit: limit})
			if ids := runIDs(got); !slices.Equal(ids, want) {
				t.Fatalf("listed %q, want %q", ids, want)
			}
			if wantPages := (n + limit - 1) / limit; len(pages) != wantPages {
				t.Errorf("%d pages, want %d", len(pages), wantPages)
			}
			for i, p := range pages[:len(pages)-1] {
				if len(p.Runs) != limit {
					t.Errorf("page %d has %d runs, want a full page of %d", i+1, len(p.Runs), limit)
				}
			}
		})
	}
	// A cursor can be read again: the same page comes back.
	first := listPage(t, s, svc.RunFilter{Limit: 4})
	a := listPage(t, s, svc.RunFilter{Limit: 4, Cursor: first.NextCursor})
	b := listPage(t, s, svc.RunFilter{Limit: 4, Cursor: first.NextCursor})
	if !slices.Equal(runIDs(a.Runs), runIDs(b.Runs)) || a.NextCursor != b.NextCursor || !slices.Equal(runIDs(a.Runs), want[4:8]) {
		t.Errorf("the same cursor read twice gave %q then %q, want %q", runIDs(a.Runs), runIDs(b.Runs), want[4:8])
	}
	// A cursor's page size may change from page to page.
	c := listPage(t, s, svc.RunFilter{Limit: 10, Cursor: first.NextCursor})
	if !slices.Equal(runIDs(c.Runs), want[4:14]) {
		t.Errorf("page of 10 after a page of 4 = %q, want %q", runIDs(c.Runs), want[4:14])
	}
}

func testListDefaultLimit(t *testing.T, s svc.RunStore) {
	const n = svc.DefaultRunPage + 10
	var runs []listed
	for i := range n {
		r := listed{fmt.Sprintf("run-%03d", i), ts(i)}
		createAt(t, s, r.id, r.at)
		runs = append(runs, r)
	}
	want := newestFirst(runs)
	page := listPage(t, s, svc.RunFilter{})
	if got := runIDs(page.Runs); !slices.Equal(got, want[:svc.DefaultRunPage]) || page.NextCursor == "" {
		t.Fatalf("Limit 0 listed %d runs %q (cursor %q), want the newest %d and a cursor", len(got), got, page.NextCursor, svc.DefaultRunPage)
	}
	page = listPage(t, s, svc.RunFilter{Cursor: page.NextCursor})
	if got := runIDs(page.Runs); !slices.Equal(got, want[svc.DefaultRunPage:]) || page.NextCursor != "" {
		t.Fatalf("second default page = %q (cursor %q), want %q and no cursor", got, page.NextCursor, want[svc.DefaultRunPage:])
	}
	page = listPage(t, s, svc.RunFilter{Limit: svc.MaxRunPage})
	if len(page.Runs) != n || page.NextCursor != "" {
		t.Fatalf("Limit %d listed %d runs (cursor %q), want all %d and no cursor", svc.MaxRunPage, len(page.Runs), page.NextCursor, n)
	}
}

func testListNewRunsBetweenPages(t *testing.T, s svc.RunStore) {
	ctx := t.Context()
	const n = 12
	var runs []listed
	for i := range n {
		r := listed{fmt.Sprintf("run-%02d", i), ts(i / 2)}
		createAt(t, s, r.id, r.at)
		runs = append(runs, r)
	}
	want := newestFirst(runs)
	f := svc.RunFilter{Limit: 5}
	page := listPage(t, s, f)
	got := runIDs(page.Runs)
	// Between the pages: new runs (one created now, two at later times,
	// one tied with the newest run but with a greater id), and runs of
	// every page change state.
	mustOK(t, "Create", s.Create(ctx, svc.RunRecord{RunID: "late-now", Target: "echo", Kind: "agent"}))
	createAt(t, s, "late-1", ts(100))
	createAt(t, s, "late-2", ts(101))
	createAt(t, s, "zz-tied-newest", ts((n-1)/2))
	for _, id := range []string{want[0], want[6], want[11]} {
		moveTo(t, s, id, svc.RunCompleted)
	}
	for f.Cursor = page.NextCursor; f.Cursor != ""; f.Cursor = page.NextCursor {
		page = listPage(t, s, f)
		got = append(got, runIDs(page.Runs)...)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("listed %q across pages, want %q: every run once, none created after the first page", got, want)
	}
	// A fresh listing has them all.
	all, _ := listAll(t, s, svc.RunFilter{Limit: 3})
	if len(all) != n+4 || all[0].RunID != "late-now" {
		t.Errorf("fresh listing = %q, want %d runs starting with late-now", runIDs(all), n+4)
	}
}

func testListStateFilter(t *testing.T, s svc.RunStore) {
	ctx := t.Context()
	// 25 runs, five in each of the spec's five states, with ties, and
	// three waiting runs.
	byState := map[svc.RunState][]listed{}
	var all []listed
	for i := range 25 {
		st := states[(i*3)%5]
		r := listed{fmt.Sprintf("run-%02d", i), ts(i / 4)}
		driveAt(t, s, r.id, st, r.at)
		byState[st] = append(byState[st], r)
		all = append(all, r)
	}
	for i := range 3 {
		r := listed{fmt.Sprintf("wait-%02d", i), ts(i * 3)}
		driveAt(t, s, r.id, svc.RunWaiting, r.at)
		byState[svc.RunWaiting] = append(byState[svc.RunWaiting], r)
		all = append(all, r)
	}
	for _, st := range states {
		for _, limit := range []int{1, 2, 5, 6} {
			f := svc.RunFilter{State: st, Limit: limit}
			checkListing(t, fmt.Sprintf("state %s", st), s, f, newestFirst(byState[st]))
		}
	}
	checkListing(t, "no state", s, svc.RunFilter{Limit: 4}, newestFirst(all))

	// Runs change state while a filtered listing pages through them: a run
	// that left the state before its page is not listed, the ones that stay
	// are listed once, and one that entered the state is listed if and only
	// if its place is after the cursor.
	running := newestFirst(byState[svc.RunRunning])
	pending := newestFirst(byState[svc.RunPending])
	f := svc.RunFilter{State: svc.RunRunning, Limit: 2}
	page := listPage(t, s, f)
	if got := runIDs(page.Runs); !slices.Equal(got, running[:2]) {
		t.Fatalf("first page of running = %q, want %q", got, running[:2])
	}
	mustOK(t, "SetState", s.SetState(ctx, running[2], svc.RunFailed, "boom", nil))
	mustOK(t, "SetState", s.SetState(ctx, running[0], svc.RunCompleted, "", nil))
	// The newest pending run is before the cursor, the oldest after it.
	newer, older := pending[0], pending[len(pending)-1]
	cursor := find(all, running[1])
	if !before(find(all, newer), cursor) || before(find(all, older), cursor) {
		t.Fatalf("the suite's runs are badly placed: %s and %s should be either side of %s", newer, older, cursor.id)
	}
	mustOK(t, "SetState", s.SetState(ctx, newer, svc.RunRunning, "", nil))
	mustOK(t, "SetState", s.SetState(ctx, older, svc.RunRunning, "", nil))
	var got []string
	for f.Cursor = page.NextCursor; f.Cursor != ""; f.Cursor = page.NextCursor {
		page = listPage(t, s, f)
		for _, r := range page.Runs {
			if r.State != svc.RunRunning {
				t.Errorf("running listing has %s in state %s", r.RunID, r.State)
			}
		}
		got = append(got, runIDs(page.Runs)...)
	}
	want := newestFirst([]listed{find(all, running[3]), find(all, running[4]), find(all, older)})
	if !slices.Equal(got, want) {
		t.Errorf("running runs after the first page = %q, want %q", got, want)
	}
	// The fresh listing of each state sees the moves.
	checkListing(t, "failed after the moves", s, svc.RunFilter{State: svc.RunFailed, Limit: 3},
		newestFirst(append(slices.Clone(byState[svc.RunFailed]), find(all, running[2]))))
	checkListing(t, "completed after the moves", s, svc.RunFilter{State: svc.RunCompleted, Limit: 3},
		newestFirst(append(slices.Clone(byState[svc.RunCompleted]), find(all, running[0]))))
}

// before reports whether a is listed before b.
func before(a, b listed) bool {
	return newestFirst([]listed{a, b})[0] == a.id && a.id != b.id
}

func find(runs []listed, id string) listed {
	for _, r := range runs {
		if r.id == id {
			return r
		}
	}
	panic("storetest: no run " + id)
}

func testListErrors(t *testing.T, s svc.RunStore) {
	ctx := t.Context()
	for i := range 3 {
		createAt(t, s, fmt.Sprint("r", i), ts(i))
	}
	l := lister(t, s)
	for _, f := range []svc.RunFilter{
		{Limit: -1},
		{Limit: svc.MaxRunPage + 1},
		{Limit: -svc.DefaultRunPage},
		{State: "bogus"},
		{State: "RUNNING"},
		{Cursor: "!!! not a cursor !!!"},
		{Cursor: "not a cursor"},
		{Cursor: base64.RawURLEncoding.EncodeToString([]byte("garbage"))},
		{Cursor: base64.StdEncoding.EncodeToString([]byte{0xff, 0xfe, 0x00, 0x01})},
	} {
		page, err := l.ListRuns(ctx, f)
		mustKind(t, fmt.Sprintf("ListRuns(%+v)", f), err, svc.ErrSpecValidation)
		if err == nil {
			t.Errorf("ListRuns(%+v) = %+v", f, page)
		}
	}
	// The bounds themselves are fine.
	for _, f := range []svc.RunFilter{{Limit: 1}, {Limit: svc.MaxRunPage}} {
		if _, err := l.ListRuns(ctx, f); err != nil {
			t.Errorf("ListRuns(%+v): %v", f, err)
		}
	}
	// A cursor made with one filter reads on with another.
	page := listPage(t, s, svc.RunFilter{Limit: 1})
	page = listPage(t, s, svc.RunFilter{Limit: 1, State: svc.RunPending, Cursor: page.NextCursor})
	if got := runIDs(page.Runs); !slices.Equal(got, []string{"r1"}) {
		t.Errorf("pending page after the first run = %q, want [r1]", got)
	}
}

func testListClosed(t *testing.T, s svc.RunStore) {
	create(t, s, "r1")
	l := lister(t, s)
	mustOK(t, "Close", s.Close())
	if page, err := l.ListRuns(t.Context(), svc.RunFilter{}); err == nil {
		t.Errorf("ListRuns after Close = %+v, want an error", page)
	}
}

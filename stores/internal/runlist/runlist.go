// Package runlist is what the run stores share to implement svc.RunLister:
// the checks of a svc.RunFilter, the order of a listing and the cursor
// format, so that every store pages the same way.
//
// Runs are listed newest first: by creation time to the microsecond (the
// precision every store keeps), descending, and among runs created in the
// same microsecond by run id, descending, byte for byte. A Position is a
// run's place in that order; a cursor is the Position of the last run of a
// page, and the next page holds the runs strictly after it. Paging is
// therefore keyset paging: a run created or removed between two pages
// shifts nothing, so every run that exists throughout is listed exactly
// once, and a new run (created now, so newer than any cursor) never shows up
// in a later page.
package runlist

import (
	"encoding/base64"
	"strconv"
	"strings"

	"github.com/svc-dev/svc"
)

// Position is a run's place in the listing order.
type Position struct {
	// CreatedUS is the creation time in Unix microseconds.
	CreatedUS int64
	RunID     string
}

// Of is the Position of rec.
func Of(rec *svc.RunRecord) Position {
	return Position{CreatedUS: rec.CreatedAt.UnixMicro(), RunID: rec.RunID}
}

// Before reports whether p is listed before q: p is newer, or as new with
// the greater run id.
func (p Position) Before(q Position) bool {
	if p.CreatedUS != q.CreatedUS {
		return p.CreatedUS > q.CreatedUS
	}
	return p.RunID > q.RunID
}

// Compare orders positions as listed: negative when p comes first.
func Compare(p, q Position) int {
	switch {
	case p.Before(q):
		return -1
	case q.Before(p):
		return 1
	}
	return 0
}

// cursorVersion starts every cursor, so the format may change later
// without old cursors being misread.
const cursorVersion = "v1"

// Cursor is p as an opaque, URL-safe string.
func (p Position) Cursor() string {
	return base64.RawURLEncoding.EncodeToString([]byte(cursorVersion + ":" + strconv.FormatInt(p.CreatedUS, 10) + ":" + p.RunID))
}

// Query is a checked svc.RunFilter.
type Query struct {
	State svc.RunState // "" for every state
	// Tenant, when not "", keeps the runs of that tenant only.
	Tenant string
	Limit  int // 1 to svc.MaxRunPage
	// After, when not nil, is the cursor's Position: the page holds only
	// the runs listed after it.
	After *Position
}

// Parse checks f; store names the store in error messages. A negative or
// too large limit, an unknown state and a malformed cursor are
// SpecValidationErrors.
func Parse(store string, f svc.RunFilter) (Query, error) {
	q := Query{State: f.State, Tenant: f.Tenant, Limit: f.Limit}
	switch {
	case f.Limit == 0:
		q.Limit = svc.DefaultRunPage
	case f.Limit < 0 || f.Limit > svc.MaxRunPage:
		return Query{}, svc.Errorf(svc.KindSpecValidation, "%s: run page limit %d: want 1 to %d (0 for %d)",
			store, f.Limit, svc.MaxRunPage, svc.DefaultRunPage)
	}
	if f.State != "" && !f.State.Valid() {
		return Query{}, svc.Errorf(svc.KindSpecValidation, "%s: unknown run state %q", store, f.State)
	}
	if f.Cursor != "" {
		p, ok := decode(f.Cursor)
		if !ok {
			return Query{}, svc.Errorf(svc.KindSpecValidation, "%s: malformed run cursor %q", store, f.Cursor)
		}
		q.After = &p
	}
	return q, nil
}

func decode(cursor string) (Position, bool) {
	b, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil {
		return Position{}, false
	}
	version, rest, ok := strings.Cut(string(b), ":")
	if !ok || version != cursorVersion {
		return Position{}, false
	}
	us, id, ok := strings.Cut(rest, ":")
	if !ok || id == "" {
		return Position{}, false
	}
	n, err := strconv.ParseInt(us, 10, 64)
	if err != nil {
		return Position{}, false
	}
	return Position{CreatedUS: n, RunID: id}, true
}

// Match reports whether a run at p in state st of tenant belongs to q's
// pages after the cursor.
func (q Query) Match(p Position, st svc.RunState, tenant string) bool {
	return q.Keeps(st, tenant) && (q.After == nil || q.After.Before(p))
}

// Keeps reports whether a run in state st of tenant passes q's filters.
func (q Query) Keeps(st svc.RunState, tenant string) bool {
	return (q.State == "" || st == q.State) && (q.Tenant == "" || tenant == q.Tenant)
}

// Fetch is how many rows a store reads for a page: one more than the
// limit, so that it knows whether another page follows without handing
// out a cursor to an empty page.
func (q Query) Fetch() int { return q.Limit + 1 }

// Row is one run a store found for a page, with its Position.
type Row struct {
	Pos     Position
	Summary svc.RunSummary
}

// Page turns the rows a store read (in listing order, at most q.Fetch()
// of them) into the page: the first q.Limit, and a cursor when there were
// more. Runs is never nil, so an empty page encodes as [].
func (q Query) Page(rows []Row) svc.RunPage {
	page := svc.RunPage{Runs: make([]svc.RunSummary, 0, min(len(rows), q.Limit))}
	for i, r := range rows {
		if i == q.Limit {
			page.NextCursor = rows[i-1].Pos.Cursor()
			break
		}
		page.Runs = append(page.Runs, r.Summary)
	}
	return page
}

// Summary is rec's row, with its own copy of the progress.
func Summary(rec *svc.RunRecord) svc.RunSummary {
	s := svc.RunSummary{
		RunID: rec.RunID, Target: rec.Target, Kind: rec.Kind, State: rec.State, Reason: rec.Reason,
		TraceID: rec.TraceID, Tenant: rec.Tenant, CreatedAt: rec.CreatedAt, UpdatedAt: rec.UpdatedAt,
	}
	if rec.Progress != nil {
		p := *rec.Progress
		s.Progress = &p
	}
	return s
}

// RowOf is rec's Row.
func RowOf(rec *svc.RunRecord) Row { return Row{Pos: Of(rec), Summary: Summary(rec)} }

package server

import (
	"cmp"
	"encoding/base64"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	svc "github.com/svc-dev/svc"
)

// GET /runs lists the run history: the submitted runs of the backend's
// run store (svc.RunLister) and, when the event store keeps one
// (svc.RunHistoryReader), every other top-level request it holds events
// of (synchronous runs, gathers, group runs), one row each, newest first.
//
// A submitted run has events too (its trace); the event store does not
// know it was submitted, so its trace is left out of the event store's
// rows and it is listed once, from the run store, with its run id. That
// takes every submitted run's trace id: the route reads the run store's
// summaries, up to maxSubmittedScan of the newest.
//
// state= (and type=submitted without status or target) keeps the route's
// first form: the submitted runs only, filtered by their state and paged
// by the run store's cursor. Otherwise rows
// are ordered by (created_at, key) where the key is the run id of a
// submitted run and the trace id of another, and the cursor is the last
// row's place in that order; total counts every matching row.

// maxSubmittedScan bounds the submitted runs one request reads.
const maxSubmittedScan = 10 * svc.MaxRunPage

func (o *observation) runs(w http.ResponseWriter, r *http.Request) error {
	q, err := queryOf(r, "state", "status", "target", "type", "tenant", "limit", "cursor")
	if err != nil {
		return err
	}
	limit := svc.DefaultRunPage
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > svc.MaxRunPage {
			return svc.Errorf(svc.KindSpecValidation, "query parameter limit=%q: want a whole number from 1 to %d", v, svc.MaxRunPage)
		}
		limit = n
	}
	status, target, typ, state := q.Get("status"), q.Get("target"), q.Get("type"), q.Get("state")
	if status != "" && !slices.Contains(svc.RunStatuses, status) {
		return svc.Errorf(svc.KindSpecValidation, "query parameter status=%q: want %s", status, strings.Join(svc.RunStatuses, ", "))
	}
	switch typ {
	case "", svc.RunTypeRun, svc.RunTypeGather, svc.RunTypeGroup, svc.RunTypeSubmitted:
	default:
		return svc.Errorf(svc.KindSpecValidation, "query parameter type=%q: want run, gather, group or submitted", typ)
	}
	lister, _ := o.b.(svc.RunLister)
	hist, _ := o.events.(svc.RunHistoryReader)
	filtered := status != "" || target != "" || (typ != "" && typ != svc.RunTypeSubmitted)
	tenant := q.Get("tenant")
	if p, keyed := svc.PrincipalFrom(r.Context()); keyed && !p.Admin() {
		if tenant != "" && tenant != p.Tenant {
			return svc.Errorf(svc.KindForbidden, "query parameter tenant=%q: only an admin key lists another tenant's runs", tenant)
		}
		if p.Tenant == "" {
			return svc.Errorf(svc.KindForbidden, "GET /runs: the API key has no tenant")
		}
		tenant = p.Tenant
	}
	if tenant != "" {
		// The event store's run history does not say whose each run
		// was: a tenant's listing is of its submitted runs.
		if filtered {
			return svc.Errorf(svc.KindSpecValidation, "GET /runs of one tenant lists its submitted runs alone: give state (or type=submitted), not status, target or type")
		}
		return o.submittedRuns(w, r, lister, svc.RunState(state), tenant, limit, q.Get("cursor"))
	}
	switch {
	case state != "" && filtered:
		return svc.Errorf(svc.KindSpecValidation, "query parameter state filters the submitted runs alone: give status (with target and type) or state, not both")
	case hist == nil && filtered:
		return svc.Errorf(svc.KindSpecValidation, "query parameters status, target and type need an event store with a run history; this server has none")
	case state != "" || hist == nil || (typ == svc.RunTypeSubmitted && !filtered):
		return o.submittedRuns(w, r, lister, svc.RunState(state), "", limit, q.Get("cursor"))
	}
	var before *svc.HistoryPos
	if c := q.Get("cursor"); c != "" {
		if before, err = decodeHistoryCursor(c); err != nil {
			return err
		}
	}

	// The submitted runs: every one's trace is left out of the event
	// store's rows; those that match are rows themselves.
	var (
		subs    []svc.RunSummary
		exclude []string
	)
	if lister != nil && (typ == "" || typ == svc.RunTypeSubmitted || hist != nil) {
		all, err := allSubmitted(r, lister)
		if err != nil {
			return err
		}
		for _, s := range all {
			if s.TraceID != "" {
				exclude = append(exclude, s.TraceID)
			}
			s.Type, s.Status = svc.RunTypeSubmitted, submittedStatus(s.State)
			if (status == "" || s.Status == status) && (target == "" || s.Target == target) && (typ == "" || typ == svc.RunTypeSubmitted) {
				subs = append(subs, s)
			}
		}
	}
	var page svc.HistoryPage
	if typ != svc.RunTypeSubmitted {
		page, err = hist.RunHistory(r.Context(), svc.RunHistoryQuery{
			Status: status, Target: target, Type: typ, Before: before, Exclude: exclude, Limit: min(limit+1, svc.MaxRunPage),
		})
		if err != nil {
			return err
		}
	}
	total := page.Total + int64(len(subs))
	rows := make([]svc.RunSummary, 0, len(page.Runs)+len(subs))
	for _, h := range page.Runs {
		rows = append(rows, historyRow(h))
	}
	more := len(page.Runs) > limit
	for _, s := range subs {
		if before == nil || olderThan(s, *before) {
			rows = append(rows, s)
		}
	}
	slices.SortFunc(rows, func(a, b svc.RunSummary) int {
		return cmp.Or(b.CreatedAt.Compare(a.CreatedAt), cmp.Compare(rowKey(b), rowKey(a)))
	})
	out := svc.RunPage{Runs: rows, Total: &total}
	if len(rows) > limit {
		out.Runs, more = rows[:limit], true
	}
	if more {
		last := out.Runs[len(out.Runs)-1]
		out.NextCursor = encodeHistoryCursor(svc.HistoryPos{At: last.CreatedAt, TraceID: rowKey(last)})
	}
	return writeJSON(w, http.StatusOK, out)
}

// submittedRuns is the route's first form: the run store's page.
func (o *observation) submittedRuns(w http.ResponseWriter, r *http.Request, lister svc.RunLister, state svc.RunState, tenant string, limit int, cursor string) error {
	f := svc.RunFilter{Cursor: cursor, Limit: limit, Tenant: tenant}
	if state != "" && !state.Valid() {
		return svc.Errorf(svc.KindSpecValidation, "query parameter state=%q: want pending, running, waiting, completed, failed or cancelled", state)
	}
	f.State = state
	if lister == nil {
		return svc.Errorf(svc.KindRegistry, "GET /runs?state= and type=submitted list submitted runs; this server keeps none")
	}
	page, err := lister.ListRuns(r.Context(), f)
	if err != nil {
		return err
	}
	if page.Runs == nil {
		page.Runs = []svc.RunSummary{}
	}
	for i := range page.Runs {
		page.Runs[i].Type, page.Runs[i].Status = svc.RunTypeSubmitted, submittedStatus(page.Runs[i].State)
	}
	return writeJSON(w, http.StatusOK, page)
}

// allSubmitted reads the newest maxSubmittedScan submitted runs.
func allSubmitted(r *http.Request, lister svc.RunLister) ([]svc.RunSummary, error) {
	var out []svc.RunSummary
	f := svc.RunFilter{Limit: svc.MaxRunPage}
	for len(out) < maxSubmittedScan {
		page, err := lister.ListRuns(r.Context(), f)
		if err != nil {
			return nil, err
		}
		out = append(out, page.Runs...)
		if page.NextCursor == "" || page.NextCursor == f.Cursor || len(page.Runs) == 0 {
			break
		}
		f.Cursor = page.NextCursor
	}
	return out, nil
}

// submittedStatus is the history status of a submitted run's state.
func submittedStatus(s svc.RunState) string {
	switch s {
	case svc.RunPending:
		return svc.RunStatusSpawned
	case svc.RunRunning:
		return svc.RunStatusRunning
	case svc.RunCompleted:
		return svc.RunStatusCompleted
	case svc.RunCancelled:
		return svc.RunStatusCancelled
	case svc.RunWaiting:
		return svc.RunStatusWaiting
	}
	return svc.RunStatusFailed
}

// historyRow is the row of a run the event store lists.
func historyRow(h svc.HistoryRun) svc.RunSummary {
	kind, state := svc.TargetAgent, svc.RunRunning
	if h.Type == svc.RunTypeGroup {
		kind = svc.TargetGroup
	}
	switch h.Status {
	case svc.RunStatusCompleted:
		state = svc.RunCompleted
	case svc.RunStatusFailed, svc.RunStatusRejected:
		state = svc.RunFailed
	}
	return svc.RunSummary{
		Target: h.Target, Kind: kind, State: state, TraceID: h.TraceID,
		CreatedAt: h.StartedAt, UpdatedAt: h.LastEventAt,
		Type: h.Type, Status: h.Status, Events: h.Events, TokensUsed: h.TokensUsed,
	}
}

// rowKey breaks ties in time: the run id of a submitted run, the trace id
// of another.
func rowKey(s svc.RunSummary) string {
	if s.RunID != "" {
		return s.RunID
	}
	return s.TraceID
}

// olderThan reports whether s comes after the cursor p in the history.
func olderThan(s svc.RunSummary, p svc.HistoryPos) bool {
	c := s.CreatedAt.Compare(p.At.Truncate(time.Microsecond))
	return c < 0 || (c == 0 && rowKey(s) < p.TraceID)
}

// The cursor is "h1.<unix µs>.<key>", base64url: opaque to clients.
const historyCursorPrefix = "h1."

func encodeHistoryCursor(p svc.HistoryPos) string {
	return base64.RawURLEncoding.EncodeToString([]byte(historyCursorPrefix + strconv.FormatInt(p.At.UnixMicro(), 10) + "." + p.TraceID))
}

func decodeHistoryCursor(c string) (*svc.HistoryPos, error) {
	bad := svc.Errorf(svc.KindSpecValidation, "query parameter cursor=%q: not a cursor of this route (give the next_cursor of a page)", c)
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return nil, bad
	}
	rest, ok := strings.CutPrefix(string(raw), historyCursorPrefix)
	if !ok {
		return nil, bad
	}
	us, key, ok := strings.Cut(rest, ".")
	n, err := strconv.ParseInt(us, 10, 64)
	if !ok || err != nil {
		return nil, bad
	}
	return &svc.HistoryPos{At: time.UnixMicro(n).UTC(), TraceID: key}, nil
}

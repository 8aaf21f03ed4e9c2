package server

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	svc "github.com/svc-dev/svc"
)

// Observation routes of the standalone server. They are read-only and
// computed on demand; mountObservation adds those whose source exists:
//
//	GET /events?limit=&since=&until=&trace_id=&event_type=   []svc.RuntimeEvent, newest first (event store)
//	GET /usage?group_by=agent|trace|model|none&since=&until= svc.Usage (event store)
//	GET /tools                                               []svc.ToolDescriptor (backend's svc.ToolCatalog)
//	GET /tools?group_by=tool|agent_tool&since=&until=        svc.ToolUsage (event store)
//	GET /runtime/stats?since=&until=                         svc.RuntimeStats (event store, plus the backend's runs in flight, tool servers and the live fleet)
//	GET /runs/{trace_id}/tree                                svc.EventTree (event store)
//	GET /runs?status=&target=&state=&limit=&cursor=          svc.RunPage (backend's svc.RunLister, and the event store's svc.RunHistoryReader: history.go)
//	GET /runtime/budget                                      svc.BudgetStatus (backend's svc.BudgetKeeper; 404 without a token_budget)
//	POST /runtime/budget/reset                               svc.BudgetStatus after the reset (backend's svc.BudgetKeeper)
//
// since and until are RFC 3339 timestamps, Unix milliseconds, or a Go
// duration (1h, 90m) meaning that long before now; since is inclusive,
// until exclusive. An unknown query parameter, a bad value or a limit above
// svc.MaxEventLimit is a 400 naming the parameter.
type observation struct {
	b      svc.Backend
	events svc.EventReader // nil without an event store
	fleet  svc.FleetReader // nil without a broker
	now    func() time.Time
	// keys, when set, is the use of each API key, which GET
	// /runtime/stats shows admin keys.
	keys KeyAuditor
}

// mountObservation mounts the observation routes and returns their
// handlers' state, which the caller may complete before serving.
func mountObservation(r chi.Router, b svc.Backend, events svc.EventReader, fleet svc.FleetReader) *observation {
	o := &observation{b: b, events: events, fleet: fleet, now: time.Now}
	_, hasCatalog := b.(svc.ToolCatalog)
	_, hasHistory := events.(svc.RunHistoryReader)
	if events != nil {
		r.Method(http.MethodGet, "/events", Handle(adminEvents("GET /events", o.listEvents)))
		r.Method(http.MethodGet, "/usage", Handle(adminEvents("GET /usage", o.usage)))
		r.Method(http.MethodGet, "/runs/{trace_id}/tree", Handle(adminEvents("GET /runs/{trace_id}/tree", o.tree)))
	}
	// Without an event store the stats still have the backend's live
	// figures: runs in flight, tool servers, budget, stuck calls.
	if _, live := b.(svc.InFlightReporter); events != nil || fleet != nil || live {
		r.Method(http.MethodGet, "/runtime/stats", Handle(adminEvents("GET /runtime/stats", o.stats)))
	}
	if events != nil || hasCatalog {
		r.Method(http.MethodGet, "/tools", Handle(o.tools))
	}
	if _, ok := b.(svc.RunLister); ok || hasHistory {
		r.Method(http.MethodGet, "/runs", Handle(o.runs))
	}
	if k, ok := b.(svc.BudgetKeeper); ok {
		r.Method(http.MethodGet, "/runtime/budget", Handle(func(w http.ResponseWriter, r *http.Request) error {
			return budgetReply(w, r, k.TokenBudget)
		}))
		r.Method(http.MethodPost, "/runtime/budget/reset", Handle(func(w http.ResponseWriter, r *http.Request) error {
			return budgetReply(w, r, k.ResetTokenBudget)
		}))
	}
	return o
}

// budgetReply answers a budget route with what op returns. The reset takes
// no body and no query: an operator's POST with either is a mistake.
func budgetReply(w http.ResponseWriter, r *http.Request, op func(context.Context) (svc.BudgetStatus, error)) error {
	if _, err := queryOf(r); err != nil {
		return err
	}
	st, err := op(r.Context())
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, st)
}

// parseTime reads since/until: RFC 3339 (with or without fractional
// seconds), Unix milliseconds, or a positive Go duration (1h, 90m, 1h30m)
// meaning now minus it.
func parseTime(name, v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
		return time.UnixMilli(ms).UTC(), nil
	}
	if d, err := time.ParseDuration(v); err == nil && d > 0 {
		return now.Add(-d).UTC(), nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, svc.Errorf(svc.KindSpecValidation,
			"query parameter %s=%q: want an RFC 3339 timestamp (2026-11-22T10:00:00Z), Unix milliseconds, or a positive duration before now (1h, 90m)", name, v)
	}
	return t, nil
}

// windowOf reads the since and until of q (one now for both), refusing
// an until before the since.
func windowOf(q url.Values, now time.Time) (svc.Window, error) {
	var (
		w   svc.Window
		err error
	)
	if w.Since, err = parseTime("since", q.Get("since"), now); err != nil {
		return w, err
	}
	if w.Until, err = parseTime("until", q.Get("until"), now); err != nil {
		return w, err
	}
	if !w.Since.IsZero() && !w.Until.IsZero() && w.Until.Before(w.Since) {
		return w, svc.Errorf(svc.KindSpecValidation, "query parameters since=%q and until=%q: until is before since",
			q.Get("since"), q.Get("until"))
	}
	return w, nil
}

// windowed is the event store's windowed reader, for a request with a
// window.
func (o *observation) windowed(route string) (svc.WindowedEventReader, error) {
	wr, ok := o.events.(svc.WindowedEventReader)
	if !ok {
		return nil, svc.Errorf(svc.KindSpecValidation, "%s: since and until need an event store with time windows; this one has none", route)
	}
	return wr, nil
}

func (o *observation) listEvents(w http.ResponseWriter, r *http.Request) error {
	q, err := queryOf(r, "limit", "since", "until", "trace_id", "event_type")
	if err != nil {
		return err
	}
	var eq svc.EventQuery
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return svc.Errorf(svc.KindSpecValidation, "query parameter limit=%q: want a whole number from 1 to %d", v, svc.MaxEventLimit)
		}
		if n > svc.MaxEventLimit {
			return svc.Errorf(svc.KindSpecValidation, "query parameter limit=%d is above the maximum of %d rows per request", n, svc.MaxEventLimit)
		}
		eq.Limit = n
	}
	win, err := windowOf(q, o.now())
	if err != nil {
		return err
	}
	eq.Since, eq.Until = win.Since, win.Until
	eq.TraceID = q.Get("trace_id")
	if v := q.Get("event_type"); v != "" {
		t, err := eventTypeOf(v)
		if err != nil {
			return err
		}
		eq.EventType = t
	}
	evs, err := o.events.Events(r.Context(), eq)
	if err != nil {
		return err
	}
	if evs == nil {
		evs = []svc.RuntimeEvent{}
	}
	return writeJSON(w, http.StatusOK, evs)
}

// eventTypeOf checks an event_type parameter against the known types.
func eventTypeOf(v string) (svc.EventType, error) {
	t := svc.EventType(v)
	if slices.Contains(svc.EventTypes, t) {
		return t, nil
	}
	names := make([]string, len(svc.EventTypes))
	for i, et := range svc.EventTypes {
		names[i] = string(et)
	}
	return "", svc.Errorf(svc.KindSpecValidation, "event_type %q is not an event type (known: %s)", v, strings.Join(names, ", "))
}

func (o *observation) usage(w http.ResponseWriter, r *http.Request) error {
	q, err := queryOf(r, "group_by", "since", "until")
	if err != nil {
		return err
	}
	g := q.Get("group_by")
	switch g {
	case "", svc.GroupByNone, svc.GroupByAgent, svc.GroupByTrace, svc.GroupByModel:
	default:
		return svc.Errorf(svc.KindSpecValidation, "query parameter group_by=%q: want agent, trace, model or none", g)
	}
	win, err := windowOf(q, o.now())
	if err != nil {
		return err
	}
	var u svc.Usage
	if win.IsZero() {
		u, err = o.events.Usage(r.Context(), g)
	} else {
		wr, werr := o.windowed("GET /usage")
		if werr != nil {
			return werr
		}
		u, err = wr.UsageIn(r.Context(), g, win)
	}
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, u)
}

func (o *observation) tools(w http.ResponseWriter, r *http.Request) error {
	q, err := queryOf(r, "group_by", "since", "until")
	if err != nil {
		return err
	}
	g := q.Get("group_by")
	win, err := windowOf(q, o.now())
	if err != nil {
		return err
	}
	if g != "" {
		if err := everyTenants(r, "GET /tools?group_by="); err != nil {
			return err
		}
	}
	switch g {
	case "":
		if !win.IsZero() {
			return svc.Errorf(svc.KindSpecValidation, "query parameters since and until window the tool calls: give group_by=tool or agent_tool (the registered tools have no time)")
		}
		cat, ok := o.b.(svc.ToolCatalog)
		if !ok {
			return writeJSON(w, http.StatusOK, []svc.ToolDescriptor{})
		}
		ds, err := cat.Tools(r.Context())
		if err != nil {
			return err
		}
		if ds == nil {
			ds = []svc.ToolDescriptor{}
		}
		return writeJSON(w, http.StatusOK, ds)
	case svc.GroupByTool, svc.GroupByAgentTool:
	default:
		return svc.Errorf(svc.KindSpecValidation, "query parameter group_by=%q: want tool or agent_tool (or none for the registered tools)", g)
	}
	if o.events == nil {
		return svc.Errorf(svc.KindRegistry, "GET /tools?group_by=%s needs an event store; this server has none (svc serve keeps one unless --events none)", g)
	}
	var u svc.ToolUsage
	if win.IsZero() {
		u, err = o.events.ToolUsage(r.Context(), g)
	} else {
		wr, werr := o.windowed("GET /tools")
		if werr != nil {
			return werr
		}
		u, err = wr.ToolUsageIn(r.Context(), g, win)
	}
	if err != nil {
		return err
	}
	if u.Rows == nil {
		u.Rows = []svc.ToolStats{}
	}
	return writeJSON(w, http.StatusOK, u)
}

func (o *observation) stats(w http.ResponseWriter, r *http.Request) error {
	q, err := queryOf(r, "since", "until")
	if err != nil {
		return err
	}
	now := o.now()
	win, err := windowOf(q, now)
	if err != nil {
		return err
	}
	st := svc.RuntimeStats{GeneratedAt: now.UTC(), Rejections: map[string]int64{}, ErrorGroups: []svc.ErrorGroup{}}
	switch {
	case o.events != nil && win.IsZero():
		if st, err = o.events.RuntimeStats(r.Context(), now); err != nil {
			return err
		}
	case o.events != nil:
		wr, err := o.windowed("GET /runtime/stats")
		if err != nil {
			return err
		}
		if st, err = wr.RuntimeStatsIn(r.Context(), now, win); err != nil {
			return err
		}
	case !win.IsZero():
		return svc.Errorf(svc.KindSpecValidation, "GET /runtime/stats: since and until window the event store's counts; this server has none (svc serve keeps one unless --events none)")
	}
	if err := o.addFleet(r, &st); err != nil {
		return err
	}
	if rc, ok := o.fleet.(svc.RedeliveryCounter); ok {
		st.Redeliveries = rc.Redeliveries()
	}
	if cat, ok := o.b.(svc.ToolCatalog); ok {
		if st.ToolServers, err = cat.ToolServers(r.Context()); err != nil {
			return err
		}
	}
	if st.ToolServers == nil {
		st.ToolServers = []svc.ToolServerStatus{}
	}
	if k, ok := o.b.(svc.BudgetKeeper); ok {
		if b, err := k.TokenBudget(r.Context()); err == nil {
			st.TokenBudget = &b
		}
	}
	if nl, ok := o.b.(svc.NodeLister); ok {
		if st.Nodes, err = nl.ServeNodes(r.Context()); err != nil {
			return err
		}
	}
	if sr, ok := o.b.(svc.StuckReporter); ok {
		st.Stuck = sr.Stuck()
	}
	if rr, ok := o.b.(svc.RateLimitReporter); ok {
		st.RateLimits = rr.RateLimits()
	}
	if ir, ok := o.b.(svc.InFlightReporter); ok {
		st.Header.RunsInFlight = ir.RunsInFlight()
	}
	if p, ok := svc.PrincipalFrom(r.Context()); ok && p.Admin() && o.keys != nil {
		st.Keys = o.keys.KeyUsage()
	}
	if st.Stuck.Calls == nil {
		st.Stuck.Calls = []svc.StuckCall{}
	}
	return writeJSON(w, http.StatusOK, st)
}

// addFleet puts the live fleet ahead of the workers the event store
// remembers: a worker this node has heard from is listed as it heard it
// (with its own health thresholds, worker_started counting as a sign of
// life); one only the store knows (heard before a restart) stays as the
// store derived it.
func (o *observation) addFleet(r *http.Request, st *svc.RuntimeStats) error {
	if o.fleet != nil {
		live, err := o.fleet.Workers(r.Context())
		if err != nil {
			return err
		}
		seen := make(map[string]bool, len(live))
		for _, w := range live {
			seen[w.RuntimeID] = true
		}
		for _, w := range st.Workers {
			if !seen[w.RuntimeID] {
				live = append(live, w)
			}
		}
		slices.SortFunc(live, func(a, b svc.WorkerStatus) int { return strings.Compare(a.RuntimeID, b.RuntimeID) })
		st.Workers = live
	}
	if st.Workers == nil {
		st.Workers = []svc.WorkerStatus{}
	}
	return nil
}

func (o *observation) tree(w http.ResponseWriter, r *http.Request) error {
	if _, err := queryOf(r); err != nil {
		return err
	}
	id, err := pathParam(r, "trace_id", "trace id")
	if err != nil {
		return err
	}
	t, err := o.events.Tree(r.Context(), id)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, t)
}

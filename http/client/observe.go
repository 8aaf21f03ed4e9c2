package client

import (
	"context"
	"encoding/json"
	"io"
	"iter"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"time"

	svc "github.com/svc-dev/svc"
)

var _ svc.Observer = (*Client)(nil)
var _ svc.BudgetKeeper = (*Client)(nil)

// openStream opens a text/event-stream GET of path, resuming after the
// given event id when it is positive. The stream is bound by ctx only,
// not by the client's timeout, which is meant for calls that answer. A
// non-2xx answer is the error it carries; a 2xx answer that is not an
// event stream is an error too.
func (c *Client) openStream(ctx context.Context, path string, after int64) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return nil, svc.Wrap(svc.KindSpecValidation, err, "client: building the request")
	}
	if after > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(after, 10))
	}
	return c.doStream(req, path)
}

// doStream sends req, which asks for an event stream, and returns the
// response once it is one; an error answer is rebuilt from its problem.
func (c *Client) doStream(req *http.Request, path string) (*http.Response, error) {
	req.Header.Set("Accept", "text/event-stream, application/problem+json")
	req.Header.Set("Cache-Control", "no-cache")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, transportError(err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer resp.Body.Close()
		data, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		if err != nil {
			return nil, transportError(err)
		}
		return nil, errorFromResponse(resp.StatusCode, resp.Header.Get("Content-Type"), data)
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" {
		resp.Body.Close()
		return nil, svc.Errorf(svc.KindRuntime, "client: %s %s: the server answered %q, not an event stream", req.Method, path, resp.Header.Get("Content-Type"))
	}
	return resp, nil
}

// Usage calls GET /usage: tokens of agent_completed events, runtime-wide
// (groupBy "" or "none") or grouped by "agent", "trace" or "model".
func (c *Client) Usage(ctx context.Context, groupBy string) (svc.Usage, error) {
	path := "/usage"
	if groupBy != "" {
		path += "?group_by=" + url.QueryEscape(groupBy)
	}
	var u svc.Usage
	err := c.call(ctx, http.MethodGet, path, "", nil, &u)
	return u, err
}

// ToolUsage calls GET /tools?group_by= ("tool" or "agent_tool"): calls,
// failures and latency percentiles per tool.
func (c *Client) ToolUsage(ctx context.Context, groupBy string) (svc.ToolUsage, error) {
	var u svc.ToolUsage
	err := c.call(ctx, http.MethodGet, "/tools?group_by="+url.QueryEscape(groupBy), "", nil, &u)
	return u, err
}

// RuntimeStats calls GET /runtime/stats.
func (c *Client) RuntimeStats(ctx context.Context) (svc.RuntimeStats, error) {
	var st svc.RuntimeStats
	err := c.call(ctx, http.MethodGet, "/runtime/stats", "", nil, &st)
	return st, err
}

// TokenBudget calls GET /runtime/budget: the state of the server's runtime
// token budget (a RegistryError when it has none). It implements
// svc.BudgetKeeper.
func (c *Client) TokenBudget(ctx context.Context) (svc.BudgetStatus, error) {
	var st svc.BudgetStatus
	err := c.call(ctx, http.MethodGet, "/runtime/budget", "", nil, &st)
	return st, err
}

// ResetTokenBudget calls POST /runtime/budget/reset: the operator's reset
// of the server's runtime token budget, which admits runs again.
func (c *Client) ResetTokenBudget(ctx context.Context) (svc.BudgetStatus, error) {
	var st svc.BudgetStatus
	err := c.call(ctx, http.MethodPost, "/runtime/budget/reset", "", nil, &st)
	return st, err
}

// ListTools calls GET /tools: the registered tool descriptors.
func (c *Client) ListTools(ctx context.Context) ([]svc.ToolDescriptor, error) {
	var ds []svc.ToolDescriptor
	err := c.call(ctx, http.MethodGet, "/tools", "", nil, &ds)
	return ds, err
}

// Events calls GET /events: stored events, newest first.
func (c *Client) Events(ctx context.Context, q svc.EventQuery) ([]svc.RuntimeEvent, error) {
	v := url.Values{}
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if !q.Since.IsZero() {
		v.Set("since", q.Since.Format(time.RFC3339Nano))
	}
	if !q.Until.IsZero() {
		v.Set("until", q.Until.Format(time.RFC3339Nano))
	}
	if q.TraceID != "" {
		v.Set("trace_id", q.TraceID)
	}
	if q.EventType != "" {
		v.Set("event_type", string(q.EventType))
	}
	path := "/events"
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	var evs []svc.RuntimeEvent
	err := c.call(ctx, http.MethodGet, path, "", nil, &evs)
	return evs, err
}

// Tree calls GET /runs/{trace_id}/tree.
func (c *Client) Tree(ctx context.Context, traceID string) (svc.EventTree, error) {
	var t svc.EventTree
	err := c.call(ctx, http.MethodGet, runPath(traceID, "tree"), "", nil, &t)
	return t, err
}

// ListRuns calls GET /runs: submitted runs, newest first, a page at a time.
func (c *Client) ListRuns(ctx context.Context, f svc.RunFilter) (svc.RunPage, error) {
	// type=submitted: the server's run history lists every run; a
	// RunLister lists the submitted ones (RunHistory lists them all).
	v := url.Values{"type": {svc.RunTypeSubmitted}}
	if f.State != "" {
		v.Set("state", string(f.State))
	}
	if f.Tenant != "" {
		v.Set("tenant", f.Tenant)
	}
	if f.Limit != 0 {
		v.Set("limit", strconv.Itoa(f.Limit))
	}
	if f.Cursor != "" {
		v.Set("cursor", f.Cursor)
	}
	path := "/runs?" + v.Encode()
	var p svc.RunPage
	err := c.call(ctx, http.MethodGet, path, "", nil, &p)
	return p, err
}

// StreamEvents follows GET /events/stream with f's filters (event_type,
// agent), yielding each frame whose data decodes as a RuntimeEvent;
// malformed frames are skipped. It ends when ctx ends (without an error),
// when the server closes the stream, or with the error of a failed
// connection or read, yielded last. It does not reconnect: `svc status`
// shows how.
func (c *Client) StreamEvents(ctx context.Context, f svc.EventFilter) iter.Seq2[svc.RuntimeEvent, error] {
	return func(yield func(svc.RuntimeEvent, error) bool) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		resp, err := c.openStream(ctx, EventStreamPath(f), 0)
		if err != nil {
			if ctx.Err() == nil {
				yield(svc.RuntimeEvent{}, err)
			}
			return
		}
		defer resp.Body.Close()
		err = readSSEFrames(resp.Body, func(data []byte, _ int64) bool {
			var ev svc.RuntimeEvent
			if json.Unmarshal(data, &ev) != nil || ev.EventType == "" {
				return true // a malformed frame: skipped, as the spec says
			}
			return yield(ev, nil)
		})
		if err != nil && err != errStopped && ctx.Err() == nil {
			yield(svc.RuntimeEvent{}, err)
		}
	}
}

// EventStreamPath is the path and query of GET /events/stream for f.
func EventStreamPath(f svc.EventFilter) string {
	v := url.Values{}
	for _, t := range f.EventTypes {
		v.Add("event_type", string(t))
	}
	if f.Agent != "" {
		v.Set("agent", f.Agent)
	}
	if len(v) == 0 {
		return "/events/stream"
	}
	return "/events/stream?" + v.Encode()
}

var _ svc.Observer = (*Local)(nil)

// noEvents is the error of an observation call a Local client over a
// backend cannot answer.
func noEvents(what string) error {
	return svc.Errorf(svc.KindRegistry, "client: %s needs an event store: build the Local client WithEventReader", what)
}

// Usage answers like Client.Usage.
func (l *Local) Usage(ctx context.Context, groupBy string) (svc.Usage, error) {
	if l.hc != nil {
		return l.hc.Usage(ctx, groupBy)
	}
	if l.events == nil {
		return svc.Usage{}, noEvents("usage")
	}
	return l.events.Usage(ctx, groupBy)
}

// ToolUsage answers like Client.ToolUsage.
func (l *Local) ToolUsage(ctx context.Context, groupBy string) (svc.ToolUsage, error) {
	if l.hc != nil {
		return l.hc.ToolUsage(ctx, groupBy)
	}
	if l.events == nil {
		return svc.ToolUsage{}, noEvents("tool usage")
	}
	return l.events.ToolUsage(ctx, groupBy)
}

// RuntimeStats answers like Client.RuntimeStats.
func (l *Local) RuntimeStats(ctx context.Context) (svc.RuntimeStats, error) {
	if l.hc != nil {
		return l.hc.RuntimeStats(ctx)
	}
	if l.events == nil {
		return svc.RuntimeStats{}, noEvents("runtime stats")
	}
	st, err := l.events.RuntimeStats(ctx, time.Now())
	if err != nil {
		return st, err
	}
	if cat, ok := l.b.(svc.ToolCatalog); ok {
		if st.ToolServers, err = cat.ToolServers(ctx); err != nil {
			return st, err
		}
	}
	if st.ToolServers == nil {
		st.ToolServers = []svc.ToolServerStatus{}
	}
	if sr, ok := l.b.(svc.StuckReporter); ok {
		st.Stuck = sr.Stuck()
	}
	if rr, ok := l.b.(svc.RateLimitReporter); ok {
		st.RateLimits = rr.RateLimits()
	}
	if ir, ok := l.b.(svc.InFlightReporter); ok {
		st.Header.RunsInFlight = ir.RunsInFlight()
	}
	if st.Stuck.Calls == nil {
		st.Stuck.Calls = []svc.StuckCall{}
	}
	return st, nil
}

// ListTools answers like Client.ListTools.
func (l *Local) ListTools(ctx context.Context) ([]svc.ToolDescriptor, error) {
	if l.hc != nil {
		return l.hc.ListTools(ctx)
	}
	cat, ok := l.b.(svc.ToolCatalog)
	if !ok {
		return []svc.ToolDescriptor{}, nil
	}
	return cat.Tools(ctx)
}

// StreamEvents answers like Client.StreamEvents; over a backend it
// subscribes to the WithSubscriber emitter directly.
func (l *Local) StreamEvents(ctx context.Context, f svc.EventFilter) iter.Seq2[svc.RuntimeEvent, error] {
	if l.hc != nil {
		return l.hc.StreamEvents(ctx, f)
	}
	return func(yield func(svc.RuntimeEvent, error) bool) {
		if l.sub == nil {
			yield(svc.RuntimeEvent{}, svc.Errorf(svc.KindRegistry, "client: event streaming needs an SSE emitter: build the Local client WithSubscriber"))
			return
		}
		s, err := l.sub.Subscribe(ctx, f)
		if err != nil {
			yield(svc.RuntimeEvent{}, err)
			return
		}
		defer s.Close()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-s.Events():
				if !ok || !yield(ev, nil) {
					return
				}
			}
		}
	}
}

// Events answers like Client.Events.
func (l *Local) Events(ctx context.Context, q svc.EventQuery) ([]svc.RuntimeEvent, error) {
	if l.hc != nil {
		return l.hc.Events(ctx, q)
	}
	if l.events == nil {
		return nil, noEvents("events")
	}
	return l.events.Events(ctx, q)
}

// Tree answers like Client.Tree.
func (l *Local) Tree(ctx context.Context, traceID string) (svc.EventTree, error) {
	if l.hc != nil {
		return l.hc.Tree(ctx, traceID)
	}
	if l.events == nil {
		return svc.EventTree{}, noEvents("the run tree")
	}
	return l.events.Tree(ctx, traceID)
}

// ListRuns answers like Client.ListRuns.
func (l *Local) ListRuns(ctx context.Context, f svc.RunFilter) (svc.RunPage, error) {
	if l.hc != nil {
		return l.hc.ListRuns(ctx, f)
	}
	rl, ok := l.b.(svc.RunLister)
	if !ok {
		return svc.RunPage{}, svc.Errorf(svc.KindRegistry, "client: the backend (%T) cannot list runs", l.b)
	}
	return rl.ListRuns(ctx, f)
}

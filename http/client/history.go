package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/svc-dev/svc"
)

// HistoryFilter selects rows of GET /runs, the run history: every
// top-level run (synchronous runs, gathers, group runs and submitted
// runs). Zero fields do not filter.
type HistoryFilter struct {
	// Status is one of svc.RunStatuses.
	Status string
	// Target is the agent or group name.
	Target string
	// Limit caps a page: 0 means svc.DefaultRunPage.
	Limit int
	// Cursor is a page's NextCursor, to read the page after it.
	Cursor string
}

// RunHistory calls GET /runs?status=&target=: a page of the run history,
// newest first, with the total of every page (RunPage.Total). A row that
// was not submitted has an empty RunID; its TraceID keys its tree.
func (c *Client) RunHistory(ctx context.Context, f HistoryFilter) (svc.RunPage, error) {
	v := url.Values{}
	if f.Status != "" {
		v.Set("status", f.Status)
	}
	if f.Target != "" {
		v.Set("target", f.Target)
	}
	if f.Limit != 0 {
		v.Set("limit", strconv.Itoa(f.Limit))
	}
	if f.Cursor != "" {
		v.Set("cursor", f.Cursor)
	}
	var p svc.RunPage
	err := c.call(ctx, http.MethodGet, withQuery("/runs", v), "", nil, &p)
	return p, err
}

// UsageIn calls GET /usage?since=&until=: Usage over the events in w.
func (c *Client) UsageIn(ctx context.Context, groupBy string, w svc.Window) (svc.Usage, error) {
	v := windowValues(w)
	if groupBy != "" {
		v.Set("group_by", groupBy)
	}
	var u svc.Usage
	err := c.call(ctx, http.MethodGet, withQuery("/usage", v), "", nil, &u)
	return u, err
}

// ToolUsageIn calls GET /tools?group_by=&since=&until=: ToolUsage over
// the tool calls in w.
func (c *Client) ToolUsageIn(ctx context.Context, groupBy string, w svc.Window) (svc.ToolUsage, error) {
	v := windowValues(w)
	v.Set("group_by", groupBy)
	var u svc.ToolUsage
	err := c.call(ctx, http.MethodGet, withQuery("/tools", v), "", nil, &u)
	return u, err
}

// RuntimeStatsIn calls GET /runtime/stats?since=&until=: the event
// counts, tokens, traces, rejections and error groups of w (the burn
// rate, workers and live figures stay those of now).
func (c *Client) RuntimeStatsIn(ctx context.Context, w svc.Window) (svc.RuntimeStats, error) {
	var st svc.RuntimeStats
	err := c.call(ctx, http.MethodGet, withQuery("/runtime/stats", windowValues(w)), "", nil, &st)
	return st, err
}

func windowValues(w svc.Window) url.Values {
	v := url.Values{}
	if !w.Since.IsZero() {
		v.Set("since", w.Since.Format(time.RFC3339Nano))
	}
	if !w.Until.IsZero() {
		v.Set("until", w.Until.Format(time.RFC3339Nano))
	}
	return v
}

func withQuery(path string, v url.Values) string {
	if len(v) == 0 {
		return path
	}
	return path + "?" + v.Encode()
}

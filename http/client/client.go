// Package client provides the two clients of an svc backend, both of which
// implement svc.Backend: Client speaks HTTP to a server (`svc serve`, or a
// host that mounts the router), and Local calls a backend or an HTTP handler
// in the same process, without a network.
//
// Both also implement svc.RunBackend, the asynchronous runs: Submit takes a
// run and returns its id at once, RunStatus, RunResult, CancelRun and
// RunEvents (a server-sent event stream over HTTP) come back for it. The
// package function Submit, and SubmitRun on either client, return a Run
// handle whose Result waits for the end.
//
// Errors the server answers with a problem+json body come back as the same
// *svc.Error kind the server raised, so errors.Is(err, svc.ErrBudgetExceeded)
// works across the wire. A failed run is not an error: it is an
// svc.AgentResult with Success false.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/google/uuid"

	svc "github.com/svc-dev/svc"
)

// DefaultTimeout bounds each call of a Client unless WithTimeout says
// otherwise.
const DefaultTimeout = 30 * time.Second

// requestIDHeader carries the request id; the server echoes it.
const requestIDHeader = "X-Request-Id"

// Client is an HTTP client of an svc server. It implements svc.Backend and
// is safe for concurrent use.
type Client struct {
	base    string // scheme://host[/prefix], without a trailing slash
	hc      *http.Client
	timeout time.Duration
	token   string
}

var _ svc.Backend = (*Client)(nil)

// Option configures New.
type Option func(*options) error

type options struct {
	timeout   time.Duration
	transport http.RoundTripper
	hc        *http.Client
	token     string
}

// WithTimeout bounds every call to d (default 30 s), through the call's
// context, so an earlier deadline of the caller's context still wins. Zero
// means no bound beyond the caller's context. Gather and long runs are
// bounded too: raise it for them.
func WithTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d < 0 {
			return fmt.Errorf("client: WithTimeout(%v): negative timeout", d)
		}
		o.timeout = d
		return nil
	}
}

// WithTransport sends requests through rt (by default a clone of
// http.DefaultTransport owned by the client). With WithHTTPClient as well,
// rt replaces that client's transport in the Client's copy of it.
func WithTransport(rt http.RoundTripper) Option {
	return func(o *options) error {
		if rt == nil {
			return errors.New("client: WithTransport: nil transport")
		}
		o.transport = rt
		return nil
	}
}

// WithHTTPClient sends requests with a copy of hc, keeping its transport,
// cookie jar, redirect policy and own Timeout.
func WithHTTPClient(hc *http.Client) Option {
	return func(o *options) error {
		if hc == nil {
			return errors.New("client: WithHTTPClient: nil client")
		}
		o.hc = hc
		return nil
	}
}

// WithAuthToken sends "Authorization: Bearer <token>" with every request.
// An empty token sends no Authorization header.
func WithAuthToken(token string) Option {
	return func(o *options) error {
		o.token = token
		return nil
	}
}

// New returns a client of the server at serverURL, an http or https URL
// with an optional path prefix where the router is mounted; trailing
// slashes are removed.
func New(serverURL string, opts ...Option) (*Client, error) {
	base, err := parseBase(serverURL)
	if err != nil {
		return nil, err
	}
	o := options{timeout: DefaultTimeout}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	var hc http.Client
	if o.hc != nil {
		hc = *o.hc
	} else {
		// Our own transport, so that Close closes our idle connections
		// and nobody else's.
		hc.Transport = http.DefaultTransport.(*http.Transport).Clone()
	}
	if o.transport != nil {
		hc.Transport = o.transport
	}
	return &Client{base: base, hc: &hc, timeout: o.timeout, token: o.token}, nil
}

func parseBase(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("client: server URL %q: %w", s, err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return "", fmt.Errorf("client: server URL %q: the scheme must be http or https", s)
	case u.Host == "":
		return "", fmt.Errorf("client: server URL %q: no host", s)
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return "", fmt.Errorf("client: server URL %q: a query or fragment is not allowed", s)
	case u.User != nil:
		return "", fmt.Errorf("client: server URL %q: credentials in the URL are not supported; use WithAuthToken", s)
	}
	return strings.TrimRight(u.String(), "/"), nil
}

// Agents lists the server's agent names, sorted.
func (c *Client) Agents(ctx context.Context) ([]string, error) {
	var names []string
	if err := c.call(ctx, http.MethodGet, "/agents", "", nil, &names); err != nil {
		return nil, err
	}
	return names, nil
}

// AgentSchema returns the JSON Schemas of an agent's input and output.
func (c *Client) AgentSchema(ctx context.Context, name string) (svc.AgentSchema, error) {
	var s svc.AgentSchema
	err := c.call(ctx, http.MethodGet, "/agents/"+url.PathEscape(name)+"/schema", "", nil, &s)
	return s, err
}

// runRequest is the body of POST /agents/{name}/run the client sends.
type runRequest struct {
	Task      svc.TaskSpec `json:"task"`
	RequestID string       `json:"request_id"`
}

// Run runs task on the agent and waits for its result. The request id is
// task.RequestID, else svc.RequestIDFrom(ctx), else a new UUIDv7; it goes
// in the body and in the X-Request-Id header, and becomes the run's trace
// id unless the task carries its own.
func (c *Client) Run(ctx context.Context, agent string, task svc.TaskSpec) (svc.AgentResult, error) {
	id := runRequestID(ctx, task)
	var res svc.AgentResult
	err := c.call(ctx, http.MethodPost, "/agents/"+url.PathEscape(agent)+"/run", id, runRequest{Task: task, RequestID: id}, &res)
	return res, err
}

// runRequestID is the request id of a run: task.RequestID, else
// svc.RequestIDFrom(ctx), else a new UUIDv7.
func runRequestID(ctx context.Context, task svc.TaskSpec) string {
	if task.RequestID != "" {
		return task.RequestID
	}
	if id := svc.RequestIDFrom(ctx); id != "" {
		return id
	}
	return newRequestID()
}

// Gather runs tasks on the agent, at most maxConcurrency at once
// (1..svc.MaxGatherConcurrency; 0 is a SpecValidationError, as from the
// runtime: pass svc.DefaultGatherConcurrency for the default), and returns
// the results in task order. A request id in ctx becomes the batch's id.
func (c *Client) Gather(ctx context.Context, agent string, tasks []svc.TaskSpec, maxConcurrency int) ([]svc.AgentResult, error) {
	if _, err := svc.CheckGatherConcurrency(maxConcurrency); err != nil {
		return nil, err // 0 would be left out of the body and mean the default
	}
	var results []svc.AgentResult
	body := svc.GatherRequest{Tasks: tasks, MaxConcurrency: maxConcurrency}
	if err := c.call(ctx, http.MethodPost, "/agents/"+url.PathEscape(agent)+"/gather", svc.RequestIDFrom(ctx), body, &results); err != nil {
		return nil, err
	}
	if len(results) != len(tasks) {
		return nil, svc.Errorf(svc.KindRuntime, "client: gather on %q: the server returned %d results for %d tasks", agent, len(results), len(tasks))
	}
	return results, nil
}

// Ready reports whether the server can take traffic (GET /readyz).
func (c *Client) Ready(ctx context.Context) error {
	return c.call(ctx, http.MethodGet, "/readyz", "", nil, nil)
}

// Close closes the client's idle connections. It does not stop anything on
// the server, and the client remains usable.
func (c *Client) Close() error {
	c.hc.CloseIdleConnections()
	return nil
}

// maxErrorBody bounds how much of an error response is read: a problem is
// small, and an HTML error page from a proxy is only quoted.
const maxErrorBody = 64 << 10

// call sends one request and decodes a 2xx JSON answer into out (unless out
// is nil); any other answer becomes an error.
func (c *Client) call(ctx context.Context, method, path, requestID string, in, out any) error {
	return c.callWith(ctx, method, path, requestID, nil, in, out)
}

// callWith is call with extra request headers.
func (c *Client) callWith(ctx context.Context, method, path, requestID string, header http.Header, in, out any) error {
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return svc.Wrap(svc.KindSpecValidation, err, "client: encoding the request")
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return svc.Wrap(svc.KindSpecValidation, err, "client: building the request")
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	req.Header.Set("Accept", "application/json, application/problem+json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if requestID != "" {
		req.Header.Set(requestIDHeader, requestID)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return transportError(err)
	}
	defer func() {
		// Drain a little so the connection can be reused.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		resp.Body.Close()
	}()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		data, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		if err != nil {
			return transportError(err)
		}
		return errorFromResponse(resp.StatusCode, resp.Header.Get("Content-Type"), data)
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		if ctx.Err() != nil {
			return transportError(err)
		}
		return svc.Wrap(svc.KindRuntime, err, fmt.Sprintf("client: decoding the response of %s %s", method, path))
	}
	return nil
}

// transportError gives a failed exchange its kind: a deadline (the client's
// timeout or the caller's) is a TimeoutError, a cancellation a
// CancelledError, anything else the base kind. The cause stays in the
// chain, so errors.Is(err, context.DeadlineExceeded) holds too.
func transportError(err error) error {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
		return svc.Wrap(svc.KindTimeout, err, "svc client")
	case errors.Is(err, context.Canceled):
		return svc.Wrap(svc.KindCancelled, err, "svc client")
	}
	return svc.Wrap(svc.KindRuntime, err, "svc client")
}

func newRequestID() string {
	id, err := uuid.NewV7()
	if err != nil {
		return uuid.NewString()
	}
	return id.String()
}

// Package server serves an svc.Backend over HTTP: a chi router to mount in a
// host application (embedded mode), the one table from error kinds to HTTP
// statuses with the problem+json writer, and the middleware of the
// standalone server that `svc serve` runs.
//
// # Embedded mode
//
// NewRouter returns a chi.Router with the agent and group routes, relative
// to wherever the host mounts it:
//
//	rt, err := server.NewRouter(runtime, server.WithLogger(log))
//	...
//	mux := chi.NewRouter()
//	mux.Use(hostAuth)             // auth, rate limits: the host's concern
//	mux.Mount("/svc", rt)
//	srv := &http.Server{Addr: ":8080", Handler: mux}
//	go srv.ListenAndServe()
//	<-stop
//	srv.Shutdown(ctx)     // stop accepting, let in-flight runs answer
//	runtime.Shutdown(ctx) // then release tool subprocesses and brokers
//
// The router adds no authentication and no request-id middleware: a request
// id set by the host (X-Request-Id) is honoured and promoted to the run's
// trace id. The runtime is the host's to shut down. Registering its
// Shutdown with srv.RegisterOnShutdown also works, but runs it as soon as
// the server stops listening, so in-flight runs are cancelled rather than
// drained.
//
// # Errors
//
// Every error response is application/problem+json (RFC 9457), written by
// WriteError, with the status of StatusOf. Host handlers mounted beside the
// router answer the same way in one of two ways. The idiomatic one is to
// return the error: wrap a HandlerFunc with Handle. For code that cannot
// return an error, ErrorMiddleware turns a panic whose value is an error into
// the same answer; it leaves other panics alone, so a nil dereference is not
// mistaken for a domain error. A host that uses neither can call WriteError
// itself.
//
// # Event stream
//
// With WithSSEEmitter the router also serves GET /events/stream, the live
// stream of every runtime event, from an SSE emitter (emitters/sse) that is
// in the runtime's emitter chain. A backend that streams its own events
// (an svc.EventSubscriber, such as the HTTP client of a remote svc server)
// is served at /events/stream without the option, and giving both is an
// error: the spec's sse_emitter and server options are mutually exclusive.
package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/http/openapi"
)

// DefaultMaxBodyBytes bounds a request body unless WithMaxBodyBytes says
// otherwise.
const DefaultMaxBodyBytes int64 = 1 << 20

// RequestIDHeader carries the request id, both ways.
const RequestIDHeader = "X-Request-Id"

// Option configures NewRouter.
type Option func(*config) error

type config struct {
	maxBody   int64
	log       *zap.Logger
	heartbeat time.Duration
	sse       svc.EventSubscriber // WithSSEEmitter
	// writeTimeout bounds each write of an event stream
	// (WithStreamWriteTimeout).
	writeTimeout time.Duration
	ready        []readyCheck // WithReadyCheck
	// mp receives MetricRunStreamSlowDisconnects (WithMeterProvider).
	mp metric.MeterProvider
	// dashboard serves /dashboard/ (WithDashboard).
	dashboard http.Handler
	// batches serves /batches (WithBatches).
	batches svc.BatchBackend
}

// readyCheck is one dependency /readyz asks about.
type readyCheck struct {
	name  string
	check func(context.Context) error
}

// WithReadyCheck makes GET /readyz ask check too, after the backend's
// Ready: while check fails, /readyz answers 503 with a problem naming what
// is not ready: its reason is name, its detail "not ready: <name>", followed
// by the message of a *svc.Error check returns (other errors are logged,
// not shown: /readyz needs no token).
// A process with a broker gives one for it. check is called on every probe:
// make it cheap (cache a round trip).
func WithReadyCheck(name string, check func(context.Context) error) Option {
	return func(c *config) error {
		if name == "" || check == nil {
			return errors.New("server: WithReadyCheck: a name and a check are required")
		}
		c.ready = append(c.ready, readyCheck{name: name, check: check})
		return nil
	}
}

// WithMaxBodyBytes bounds request bodies to n bytes (default 1 MiB); a
// longer body is answered 413 with a PayloadTooLargeError. n must be
// positive.
func WithMaxBodyBytes(n int64) Option {
	return func(c *config) error {
		if n <= 0 {
			return errors.New("server: WithMaxBodyBytes: the limit must be positive")
		}
		c.maxBody = n
		return nil
	}
}

// WithLogger sets the logger for internal errors (default zap.L()).
func WithLogger(l *zap.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return errors.New("server: WithLogger: nil logger")
		}
		c.log = l
		return nil
	}
}

// WithMeterProvider records the router's own metrics on mp:
// MetricRunStreamSlowDisconnects. (The HTTP request metrics are Metrics'.)
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) error {
		if mp == nil {
			return errors.New("server: WithMeterProvider: nil meter provider")
		}
		c.mp = mp
		return nil
	}
}

// DashboardPath is where WithDashboard mounts the dashboard, relative to
// the router.
const DashboardPath = "/dashboard/"

// WithDashboard serves h, the web page of package dashboard
// (dashboard.Handler()), at /dashboard/ relative to the router: h sees the
// path below it ("/", "/app.js"), and GET /dashboard redirects to
// /dashboard/ relatively, so the page works wherever the router is mounted.
// The page uses only the router's own routes. The standalone server lets
// the page's files through without a token (they hold no data; the page
// asks for the token and sends it on its API calls).
func WithDashboard(h http.Handler) Option {
	return func(c *config) error {
		if h == nil {
			return errors.New("server: WithDashboard: nil handler")
		}
		c.dashboard = h
		return nil
	}
}

// mountDashboard serves h below DashboardPath.
func mountDashboard(r chi.Router, h http.Handler) {
	r.Method(http.MethodGet, strings.TrimSuffix(DashboardPath, "/"), http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		// Relative, so that a router mounted under a prefix keeps it.
		w.Header().Set("Location", "dashboard/")
		w.WriteHeader(http.StatusMovedPermanently)
	}))
	r.Handle(DashboardPath+"*", http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		rest := "/" + chi.URLParam(req, "*")
		r2 := req.Clone(req.Context())
		r2.URL.Path, r2.URL.RawPath = rest, ""
		h.ServeHTTP(w, r2)
	}))
}

// NewRouter returns the router serving b. Routes, relative to the mount
// point:
//
//	GET  /agents                 JSON list of agent names
//	GET  /agents/{name}/schema   svc.AgentSchema
//	POST /agents/{name}/run      svc.TaskSpec, or {"task": TaskSpec, "request_id": "..."} → svc.AgentResult
//	POST /agents/{name}/gather   svc.GatherRequest → []svc.AgentResult in task order; streamed: see below
//	GET  /groups                 JSON list of group names
//	GET  /groups/{name}/topology svc.Topology
//	POST /groups/{name}/run      svc.TaskSpec, or {"task": TaskSpec, "request_id": "..."} → svc.RunResult
//	GET  /healthz, /health       200 {"status":"ok"} while the process is alive (HEAD too)
//	GET  /readyz                 200 {"status":"ready"}, or 503 when b.Ready or a WithReadyCheck fails (HEAD too)
//	GET  /dashboard/             the web page, with WithDashboard
//
// When b is a svc.BatchBackend, or WithBatches gives one, the batches are
// served too (batches.go): POST /batches, GET /batches, GET
// /batches/{id}, GET /batches/{id}/results, POST /batches/{id}/cancel.
//
// When b also implements svc.RunBackend, the asynchronous runs are served
// too (without it, these routes answer 404):
//
//	POST /submit                 svc.SubmitRequest (plus an optional "request_id") → 202 {"run_id": "..."}, Location: .../runs/{id}/status
//	GET  /runs/{id}/status       svc.RunStatus
//	GET  /runs/{id}/result       the stored AgentResult or GroupResult, verbatim; 409 until it is done, and for a cancelled run
//	POST /runs/{id}/cancel       204; 404 for an unknown run
//	POST /runs/{id}/resume       svc.Decision {request_id, approve|answer, reason?} → 202 svc.RunStatus; 409 when not waiting
//	GET  /runs/{id}/stream       text/event-stream of svc.RunEvent frames (id: seq, event: type, data: JSON),
//	                             after the Last-Event-ID header or the after query parameter; ": ping" while idle
//
// A gather is streamed when Accept asks for application/x-ndjson (or
// text/event-stream): each result as it finishes, {"index": i, "result":
// AgentResult} a line, then {"summary": svc.GatherSummary}; and when the
// body is application/x-ndjson, one TaskSpec a line, read as the batch
// goes, with max_concurrency in the query. Such a body has no size limit
// (each line has the body limit), and a bad line fails its task only.
//
// A group run answers with the plain AgentResult when one terminal node
// fired and with a GroupResult ({"group": true, ...}) when several did.
//
// A request body must be application/json (an UnsupportedMediaTypeError,
// 415, otherwise; an empty body needs no Content-Type), UTF-8 without
// unpaired surrogate escapes, without a key repeated in one object and
// without numbers beyond float64; a request_id in it follows the rule of
// ValidRequestID ("" included). Origins are the host's concern here: see
// CheckOrigin; so is the whole path, which CheckPath checks for tricks. A
// path parameter (a name or an id) that is empty, "." or "..", or holds a
// slash or a backslash, is refused with a 400 (pathParam). A route that
// takes query parameters refuses an unknown or repeated one (queryOf).
//
// The trace id of a run (agent, group or submitted) is the task's request_id, else the
// envelope's request_id, else the X-Request-Id header, else a new UUIDv7; it
// is echoed in the X-Request-Id response header. A gather's batch id is the
// X-Request-Id header or a new UUIDv7, handed to the backend with
// svc.WithRequestID; tasks without a request_id take it from there.
func NewRouter(b svc.Backend, opts ...Option) (chi.Router, error) {
	if b == nil {
		return nil, errors.New("server: NewRouter: nil backend")
	}
	cfg := config{maxBody: DefaultMaxBodyBytes, log: zap.L(), heartbeat: DefaultHeartbeat, writeTimeout: DefaultStreamWriteTimeout}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	h := &handlers{b: b, maxBody: cfg.maxBody, ready: cfg.ready, writeTimeout: cfg.writeTimeout, heartbeat: cfg.heartbeat}
	r := chi.NewRouter()
	r.Use(func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if l, ok := req.Context().Value(loggerKey{}).(*zap.Logger); ok && l == cfg.log {
				// The standalone server's AccessLog put this logger there:
				// a second copy of the request would change nothing.
				next.ServeHTTP(w, req)
				return
			}
			next.ServeHTTP(w, req.WithContext(withLogger(req.Context(), cfg.log)))
		})
	})
	r.NotFound(func(w http.ResponseWriter, req *http.Request) {
		writeProblem(w, req, http.StatusNotFound, Problem{Error: string(svc.KindNotFound), Detail: "no route for " + req.Method + " " + req.URL.Path})
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, req *http.Request) {
		// chi drops its Allow header once the handler is replaced; rebuild it.
		path := req.URL.Path
		if rctx := chi.RouteContext(req.Context()); rctx != nil && rctx.RoutePath != "" {
			path = rctx.RoutePath
		}
		for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost} {
			if r.Match(chi.NewRouteContext(), m, path) {
				w.Header().Add("Allow", m)
			}
		}
		allow := w.Header().Values("Allow")
		detail := "method " + req.Method + " is not allowed on " + req.URL.Path
		if len(allow) > 0 {
			detail += " (allowed: " + strings.Join(allow, ", ") + ")"
		}
		writeProblem(w, req, http.StatusMethodNotAllowed, Problem{Error: string(svc.KindMethodNotAllowed), Detail: detail})
	})
	r.Method(http.MethodGet, "/agents", Handle(h.agents))
	r.Method(http.MethodGet, "/agents/{name}/schema", Handle(h.schema))
	r.Method(http.MethodPost, "/agents/{name}/run", Handle(h.run))
	r.Method(http.MethodPost, "/agents/{name}/gather", Handle(h.gather))
	r.Method(http.MethodGet, "/groups", Handle(h.groups))
	r.Method(http.MethodGet, "/groups/{name}/topology", Handle(h.topology))
	r.Method(http.MethodPost, "/groups/{name}/run", Handle(h.runGroup))
	// Probes (load balancers, orchestrators) may ask with HEAD: the same
	// answer, whose body net/http leaves out.
	for _, m := range []string{http.MethodGet, http.MethodHead} {
		r.Method(m, "/healthz", Handle(h.healthz))
		r.Method(m, "/health", Handle(h.healthz))
		r.Method(m, "/readyz", Handle(h.readyz))
	}
	r.Method(http.MethodGet, "/openapi.json", Handle(serveOpenAPI))
	if rb, ok := b.(svc.RunBackend); ok {
		rh := &runHandlers{rb: rb, maxBody: cfg.maxBody, heartbeat: cfg.heartbeat, writeTimeout: cfg.writeTimeout}
		if cfg.mp != nil {
			c, err := cfg.mp.Meter(meterName).Int64Counter(MetricRunStreamSlowDisconnects, metric.WithUnit("{stream}"),
				metric.WithDescription("Run event streams (GET /runs/{id}/stream) disconnected because the client did not keep up."))
			if err != nil {
				return nil, fmt.Errorf("server: %s counter: %w", MetricRunStreamSlowDisconnects, err)
			}
			rh.slowCounter = c
		}
		mountRuns(r, rh)
	}
	if bb, ok := b.(svc.BatchBackend); ok && cfg.batches == nil {
		cfg.batches = bb
	}
	if cfg.batches != nil {
		r.Group(func(r chi.Router) {
			r.Use(adminBatches)
			mountBatches(r, &batchHandlers{bb: cfg.batches, maxBody: cfg.maxBody, writeTimeout: cfg.writeTimeout, heartbeat: cfg.heartbeat})
		})
	}
	if own, ok := b.(svc.EventSubscriber); ok {
		if cfg.sse != nil {
			return nil, fmt.Errorf("server: WithSSEEmitter: the backend (%T) streams its own events; give the option or such a backend, not both", b)
		}
		cfg.sse = own
	}
	if cfg.sse != nil {
		mountEventStream(r, cfg.sse, cfg.writeTimeout)
	}
	if cfg.dashboard != nil {
		mountDashboard(r, cfg.dashboard)
	}
	return r, nil
}

type handlers struct {
	b       svc.Backend
	maxBody int64
	ready   []readyCheck
	// writeTimeout bounds each write of a streamed gather's answer.
	writeTimeout time.Duration
	// heartbeat is how long a streamed gather's answer stays silent
	// before a keep-alive (WithHeartbeat).
	heartbeat time.Duration
}

func (h *handlers) agents(w http.ResponseWriter, r *http.Request) error {
	names, err := h.b.Agents(r.Context())
	if err != nil {
		return err
	}
	if names == nil {
		names = []string{}
	}
	return writeJSON(w, http.StatusOK, names)
}

func (h *handlers) schema(w http.ResponseWriter, r *http.Request) error {
	name, err := agentName(r)
	if err != nil {
		return err
	}
	s, err := h.b.AgentSchema(r.Context(), name)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, s)
}

func (h *handlers) run(w http.ResponseWriter, r *http.Request) error {
	name, err := agentName(r)
	if err != nil {
		return err
	}
	task, err := h.readTask(w, r)
	if err != nil {
		return err
	}
	if wantsEventStream(r) {
		return h.runStreamed(w, r, func(ctx context.Context) (any, error) { return h.b.Run(ctx, name, task) })
	}
	res, err := h.b.Run(r.Context(), name, task)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, res)
}

// readTask reads the body of a run (agent or group), gives the task its
// trace id by the precedence NewRouter documents, and echoes that id in the
// response header.
func (h *handlers) readTask(w http.ResponseWriter, r *http.Request) (svc.TaskSpec, error) {
	data, release, err := readBodyPooled(w, r, h.maxBody)
	if err != nil {
		return svc.TaskSpec{}, err
	}
	task, envelopeID, ok := decodeRunBodyFast(data)
	if !ok {
		task, envelopeID, err = decodeRunBody(data)
	}
	release()
	if err != nil {
		return svc.TaskSpec{}, err
	}
	switch {
	case task.RequestID != "":
	case envelopeID != "":
		task.RequestID = envelopeID
	default:
		task.RequestID = headerRequestID(r)
	}
	w.Header().Set(RequestIDHeader, task.RequestID)
	return task, nil
}

func (h *handlers) gather(w http.ResponseWriter, r *http.Request) error {
	name, err := agentName(r)
	if err != nil {
		return err
	}
	q, err := queryOf(r, "max_concurrency")
	if err != nil {
		return err
	}
	if q.Has("max_concurrency") && !ndjsonBody(r) {
		// It would be ignored: a JSON body gives its own.
		return svc.Errorf(svc.KindSpecValidation, `query parameter "max_concurrency" is for an application/x-ndjson body; an application/json body gives "max_concurrency" in the body`)
	}
	if accept := streamAccept(r); accept != "" || ndjsonBody(r) {
		return h.gatherStreamed(w, r, q, name, accept)
	}
	data, err := readBody(w, r, h.maxBody)
	if err != nil {
		return err
	}
	body, err := decodeGather(data)
	if err != nil {
		return err
	}
	data = nil // the body's tasks keep their own copy
	id := headerRequestID(r)
	w.Header().Set(RequestIDHeader, id)
	gs, ok := h.b.(svc.GatherStreamer)
	if !ok {
		gs = listStreamer{h.b}
	}
	return gatherList(svc.WithRequestID(r.Context(), id), w, gs, name, body.tasks(), body.n, body.maxConcurrency)
}

// gatherList serves a JSON gather of n tasks (feed) through the streamed
// gather, so that neither the tasks nor the results of a big batch are
// held all at once: each task is decoded as the runtime takes it, each result is encoded as
// soon as those before it are, and the runtime's state is its window's
// (issue 25: the 87,000-task gather's peak). The answer is the list in
// task order: up to resultsBuffered of it is held back, so that
// an error before then is still a problem answer, and a small answer
// still has its Content-Length; past that it goes out as it grows, and an
// error after its status was sent (the server shutting down, the client
// gone) cuts the connection, never leaving a short answer that parses. The
// bytes are json.Encoder's for the whole list.
func gatherList(ctx context.Context, w http.ResponseWriter, gs svc.GatherStreamer, name string, feed iter.Seq[svc.TaskSpec], n, conc int) error {
	buf := jsonBufs.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= maxPooledBody {
			jsonBufs.Put(buf)
		}
	}()
	buf.Reset()
	buf.WriteByte('[')
	var (
		waiting = map[int]svc.AgentResult{} // finished before one ahead of them
		next    int                         // the index of the result to write next
		sent    bool                        // the status and part of the answer are out
	)
	// add encodes res, the result at next, into the answer.
	add := func(res *svc.AgentResult) error {
		if next > 0 {
			buf.WriteByte(',')
		}
		next++
		return appendResult(buf, res)
	}
	for item, err := range gs.GatherStream(ctx, name, feed, conc) {
		if err == nil && item.Index == next {
			err = add(&item.Result)
		} else if err == nil {
			waiting[item.Index] = item.Result
		}
		for res, ok := waiting[next]; ok && err == nil; res, ok = waiting[next] {
			delete(waiting, next)
			err = add(&res)
		}
		if err != nil {
			if sent {
				panic(http.ErrAbortHandler)
			}
			return err
		}
		if !sent && buf.Len() >= resultsBuffered {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			sent = true
		}
		if sent && buf.Len() >= 32<<10 {
			if _, err := w.Write(buf.Bytes()); err != nil {
				return nil // the client has gone
			}
			buf.Reset()
		}
	}
	if next != n || len(waiting) > 0 {
		if sent {
			panic(http.ErrAbortHandler)
		}
		return fmt.Errorf("server: gather of %d tasks ended after %d results", n, next)
	}
	buf.WriteString("]\n")
	if !sent {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
		w.WriteHeader(http.StatusOK)
	}
	_, _ = w.Write(buf.Bytes())
	return nil
}

// resultsBuffered is the largest gather answer gatherList sends whole,
// with a Content-Length: a larger one goes out as it is encoded (the 26 MB
// answer of 87,000 tasks took some 50 MB at its peak, twice, as one buffer
// grew; issue 25).
const resultsBuffered = 1 << 20

// appendResult appends res to buf as json.Encoder encodes it inside an
// array.
func appendResult(buf *bytes.Buffer, res *svc.AgentResult) error {
	if b, ok := appendAgentResult(buf.AvailableBuffer(), res); ok {
		buf.Write(b)
		return nil
	}
	b, err := json.Marshal(res)
	if err != nil {
		// Not a domain error: the text names Go types, so it is logged, not sent.
		return fmt.Errorf("server: encoding the response: %w", err)
	}
	buf.Write(b)
	return nil
}

func (h *handlers) groups(w http.ResponseWriter, r *http.Request) error {
	names, err := h.b.Groups(r.Context())
	if err != nil {
		return err
	}
	if names == nil {
		names = []string{}
	}
	return writeJSON(w, http.StatusOK, names)
}

func (h *handlers) topology(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r, "group")
	if err != nil {
		return err
	}
	t, err := h.b.GroupTopology(r.Context(), name)
	if err != nil {
		return err
	}
	// Lists are always arrays on the wire, never null, whatever the
	// backend left empty.
	t.Nodes = nonNil(t.Nodes)
	t.Edges = nonNil(t.Edges)
	t.Entry = nonNil(t.Entry)
	t.Terminal = nonNil(t.Terminal)
	return writeJSON(w, http.StatusOK, t)
}

func (h *handlers) runGroup(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r, "group")
	if err != nil {
		return err
	}
	task, err := h.readTask(w, r)
	if err != nil {
		return err
	}
	if wantsEventStream(r) {
		return h.runStreamed(w, r, func(ctx context.Context) (any, error) {
			res, err := h.b.RunGroup(ctx, name, task)
			if err == nil && (res.Agent == nil) == (res.Group == nil) {
				err = fmt.Errorf("server: group %q: the backend returned %s", name, describeRunResult(res))
			}
			return res, err
		})
	}
	res, err := h.b.RunGroup(r.Context(), name, task)
	if err != nil {
		return err
	}
	if (res.Agent == nil) == (res.Group == nil) {
		// A backend bug, not the caller's: logged, answered with a 500.
		return fmt.Errorf("server: group %q: the backend returned %s", name, describeRunResult(res))
	}
	return writeJSON(w, http.StatusOK, res)
}

// describeRunResult names what is wrong with a RunResult that does not hold
// exactly one envelope.
func describeRunResult(res svc.RunResult) string {
	if res.Agent == nil {
		return "neither an agent nor a group result"
	}
	return "both an agent and a group result"
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// OpenAPIDocument returns the OpenAPI document of the API (package
// http/openapi), built once with this package's error-status table. It is
// the same for every server: it lists the routes a server may lack
// (/metrics, the submitted-run routes without a RunBackend) too.
var OpenAPIDocument = sync.OnceValues(func() ([]byte, error) { return openapi.Build(statusOfKind) })

// serveOpenAPI answers GET /openapi.json.
func serveOpenAPI(w http.ResponseWriter, r *http.Request) error {
	doc, err := OpenAPIDocument()
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	_, err = w.Write(doc)
	return err
}

func (h *handlers) healthz(w http.ResponseWriter, _ *http.Request) error {
	return writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (h *handlers) readyz(w http.ResponseWriter, r *http.Request) error {
	if err := h.b.Ready(r.Context()); err != nil {
		kind, public := classify(err)
		p := Problem{Error: string(kind), Detail: "not ready"}
		if public {
			p.Detail = "not ready: " + err.Error()
		} else {
			loggerFrom(r.Context()).Warn("not ready", zap.Error(err))
		}
		writeProblem(w, r, http.StatusServiceUnavailable, p)
		return nil
	}
	for _, c := range h.ready {
		if err := c.check(r.Context()); err != nil {
			// /readyz answers without a token: only a domain error's
			// message is shown (the check's to word); the cause, which
			// may name hosts, goes to the log.
			p := Problem{Error: string(svc.KindRuntime), Reason: c.name, Detail: "not ready: " + c.name}
			var e *svc.Error
			if errors.As(err, &e) && e.Message != "" {
				p.Error, p.Detail = string(e.Kind), p.Detail+": "+e.Message
			}
			loggerFrom(r.Context()).Warn("not ready", zap.String("check", c.name), zap.Error(err))
			writeProblem(w, r, http.StatusServiceUnavailable, p)
			return nil
		}
	}
	return writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// agentName returns the {name} path parameter of an agent route.
func agentName(r *http.Request) (string, error) { return pathName(r, "agent") }

// pathName returns the {name} path parameter (pathParam); what ("agent",
// "group") names it in the error.
func pathName(r *http.Request, what string) (string, error) {
	return pathParam(r, "name", what+" name")
}

// headerRequestID returns the request's X-Request-Id when it is a usable
// id, else a new UUIDv7.
func headerRequestID(r *http.Request) string {
	if id := r.Header.Get(RequestIDHeader); ValidRequestID(id) {
		return id
	}
	return NewRequestID()
}

// NewRequestID returns a new UUIDv7 string.
func NewRequestID() string {
	id, err := uuid.NewV7()
	if err != nil {
		// Only a failing system random source gets here; NewString
		// panics on the same failure, which is the right end then.
		return uuid.NewString()
	}
	return id.String()
}

// MaxRequestIDLen bounds an accepted X-Request-Id.
const MaxRequestIDLen = 128

// ValidRequestID reports whether id may be used as a request id: 1 to 128
// printable ASCII characters without spaces, so it is safe in logs and
// headers.
func ValidRequestID(id string) bool {
	if id == "" || len(id) > MaxRequestIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] > '~' {
			return false
		}
	}
	return true
}

// writeJSON writes v as JSON with status. It encodes first, so an encoding
// error is still answered with a problem; once the header is out, a failed
// write means the client has gone, and nothing can be done about it. The
// bytes are json.Marshal's and a newline, encoded into a pooled buffer.
func writeJSON(w http.ResponseWriter, status int, v any) error {
	buf := jsonBufs.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= maxPooledBody {
			jsonBufs.Put(buf)
		}
	}()
	buf.Reset()
	encoded := false
	if res, ok := v.(svc.AgentResult); ok {
		// A run's answer: appended without reflection (resultjson.go).
		var b []byte
		if b, encoded = appendAgentResult(buf.AvailableBuffer(), &res); encoded {
			buf.Write(append(b, '\n'))
		}
	}
	if !encoded {
		if err := json.NewEncoder(buf).Encode(v); err != nil {
			// Not a domain error: the text names Go types, so it is logged, not sent.
			return fmt.Errorf("server: encoding the response: %w", err)
		}
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
	return nil
}

// jsonBufs holds the buffers writeJSON encodes into.
var jsonBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

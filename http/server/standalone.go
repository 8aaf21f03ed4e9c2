package server

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5/middleware"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	svc "github.com/svc-dev/svc"
)

// StandaloneConfig configures NewStandalone.
type StandaloneConfig struct {
	// AuthToken, when not empty, is the bearer token every request but the
	// health checks must carry (BearerAuth).
	AuthToken string
	// Keys, when set, checks the API key of every request but the health
	// checks and the dashboard's files, and the scope each route needs
	// (KeyAuth); give AuthToken to it, not here. When it is a KeyAuditor,
	// GET /runtime/stats shows admin keys the use of each key.
	Keys Authenticator
	// Logger receives the access log and internal errors; zap.L() when nil.
	Logger *zap.Logger
	// RouterOptions are passed to NewRouter; a WithLogger among them wins
	// over Logger for the router's own logging.
	RouterOptions []Option
	// Events, when set, serves the rollup routes (GET /events, /usage,
	// /tools?group_by=, /runtime/stats, /runs/{trace_id}/tree) from an event
	// store. GET /tools (the registered tools) and GET /runs (the run list)
	// are served whenever the backend implements svc.ToolCatalog and
	// svc.RunLister.
	Events svc.EventReader
	// Fleet, when set, is the live list of the fleet's workers (a
	// publisher's dispatch.Publisher): GET /runtime/stats lists them, ahead
	// of the workers the event store remembers, and is served even without
	// an event store.
	Fleet svc.FleetReader
	// MeterProvider, when set, receives the HTTP server metrics (see
	// Metrics).
	MeterProvider metric.MeterProvider
	// Metrics, when set, is served at GET /metrics (a Prometheus scrape
	// handler), behind the bearer token like every other route.
	Metrics http.Handler
	// AllowedOrigins are the browser origins ("https://app.example",
	// scheme://host[:port]) besides the server's own whose requests are
	// served, with CORS headers and preflight answers; a request with any
	// other Origin is a 403. Requests without an Origin (curl, the Go
	// client) are not affected.
	AllowedOrigins []string
	// MCP, when set, is served at /mcp (every method), behind the bearer
	// token like every other route: an MCP streamable HTTP handler
	// (package http/mcpserver) serving the backend's agents and groups as
	// tools.
	MCP http.Handler
	// CheckHost, when set, refuses requests whose Host header is not
	// ListenHost, localhost, a loopback address or one of AllowedHosts
	// (see CheckHost): svc serve sets it when it listens on loopback
	// without a token, and whenever AllowedHosts is given.
	CheckHost bool
	// ListenHost is the host the server listens on (svc serve --host).
	ListenHost string
	// AllowedHosts are the names besides ListenHost, localhost and the
	// loopback addresses that CheckHost lets through.
	AllowedHosts []string
	// ReadTimeout, when positive, is how long a request's body may take
	// to arrive (BodyDeadline).
	ReadTimeout time.Duration
	// Reserved, when set, tells the requests that came on a connection
	// accepted past the server's bound of open connections (conns.Reserved):
	// they may reach the health checks only; any other route is answered
	// 503 OverloadedError. Each is answered with Connection: close, so
	// that the reserve is freed at once.
	Reserved func(*http.Request) bool
}

// MCPPath is where StandaloneConfig.MCP is served.
const MCPPath = "/mcp"

// NewStandalone returns the handler of the standalone server: the router
// for b, with the observation routes of mountObservation, behind RequestID,
// AccessLog, Recoverer, the reserve's gate (cfg.Reserved), CheckHost (when
// cfg.CheckHost), CheckOrigin (with cfg.AllowedOrigins), CheckPath,
// BodyDeadline (cfg.ReadTimeout) and KeyAuth (when cfg.Keys is set) or
// BearerAuth (when cfg.AuthToken is), in that order from the outside in.
func NewStandalone(b svc.Backend, cfg StandaloneConfig) (http.Handler, error) {
	log := cfg.Logger
	if log == nil {
		log = zap.L()
	}
	opts := append([]Option{WithLogger(log)}, cfg.RouterOptions...)
	rt, err := NewRouter(b, opts...)
	if err != nil {
		return nil, err
	}
	if cfg.Keys != nil && cfg.AuthToken != "" {
		return nil, errors.New("server: NewStandalone: give the auth token to the Keys authenticator, not both")
	}
	obs := mountObservation(rt, b, cfg.Events, cfg.Fleet)
	if ka, ok := cfg.Keys.(KeyAuditor); ok {
		obs.keys = ka
	}
	if cfg.Metrics != nil {
		rt.Method(http.MethodGet, "/metrics", cfg.Metrics)
	}
	if cfg.MCP != nil {
		rt.Handle(MCPPath, cfg.MCP)
	}
	var h http.Handler = rt
	switch {
	case cfg.Keys != nil:
		h = KeyAuth(cfg.Keys, rt)(h)
	case cfg.AuthToken != "":
		h = BearerAuth(cfg.AuthToken)(h)
	}
	if cfg.ReadTimeout > 0 {
		h = BodyDeadline(cfg.ReadTimeout)(h)
	}
	// Outside the token check, whose open paths are decided on the path
	// as routed: a path that reads otherwise once decoded never gets in.
	h = CheckPath(h)
	origins, err := CheckOrigin(cfg.AllowedOrigins)
	if err != nil {
		return nil, err
	}
	h = origins(h)
	if cfg.CheckHost {
		hosts, err := CheckHost(cfg.ListenHost, cfg.AllowedHosts)
		if err != nil {
			return nil, err
		}
		h = hosts(h)
	}
	if cfg.Reserved != nil {
		h = reserveOnly(cfg.Reserved, h)
	}
	h = Recoverer(h)
	if cfg.MeterProvider != nil {
		mw, err := Metrics(cfg.MeterProvider)
		if err != nil {
			return nil, err
		}
		h = mw(h)
	}
	h = AccessLog(log)(h)
	return RequestID(h), nil
}

// reserveOnly lets the requests for which reserved is true reach the
// health checks only, and closes their connections after the answer.
func reserveOnly(reserved func(*http.Request) bool, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !reserved(r) {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Connection", "close")
		if openPaths[r.URL.Path] {
			next.ServeHTTP(w, r)
			return
		}
		writeProblem(w, r, http.StatusServiceUnavailable, Problem{Error: string(svc.KindOverloaded),
			Detail: "the server is at its bound of open connections (svc serve --max-connections); retry"})
	})
}

// ProblemBody is the problem+json document of an answer with status and
// detail that no handler wrote (conns.Config.Problem: net/http's own 4xx
// answers), with the error kind of that status.
func ProblemBody(status int, detail string) []byte {
	kind := svc.KindBadRequest
	if status == http.StatusRequestHeaderFieldsTooLarge {
		kind = svc.KindHeaderTooLarge
	}
	p := Problem{Type: problemTypePrefix + string(kind), Title: http.StatusText(status), Status: status,
		Error: string(kind), Detail: detail, Message: detail}
	body, _ := json.Marshal(p) // strings and an int: Marshal cannot fail
	return append(body, '\n')
}

// openPaths are answered without a token, so that load balancers and
// orchestrators can probe the server without holding the secret.
var openPaths = map[string]bool{"/healthz": true, "/health": true, "/readyz": true}

// openPath reports whether r needs no token: the health checks, and the
// dashboard's static files (WithDashboard), which hold no data. A browser
// cannot send a bearer token when it navigates to a page; the page asks
// for the token and sends it on every API call. The decision is made on
// the path the router routes on (routedPath), never on a decoded or
// cleaned copy of it, and a path with a trick (pathTrick) is never open,
// so that BearerAuth without CheckPath in front opens nothing more.
func openPath(r *http.Request) bool {
	p := routedPath(r)
	if openPaths[p] {
		return true
	}
	if p != strings.TrimSuffix(DashboardPath, "/") && !strings.HasPrefix(p, DashboardPath) {
		return false
	}
	return checkPath(r) == nil
}

// BearerAuth refuses requests without "Authorization: Bearer <token>" with
// 401, a problem body and a WWW-Authenticate challenge (RFC 6750). The
// health checks and the dashboard's files (below /dashboard/) stay open
// (see openPath). The comparison takes the same time whatever the
// presented token, so it leaks neither content nor length. An empty token
// matches nothing: misconfiguration locks the server rather than opening
// it.
func BearerAuth(token string) func(http.Handler) http.Handler {
	want := sha256.Sum256([]byte(token))
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if openPath(r) {
				next.ServeHTTP(w, r)
				return
			}
			got, ok := bearerToken(r.Header.Get("Authorization"))
			if !ok {
				w.Header().Set("WWW-Authenticate", `Bearer realm="svc"`)
				writeProblem(w, r, http.StatusUnauthorized, Problem{Error: string(svc.KindUnauthorized), Detail: "missing bearer token"})
				return
			}
			sum := sha256.Sum256([]byte(got))
			if token == "" || subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="svc", error="invalid_token"`)
				writeProblem(w, r, http.StatusUnauthorized, Problem{Error: string(svc.KindUnauthorized), Detail: "invalid bearer token"})
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// bearerToken extracts the token of an Authorization header value. The
// scheme is case-insensitive (RFC 9110 section 11.1).
func bearerToken(h string) (string, bool) {
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

// RequestID makes sure every request and response carries X-Request-Id: a
// valid incoming id (ValidRequestID) is kept, anything else is replaced by a
// new UUIDv7. The id is also put in the request's context with
// svc.WithRequestID, which a run without its own request_id takes as its
// trace id.
func RequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(RequestIDHeader)
		valid := ValidRequestID(id)
		if !valid {
			id = NewRequestID()
		}
		w.Header().Set(RequestIDHeader, id)
		r = r.WithContext(svc.WithRequestID(r.Context(), id))
		if !valid {
			// The request is a copy now; its header becomes one too, so
			// that the caller's is left as it was (what r.Clone did, at
			// the cost of a second copy of the request).
			r.Header = r.Header.Clone()
			if r.Header == nil {
				r.Header = http.Header{}
			}
			r.Header.Set(RequestIDHeader, id)
		}
		next.ServeHTTP(w, r)
	})
}

// AccessLog logs one line per request at info level: method, path, status,
// bytes, duration and request id (the response's, which for a run is its
// trace id). It also hands l to WriteError and Recoverer below it.
func AccessLog(l *zap.Logger) func(http.Handler) http.Handler {
	if l == nil {
		l = zap.L()
	}
	// The line's caller (when l adds callers) is always the same line of
	// this file: it is found once, by the first line's l.Check, rather than
	// by walking the stack for every request, which cost as much as
	// encoding the line (issue 15).
	noCaller := l.WithOptions(zap.WithCaller(false))
	var callerOf atomic.Pointer[zapcore.EntryCaller]
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
			defer func() {
				ce := noCaller.Check(zapcore.InfoLevel, "request")
				if ce == nil {
					return
				}
				status := ww.Status()
				if status == 0 {
					// Nothing written: net/http sends 200, or drops the
					// connection if a panic is propagating.
					status = http.StatusOK
				}
				caller := callerOf.Load()
				if caller == nil {
					caller = new(zapcore.EntryCaller)
					if probe := l.Check(zapcore.InfoLevel, "request"); probe != nil {
						*caller = probe.Caller // undefined unless l adds callers
					}
					callerOf.Store(caller)
				}
				ce.Caller = *caller
				ce.Write(
					zap.String("method", r.Method),
					zap.String("path", r.URL.Path),
					zap.Int("status", status),
					zap.Int("bytes", ww.BytesWritten()),
					zap.Duration("duration", time.Since(start)),
					zap.String("request_id", requestIDOf(ww, r)),
				)
			}()
			next.ServeHTTP(ww, r.WithContext(withLogger(r.Context(), l)))
		})
	}
}

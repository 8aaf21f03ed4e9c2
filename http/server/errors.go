package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"runtime/debug"
	"strconv"

	"github.com/go-chi/chi/v5/middleware"
	"go.uber.org/zap"

	svc "github.com/svc-dev/svc"
)

// statusByKind is the one table from error kinds to HTTP statuses (docs/api.md,
// "Errors"). A kind missing here takes the status of its nearest ancestor,
// so a kind added to the root package later is still answered sensibly.
var statusByKind = map[svc.Kind]int{
	svc.KindRuntime:              http.StatusInternalServerError,
	svc.KindSpecValidation:       http.StatusBadRequest,
	svc.KindTopology:             http.StatusBadRequest,
	svc.KindPayloadTooLarge:      http.StatusRequestEntityTooLarge,
	svc.KindUnsupportedMediaType: http.StatusUnsupportedMediaType,
	svc.KindForbiddenOrigin:      http.StatusForbidden,
	svc.KindTrustViolation:       http.StatusForbidden,
	svc.KindRegistry:             http.StatusNotFound,
	svc.KindRunState:             http.StatusConflict,
	svc.KindBudgetExceeded:       http.StatusTooManyRequests,
	svc.KindDepthLimit:           http.StatusTooManyRequests,
	svc.KindSpawnCycle:           http.StatusTooManyRequests,
	svc.KindSpawn:                http.StatusInternalServerError,
	svc.KindToolExecution:        http.StatusInternalServerError,
	svc.KindAllAgentsFailed:      http.StatusInternalServerError,
	svc.KindModel:                http.StatusBadGateway,
	svc.KindTimeout:              http.StatusGatewayTimeout,
	svc.KindShuttingDown:         http.StatusServiceUnavailable,
	svc.KindUnauthorized:         http.StatusUnauthorized,
	svc.KindForbidden:            http.StatusForbidden,
	svc.KindOutputValidation:     http.StatusInternalServerError,
	svc.KindNotFound:             http.StatusNotFound,
	svc.KindMethodNotAllowed:     http.StatusMethodNotAllowed,
	svc.KindBadRequest:           http.StatusBadRequest,
	svc.KindHeaderTooLarge:       http.StatusRequestHeaderFieldsTooLarge,
	svc.KindRequestTimeout:       http.StatusRequestTimeout,
	svc.KindMisdirectedRequest:   http.StatusMisdirectedRequest,
	svc.KindOverloaded:           http.StatusServiceUnavailable,
	svc.KindContext:              http.StatusBadRequest,
	// The request was well formed and the runtime understood it; the run
	// it started asked for a fan-out the runtime's configuration refuses.
	// Not 429 like the depth limit and the budget: nothing frees up with
	// time, so waiting and sending it again cannot help; not 400: the
	// request's own content was fine.
	svc.KindSpawnCap: http.StatusUnprocessableEntity,
	// The run asked for a person's approval or answer, which only a
	// submitted run can wait for: the request conflicts with how it was
	// made (sync, not submitted), and the same request submitted works.
	svc.KindApprovalRequired: http.StatusConflict,
	// The expression compiled when the group was registered; failing on
	// a run's data is the run's failure, not the request's.
	svc.KindCondition: http.StatusInternalServerError,
	// 499 (nginx's "client closed request") is not a registered status and
	// some proxies rewrite it; a cancelled run is a conflict with the run's
	// state, which is how /runs/{id}/result reports it too.
	svc.KindCancelled: http.StatusConflict,
}

// retryAfterSeconds is sent with every 503: long enough for a rolling
// restart to bring another instance up, short enough not to stall clients.
const retryAfterSeconds = 5

// problemTypePrefix starts the RFC 9457 "type" of every problem this package
// writes; the kind's name follows. A URN rather than a URL because there is
// no documentation page to dereference, and RFC 9457 only asks for a URI.
const problemTypePrefix = "urn:svc:error:"

// internalDetail is all a client learns about an error that is not a domain
// error: its text may hold paths, addresses or secrets, so it is logged
// instead.
const internalDetail = "internal server error"

// StatusOf returns the HTTP status for err: the table entry of its kind or
// of the nearest ancestor kind that has one, 504 for a context deadline,
// 409 for a context cancellation, 500 for anything else, and 200 for nil.
func StatusOf(err error) int {
	if err == nil {
		return http.StatusOK
	}
	kind, _ := classify(err)
	return statusOfKind(kind)
}

func statusOfKind(kind svc.Kind) int {
	for k := kind; k != ""; k = k.Parent() {
		if s, ok := statusByKind[k]; ok {
			return s
		}
	}
	return http.StatusInternalServerError
}

// classify returns err's kind and whether its text may be shown to a client.
// Domain errors and context errors are meant for the caller; anything else
// is an internal failure.
func classify(err error) (svc.Kind, bool) {
	var e *svc.Error
	if errors.As(err, &e) {
		return e.Kind, true
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return svc.KindOf(err), true
	}
	return svc.KindRuntime, false
}

// Problem is the RFC 9457 body of every error response, defined once in
// the root package (svc.Problem) so that the OpenAPI document's schema is
// derived from the same type.
type Problem = svc.Problem

// WriteError answers r with err as application/problem+json, with the
// status of StatusOf. Domain errors carry their message, agent and task id;
// any other error is answered with a generic 500 and logged with its text,
// so internals do not leak. A 503 carries Retry-After. Host handlers call it
// to answer in the same format as the router.
//
// The request id is taken from the response's X-Request-Id header, else the
// request's. The logger is the one the router or AccessLog put in the
// request's context, else zap.L().
func WriteError(w http.ResponseWriter, r *http.Request, err error) {
	status, p := problemOf(w, r, err)
	writeProblem(w, r, status, p)
}

// problemOf classifies err for WriteError, logs what must be logged, and
// returns the status and the problem to answer with.
func problemOf(w http.ResponseWriter, r *http.Request, err error) (int, Problem) {
	if err == nil {
		err = errors.New("server: WriteError called with a nil error")
	}
	kind, public := classify(err)
	status := statusOfKind(kind)
	p := Problem{Error: string(kind), Detail: internalDetail}
	if public {
		p.Detail = err.Error()
		var e *svc.Error
		if errors.As(err, &e) {
			p.Agent, p.TaskID, p.Reason = e.Agent, e.TaskID, svc.ReasonOf(err)
		}
	}
	log := loggerFrom(r.Context())
	switch {
	case !public:
		log.Error("internal error", zap.Error(err), zap.String("method", r.Method),
			zap.String("path", r.URL.Path), zap.String("request_id", requestIDOf(w, r)))
	case status >= 500:
		log.Warn("request failed", zap.Error(err), zap.String("error_kind", string(kind)),
			zap.String("path", r.URL.Path), zap.String("request_id", requestIDOf(w, r)))
	}
	return status, p
}

// problemBody fills in the members of p derived from status and r and
// encodes it.
func problemBody(w http.ResponseWriter, r *http.Request, status int, p Problem) []byte {
	if p.Error == "" {
		p.Error = string(svc.KindRuntime)
	}
	p.Type = problemTypePrefix + p.Error
	p.Title = http.StatusText(status)
	p.Status = status
	p.Message = p.Detail
	p.RequestID = requestIDOf(w, r)
	body, err := json.Marshal(p)
	if err != nil {
		// Every member is a string or an int: Marshal cannot fail.
		panic("server: encoding a problem: " + err.Error())
	}
	return body
}

// writeProblem fills in the members derived from status and r and writes p.
func writeProblem(w http.ResponseWriter, r *http.Request, status int, p Problem) {
	body := problemBody(w, r, status, p)
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(body)+1))
	h.Set("X-Content-Type-Options", "nosniff")
	if status == http.StatusServiceUnavailable {
		h.Set("Retry-After", strconv.Itoa(retryAfterSeconds))
	}
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

// requestIDOf returns the id the response carries, else the request's.
func requestIDOf(w http.ResponseWriter, r *http.Request) string {
	if id := w.Header().Get(RequestIDHeader); id != "" {
		return id
	}
	return r.Header.Get(RequestIDHeader)
}

// HandlerFunc is an HTTP handler that returns its error instead of writing
// it, so every failure is answered the same way (see Handle).
type HandlerFunc func(w http.ResponseWriter, r *http.Request) error

// Handle adapts fn to an http.Handler: a non-nil error is answered with
// WriteError. If fn had already started its response, the error can no
// longer be sent and is logged instead. This is the way host handlers
// mounted beside the router report domain errors.
func Handle(fn HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Under AccessLog or Recoverer w already tracks the status, which
		// is all answer needs: a second wrapper would track the same writes.
		ww, ok := w.(middleware.WrapResponseWriter)
		if !ok {
			ww = middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		}
		if err := fn(ww, r); err != nil {
			answer(ww, r, err)
		}
	})
}

// answer writes err unless the response is already under way.
func answer(ww middleware.WrapResponseWriter, r *http.Request, err error) {
	if ww.Status() != 0 {
		loggerFrom(r.Context()).Warn("error after the response started",
			zap.Error(err), zap.Int("status", ww.Status()),
			zap.String("path", r.URL.Path), zap.String("request_id", requestIDOf(ww, r)))
		return
	}
	WriteError(ww, r, err)
}

// ErrorMiddleware answers a panic whose value is an error as if a handler
// had returned that error (WriteError): panic(svc.Errorf(svc.KindRegistry,
// ...)) deep in a host's code becomes a 404 problem. Panics with other
// values, and http.ErrAbortHandler, propagate to the next recoverer (the
// host's, Recoverer, or net/http's), so a real bug is not dressed up as a
// domain error. Prefer Handle; this is the net for code that panics.
func ErrorMiddleware(next http.Handler) http.Handler {
	return recoverer(next, false)
}

// Recoverer answers every panic below it with a problem: an error value is
// mapped like WriteError, anything else is a generic 500. The panic and its
// stack are logged. http.ErrAbortHandler propagates, since it asks net/http
// to abort the connection.
func Recoverer(next http.Handler) http.Handler {
	return recoverer(next, true)
}

func recoverer(next http.Handler, all bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Under AccessLog (the standalone server) w already tracks the
		// status: a second wrapper would track the same writes.
		ww, ok := w.(middleware.WrapResponseWriter)
		if !ok {
			ww = middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		}
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			err, isErr := v.(error)
			if v == http.ErrAbortHandler || (!isErr && !all) {
				panic(v)
			}
			if !isErr {
				err = panicError{v}
			}
			if _, public := classify(err); !public {
				loggerFrom(r.Context()).Error("panic", zap.Any("panic", v),
					zap.ByteString("stack", debug.Stack()),
					zap.String("path", r.URL.Path), zap.String("request_id", requestIDOf(ww, r)))
				// Already logged with its stack; keep WriteError from logging
				// it again without one.
				err = svc.Errorf(svc.KindRuntime, internalDetail)
			}
			answer(ww, r, err)
		}()
		next.ServeHTTP(ww, r)
	})
}

// panicError carries a non-error panic value; it is never shown to clients.
type panicError struct{ v any }

func (p panicError) Error() string { return "panic" }

type loggerKey struct{}

// withLogger returns ctx carrying l for WriteError and the middleware.
func withLogger(ctx context.Context, l *zap.Logger) context.Context {
	return context.WithValue(ctx, loggerKey{}, l)
}

func loggerFrom(ctx context.Context) *zap.Logger {
	if l, ok := ctx.Value(loggerKey{}).(*zap.Logger); ok {
		return l
	}
	return zap.L()
}

package server

import (
	"context"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// unmatchedRoute labels requests no route matched, so a scan of random
// paths cannot blow up the metric's cardinality.
const unmatchedRoute = "unmatched"

// Metrics records the OpenTelemetry semantic-convention HTTP server
// metrics on mp: http.server.request.duration (histogram, seconds) and
// http.server.active_requests (up-down counter), labelled by method,
// route pattern (never the raw path, which carries ids) and status code.
func Metrics(mp metric.MeterProvider) (func(http.Handler) http.Handler, error) {
	m := mp.Meter("github.com/svc-dev/svc/http/server")
	dur, err := m.Float64Histogram("http.server.request.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of HTTP server requests."),
		metric.WithExplicitBucketBoundaries(0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10))
	if err != nil {
		return nil, err
	}
	active, err := m.Int64UpDownCounter("http.server.active_requests", metric.WithUnit("{request}"),
		metric.WithDescription("Number of active HTTP server requests."))
	if err != nil {
		return nil, err
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			method := r.Method
			switch method {
			case http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodHead, http.MethodOptions, http.MethodPatch:
			default:
				method = "_OTHER"
			}
			methodAttr := attribute.String("http.request.method", method)
			active.Add(r.Context(), 1, metric.WithAttributes(methodAttr))
			// A route context made here is the one chi fills in, so the
			// matched pattern is readable once the handler returns.
			rctx := chi.RouteContext(r.Context())
			if rctx == nil {
				rctx = chi.NewRouteContext()
				r = r.WithContext(context.WithValue(r.Context(), chi.RouteCtxKey, rctx))
			}
			ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
			defer func() {
				status := ww.Status()
				if status == 0 {
					status = http.StatusOK
				}
				route := rctx.RoutePattern()
				if route == "" || status == http.StatusNotFound && route == "/*" {
					route = unmatchedRoute
				}
				active.Add(context.WithoutCancel(r.Context()), -1, metric.WithAttributes(methodAttr))
				dur.Record(context.WithoutCancel(r.Context()), time.Since(start).Seconds(), metric.WithAttributes(
					methodAttr,
					attribute.String("http.route", route),
					attribute.Int("http.response.status_code", status),
				))
			}()
			next.ServeHTTP(ww, r)
		})
	}, nil
}

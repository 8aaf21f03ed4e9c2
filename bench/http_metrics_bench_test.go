package bench

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.uber.org/zap"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/http/server"
)

// BenchmarkHTTPRunMetrics measures what the HTTP server metrics
// (http.server.request.duration and active_requests, by route pattern) cost
// a run over real HTTP: the standalone handler with a MeterProvider against
// the same handler without one, driven alternately by the load generator of
// BenchmarkHTTPRun.
func BenchmarkHTTPRunMetrics(b *testing.B) {
	const requests, clients = 20_000, 32
	rt := newRuntime(b, svc.Agent{Name: "echo", Model: "test:echo"})
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	b.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	measured, err := server.NewStandalone(rt, server.StandaloneConfig{Logger: zap.NewNop(), MeterProvider: mp})
	if err != nil {
		b.Fatal(err)
	}
	plain, err := server.NewStandalone(rt, server.StandaloneConfig{Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	var withRate, withoutRate float64
	for i := 0; i < b.N; i++ {
		withRate += load(b, measured, requests, clients)
		withoutRate += load(b, plain, requests, clients)
	}
	b.ReportMetric(withRate/float64(b.N), "metrics_req/s")
	b.ReportMetric(withoutRate/float64(b.N), "plain_req/s")
	b.ReportMetric(withRate/withoutRate, "ratio")
}

// BenchmarkHTTPMetricsMiddleware isolates the per-request cost of
// server.Metrics, without the network and the runtime: a chi route that
// answers at once, served to an httptest recorder, with and without the
// middleware. Its ns/op and allocs/op are steadier than the req/s of
// BenchmarkHTTPRunMetrics on a busy machine.
func BenchmarkHTTPMetricsMiddleware(b *testing.B) {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	b.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	r := chi.NewRouter()
	r.Post("/agents/{name}/run", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"success":true}`))
	})
	mw, err := server.Metrics(mp)
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		h    http.Handler
	}{{"bare", r}, {"metrics", mw(r)}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				req := httptest.NewRequest(http.MethodPost, "/agents/echo/run", strings.NewReader(`{"input":1}`))
				w := httptest.NewRecorder()
				bc.h.ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					b.Fatal(w.Code)
				}
			}
		})
	}
}

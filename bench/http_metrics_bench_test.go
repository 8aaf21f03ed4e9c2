package bench

import (
	"context"
	"testing"

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

package server_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/svc-dev/svc/http/server"
)

// The HTTP metrics carry the route pattern, never the raw path (which
// holds run ids), and the status code.
func TestMetricsMiddleware(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	h, err := server.NewStandalone(&fakeBackend{}, server.StandaloneConfig{MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, h)
	do(t, srv, "GET", "/agents/echo/schema", "")
	do(t, srv, "GET", "/agents/nope/schema", "")
	do(t, srv, "GET", "/no/such/route/0193", "")
	// The Host header is the client's: it must not make series of its own.
	req, _ := http.NewRequest("GET", srv.URL+"/agents/echo/schema", nil)
	req.Host = "attacker.example:31337"
	if resp, err := http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	type key struct {
		route  string
		status int64
	}
	got := map[key]uint64{}
	var active bool
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch m.Name {
			case "http.server.request.duration":
				if m.Unit != "s" {
					t.Errorf("unit %q, want s", m.Unit)
				}
				for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
					route, _ := dp.Attributes.Value(attribute.Key("http.route"))
					status, _ := dp.Attributes.Value(attribute.Key("http.response.status_code"))
					method, _ := dp.Attributes.Value(attribute.Key("http.request.method"))
					if method.AsString() != http.MethodGet {
						t.Errorf("method %q", method.AsString())
					}
					got[key{route.AsString(), status.AsInt64()}] += dp.Count
					if v, ok := dp.Attributes.Value("server.address"); ok && strings.Contains(v.AsString(), "attacker") {
						t.Errorf("server.address = %s: taken from the Host header", v.AsString())
					}
					if v, ok := dp.Attributes.Value("server.port"); ok {
						t.Errorf("server.port = %d: taken from the Host header", v.AsInt64())
					}
				}
			case "http.server.active_requests":
				active = true
			}
		}
	}
	want := map[key]uint64{{"/agents/{name}/schema", 200}: 2, {"/agents/{name}/schema", 404}: 1, {"unmatched", 404}: 1}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("requests %v = %d, want %d (all: %v)", k, got[k], n, got)
		}
	}
	if len(got) != len(want) {
		t.Errorf("series %v, want exactly %v", got, want)
	}
	if !active {
		t.Error("no http.server.active_requests")
	}
}

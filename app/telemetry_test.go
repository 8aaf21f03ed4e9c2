package app

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	colmetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	"google.golang.org/protobuf/proto"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/emitters"
)

// Without Metrics and without OTLP variables nothing is measured.
func TestTelemetryOff(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "")
	tel, err := newTelemetry(t.Context(), false, true)
	if err != nil || tel.mp != nil || tel.metrics != nil {
		t.Fatalf("telemetry = %+v, %v; want nothing", tel, err)
	}
}

// With the standard OTLP variables set, runtime metrics reach an OTLP/HTTP
// receiver: at the latest when the server shuts down and flushes.
func TestTelemetryOTLPExport(t *testing.T) {
	var (
		mu    sync.Mutex
		names = map[string]bool{}
		paths []string
	)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req colmetrics.ExportMetricsServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		paths = append(paths, r.URL.Path)
		for _, rm := range req.ResourceMetrics {
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					names[m.Name] = true
				}
			}
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer recv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", recv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_METRICS_EXPORTER", "")

	tel, err := newTelemetry(t.Context(), false, true)
	if err != nil {
		t.Fatal(err)
	}
	if tel.otlp != "http/protobuf" || tel.mp == nil {
		t.Fatalf("telemetry = %+v, want OTLP over http/protobuf", tel)
	}
	em, err := emitters.NewOTel(tel.mp)
	if err != nil {
		t.Fatal(err)
	}
	em.Emit(svc.RuntimeEvent{EventType: svc.EventAgentCompleted, Timestamp: time.Now(), AgentName: "echo", TraceID: "t",
		Payload: svc.Payload{"duration_ms": 12.0, "tokens_used": 7, "backend": "local", "model": "test:echo"}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tel.shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(paths) == 0 || paths[0] != "/v1/metrics" {
		t.Fatalf("OTLP receiver saw %v, want a POST to /v1/metrics", paths)
	}
	for _, n := range []string{"gen_ai.client.token.usage", "gen_ai.client.operation.duration"} {
		if !names[n] {
			t.Errorf("exported metrics %v lack %s", names, n)
		}
	}
}

func TestTelemetryBadProtocol(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
	if _, err := newTelemetry(t.Context(), false, true); err == nil {
		t.Fatal("OTEL_EXPORTER_OTLP_PROTOCOL=http/json accepted; svc exports grpc or http/protobuf only")
	}
}

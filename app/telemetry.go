package app

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	svc "github.com/svc-dev/svc"
)

// telemetry is the metrics pipeline of the process: a MeterProvider read by
// the Prometheus exporter (Options.Metrics, served at /metrics) and, with
// Options.OTLPFromEnv when the standard OTEL_EXPORTER_OTLP_* variables name
// an endpoint, by a periodic OTLP exporter. The zero value (neither
// configured) measures nothing.
type telemetry struct {
	mp      *sdkmetric.MeterProvider
	metrics http.Handler // /metrics; nil without Options.Metrics
	otlp    string       // the OTLP protocol in use, "" when off
}

// otlpEnabled reports whether the environment asks for OTLP metric export,
// by the variables of the OpenTelemetry specification.
func otlpEnabled() bool {
	if strings.EqualFold(os.Getenv("OTEL_METRICS_EXPORTER"), "none") {
		return false
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") != ""
}

// otlpProtocol is the protocol the environment asks for: grpc, or
// http/protobuf (the specification's default).
func otlpProtocol() (string, error) {
	p := os.Getenv("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL")
	if p == "" {
		p = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch p {
	case "", "http/protobuf":
		return "http/protobuf", nil
	case "grpc":
		return "grpc", nil
	}
	return "", fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%q: svc exports metrics over grpc or http/protobuf", p)
}

// newTelemetry builds the pipeline. The exporters read the rest of their
// configuration (headers, TLS, timeouts, export interval) from the
// standard environment variables themselves.
func newTelemetry(ctx context.Context, prom, otlp bool) (*telemetry, error) {
	t := &telemetry{}
	var opts []sdkmetric.Option
	if prom {
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		exp, err := otelprom.New(otelprom.WithRegisterer(reg))
		if err != nil {
			return nil, &ConfigError{Option: "Metrics", Err: err}
		}
		opts = append(opts, sdkmetric.WithReader(exp))
		t.metrics = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	}
	if otlp && otlpEnabled() {
		proto, err := otlpProtocol()
		if err != nil {
			return nil, &ConfigError{Option: "OTLPFromEnv", Err: err}
		}
		var exp sdkmetric.Exporter
		if proto == "grpc" {
			exp, err = otlpmetricgrpc.New(ctx)
		} else {
			exp, err = otlpmetrichttp.New(ctx)
		}
		if err != nil {
			return nil, &ConfigError{Option: "OTLPFromEnv", Err: fmt.Errorf("OTLP metric exporter (%s): %w", proto, err)}
		}
		opts = append(opts, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp)))
		t.otlp = proto
	}
	if len(opts) == 0 {
		return t, nil
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		semconv.ServiceName(serviceName()), semconv.ServiceVersion(svc.Version)))
	if err != nil {
		res = resource.Default()
	}
	t.mp = sdkmetric.NewMeterProvider(append(opts, sdkmetric.WithResource(res))...)
	return t, nil
}

// serviceName honours OTEL_SERVICE_NAME, else "svc".
func serviceName() string {
	if n := os.Getenv("OTEL_SERVICE_NAME"); n != "" {
		return n
	}
	return "svc"
}

// shutdown flushes the OTLP exporter and stops the readers.
func (t *telemetry) shutdown(ctx context.Context) error {
	if t == nil || t.mp == nil {
		return nil
	}
	if err := t.mp.Shutdown(ctx); err != nil && !errors.Is(err, sdkmetric.ErrReaderShutdown) {
		return err
	}
	return nil
}

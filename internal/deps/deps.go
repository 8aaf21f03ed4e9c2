//go:build tools

// Package deps pins modules that packages under construction will import,
// so that `go mod tidy` keeps them while the code that uses them is written.
package deps

import (
	_ "github.com/anthropics/anthropic-sdk-go"
	_ "github.com/modelcontextprotocol/go-sdk/mcp"
	_ "github.com/openai/openai-go/v3"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	_ "go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	_ "go.opentelemetry.io/otel/exporters/prometheus"
)

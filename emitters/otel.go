package emitters

import (
	"context"
	"errors"
	"math"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/svc-dev/svc"
)

// OTelMeterName is the instrumentation scope of the OpenTelemetry emitter's
// meter.
const OTelMeterName = "github.com/svc-dev/svc/emitters"

// The five instruments of the spec's "Metrics recorded by the OpenTelemetry
// emitter" table. The gen_ai ones follow the OpenTelemetry GenAI semantic
// conventions; the svc ones are the runtime's own.
const (
	// MetricTokenUsage is an Int64Histogram in {token}, recorded on
	// agent_completed with tokens_used above 0.
	MetricTokenUsage = "gen_ai.client.token.usage"
	// MetricOperationDuration is a Float64Histogram in s, recorded on
	// agent_completed and agent_failed.
	MetricOperationDuration = "gen_ai.client.operation.duration"
	// MetricToolCalls is an Int64Counter in {call}, recorded on
	// tool_call_completed and tool_call_failed.
	MetricToolCalls = "svc.tool.calls"
	// MetricToolDuration is a Float64Histogram in ms, recorded on
	// tool_call_completed and tool_call_failed.
	MetricToolDuration = "svc.tool.duration_ms"
	// MetricRejections is an Int64Counter in {rejection}, recorded on
	// budget_exceeded, depth_limit_exceeded and agent_failed.
	MetricRejections = "svc.rejections"
	// MetricRateLimitWait is a Float64Histogram in ms, recorded on
	// rate_limited: how long model calls waited for a rate limit's turn
	// (those that waited over a second), by limit and reason.
	MetricRateLimitWait = "svc.rate_limit.wait_ms"
)

// Attribute keys the OpenTelemetry emitter writes; no other key ever
// appears. The gen_ai instruments name the agent with the semantic
// convention's gen_ai.agent.name, the svc instruments with a plain "agent",
// matching "tool" beside it.
const (
	AttrOperationName = "gen_ai.operation.name" // always "invoke_agent"
	AttrProviderName  = "gen_ai.provider.name"  // "test" of "test:echo"
	AttrRequestModel  = "gen_ai.request.model"  // "echo" of "test:echo"
	AttrTokenType     = "gen_ai.token.type"     // always "total"
	AttrAgentName     = "gen_ai.agent.name"     // agent, on gen_ai instruments
	AttrErrorType     = "error.type"            // error kind name, on failures
	AttrAgent         = "agent"                 // agent, on svc instruments
	AttrTool          = "tool"                  // tool name, on svc.tool.*
	AttrLimit         = "limit"                 // rate limit name, on svc.rate_limit.*
	AttrReason        = "reason"                // why a call waited, on svc.rate_limit.*
)

// OTelAttributeKeys is every attribute key the emitter may write. It is the
// whole label vocabulary on purpose: trace and task ids, prompts and tool
// arguments are unbounded or sensitive and never become labels.
var OTelAttributeKeys = []string{
	AttrOperationName, AttrProviderName, AttrRequestModel, AttrTokenType,
	AttrAgentName, AttrErrorType, AttrAgent, AttrTool, AttrLimit, AttrReason,
}

const (
	operationInvokeAgent = "invoke_agent"
	tokenTypeTotal       = "total"
)

// NewOTel returns the OTelMetricsEmitter: it records the spec's five
// instruments on meters of mp, or of otel.GetMeterProvider() when mp is nil
// (the host's global provider, a no-op until the host installs one). Events
// of other types are ignored. Emit records synchronously through the
// provider's instruments, which aggregate in memory and export on their own
// schedule, so it never waits on an exporter; it never panics.
//
// error.type on agent_failed is the error kind its "reason" carries (see
// svc.FailureKind), AgentRuntimeError when it carries none; the error text
// is never parsed. Only kind names are ever written, so the label stays
// bounded whatever the error text says. Tool failures are classified the
// same way with ToolExecutionError as the fallback. A failed run carries
// gen_ai.provider.name and gen_ai.request.model from agent_failed's
// "model", the model that answered or was tried last, like a completed
// one.
func NewOTel(mp metric.MeterProvider) (svc.Emitter, error) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter(OTelMeterName)
	e := &otelEmitter{}
	var err, errs error
	e.tokenUsage, err = m.Int64Histogram(MetricTokenUsage, metric.WithUnit("{token}"),
		metric.WithDescription("Tokens used per completed agent run."))
	errs = errors.Join(errs, err)
	e.opDuration, err = m.Float64Histogram(MetricOperationDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of agent runs, completed or failed."))
	errs = errors.Join(errs, err)
	e.toolCalls, err = m.Int64Counter(MetricToolCalls, metric.WithUnit("{call}"),
		metric.WithDescription("Tool calls, completed or failed."))
	errs = errors.Join(errs, err)
	e.toolDuration, err = m.Float64Histogram(MetricToolDuration, metric.WithUnit("ms"),
		metric.WithDescription("Duration of tool calls, completed or failed."))
	errs = errors.Join(errs, err)
	e.rejections, err = m.Int64Counter(MetricRejections, metric.WithUnit("{rejection}"),
		metric.WithDescription("Budget and depth rejections and failed agent runs."))
	errs = errors.Join(errs, err)
	e.limitWait, err = m.Float64Histogram(MetricRateLimitWait, metric.WithUnit("ms"),
		metric.WithDescription("Waits of model calls for a rate limit's turn, those over a second."))
	errs = errors.Join(errs, err)
	if errs != nil {
		return nil, svc.Wrap(svc.KindRuntime, errs, "otel emitter: creating instruments")
	}
	return e, nil
}

type otelEmitter struct {
	tokenUsage   metric.Int64Histogram
	opDuration   metric.Float64Histogram
	toolCalls    metric.Int64Counter
	toolDuration metric.Float64Histogram
	rejections   metric.Int64Counter
	limitWait    metric.Float64Histogram
}

// Emit records ev on the instruments its type feeds. A panic from the
// provider is recovered, counted and logged (recoverEmit): metrics are
// never worth taking the runtime down.
func (e *otelEmitter) Emit(ev svc.RuntimeEvent) {
	defer recoverEmit("otel")

	// Recording must not depend on the caller's context (which may already
	// be cancelled), and exemplars would carry trace ids: background it is.
	ctx := context.Background()
	p := ev.Payload
	switch ev.EventType {
	case svc.EventAgentCompleted:
		attrs := genAIAttrs(ev)
		if ms, ok := nonNegative(p["duration_ms"]); ok {
			e.opDuration.Record(ctx, ms/1000, metric.WithAttributes(attrs...))
		}
		if tokens, ok := toInt64(p["tokens_used"]); ok && tokens > 0 {
			attrs = append(attrs, attribute.String(AttrTokenType, tokenTypeTotal))
			e.tokenUsage.Record(ctx, tokens, metric.WithAttributes(attrs...))
		}
	case svc.EventAgentFailed:
		kind := string(svc.FailureKind(p, svc.KindRuntime))
		attrs := append(genAIAttrs(ev), attribute.String(AttrErrorType, kind))
		if ms, ok := nonNegative(p["duration_ms"]); ok {
			e.opDuration.Record(ctx, ms/1000, metric.WithAttributes(attrs...))
		}
		e.rejections.Add(ctx, 1, metric.WithAttributes(
			attribute.String(AttrAgent, ev.AgentName), attribute.String(AttrErrorType, kind)))
	case svc.EventToolCallCompleted, svc.EventToolCallFailed:
		attrs := []attribute.KeyValue{
			attribute.String(AttrAgent, ev.AgentName),
			attribute.String(AttrTool, str(p["tool_name"])),
		}
		if ev.EventType == svc.EventToolCallFailed {
			attrs = append(attrs, attribute.String(AttrErrorType, string(svc.FailureKind(p, svc.KindToolExecution))))
		}
		opt := metric.WithAttributes(attrs...)
		e.toolCalls.Add(ctx, 1, opt)
		if ms, ok := nonNegative(p["duration_ms"]); ok {
			e.toolDuration.Record(ctx, ms, opt)
		}
	case svc.EventBudgetExceeded, svc.EventDepthLimitExceeded:
		kind := svc.KindBudgetExceeded
		if ev.EventType == svc.EventDepthLimitExceeded {
			kind = svc.KindDepthLimit
		}
		e.rejections.Add(ctx, 1, metric.WithAttributes(
			attribute.String(AttrAgent, ev.AgentName), attribute.String(AttrErrorType, string(kind))))
	case svc.EventRateLimited:
		if ms, ok := nonNegative(p["wait_ms"]); ok {
			e.limitWait.Record(ctx, ms, metric.WithAttributes(attribute.String(AttrAgent, ev.AgentName),
				attribute.String(AttrLimit, str(p["rate_limit"])), attribute.String(AttrReason, str(p["reason"]))))
		}
	}
}

// genAIAttrs are the attributes every gen_ai instrument carries for ev:
// the operation, the agent and, when the payload names the resolved model,
// its provider and model name.
func genAIAttrs(ev svc.RuntimeEvent) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 6)
	attrs = append(attrs,
		attribute.String(AttrOperationName, operationInvokeAgent),
		attribute.String(AttrAgentName, ev.AgentName))
	provider, model := splitModel(str(ev.Payload["model"]))
	if provider != "" {
		attrs = append(attrs, attribute.String(AttrProviderName, provider))
	}
	if model != "" {
		attrs = append(attrs, attribute.String(AttrRequestModel, model))
	}
	return attrs
}

// splitModel splits a resolved "provider:name" identifier at its first
// colon (model names may contain colons, provider names do not). An
// identifier without a colon is a bare model name of unknown provider.
func splitModel(id string) (provider, model string) {
	if p, m, ok := strings.Cut(id, ":"); ok {
		return p, m
	}
	return "", id
}

// str returns v if it is a string, else "": label values come only from
// strings the runtime put there, never from formatting arbitrary values.
func str(v any) string {
	s, _ := v.(string)
	return s
}

// toFloat reads a payload number. Payloads built in process hold Go ints
// and float64s; payloads decoded from JSON (a broker relay) hold float64s.
func toFloat(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case float32:
		return float64(n), true
	case int:
		return float64(n), true
	case int8:
		return float64(n), true
	case int16:
		return float64(n), true
	case int32:
		return float64(n), true
	case int64:
		return float64(n), true
	case uint:
		return float64(n), true
	case uint8:
		return float64(n), true
	case uint16:
		return float64(n), true
	case uint32:
		return float64(n), true
	case uint64:
		return float64(n), true
	case interface{ Float64() (float64, error) }: // json.Number
		f, err := n.Float64()
		return f, err == nil
	}
	return 0, false
}

// nonNegative reads a duration: a NaN, infinite or negative one is a bug
// upstream and would poison the histogram's sum, so it is not recorded.
func nonNegative(v any) (float64, bool) {
	f, ok := toFloat(v)
	if !ok || math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
		return 0, false
	}
	return f, true
}

// toInt64 reads a count, truncating a fractional one and refusing values
// outside int64.
func toInt64(v any) (int64, bool) {
	switch n := v.(type) {
	case int:
		return int64(n), true
	case int64:
		return n, true
	case int32:
		return int64(n), true
	case uint32:
		return int64(n), true
	case uint64:
		if n > math.MaxInt64 {
			return 0, false
		}
		return int64(n), true
	}
	f, ok := toFloat(v)
	if !ok || math.IsNaN(f) || f >= math.MaxInt64 || f < math.MinInt64 {
		return 0, false
	}
	return int64(f), true
}

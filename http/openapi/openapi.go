// Package openapi builds the OpenAPI 3.1 document of svc's HTTP API: every
// route of the router (package http/server) and of the standalone server,
// with schemas generated from the root package's wire types, so the
// document and the code share one source. The router serves it at
// GET /openapi.json; docs/openapi.json is the same document kept in the
// repository, checked against Build by http/server's tests.
package openapi

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"

	svc "github.com/svc-dev/svc"
)

// Version is the API's version in the document: svc's.
const Version = "0.0.0"

// Route is one documented operation.
type Route struct {
	Method, Path string
	ID, Summary  string
	// Query lists the query parameters: name → description.
	Query map[string]string
	// Body names the request body's component ("" for none); BodyTypes
	// are its media types, application/json unless set (an
	// application/x-ndjson body is a TaskSpec a line).
	Body      string
	BodyTypes []string
	// Status is the success status; Reply its component ("" for none),
	// ReplyType its media type (application/json unless set), ReplyArray
	// a JSON array of Reply. Alt is a second component the reply may be
	// (oneOf).
	Status     int
	Reply      string
	ReplyType  string
	ReplyArray bool
	Alt        string
	// Streams names the component each line (application/x-ndjson) or
	// frame (text/event-stream) of a streamed answer is, when the route
	// streams on request.
	Streams string
	// Public routes answer without the bearer token.
	Public bool
	// Headers are response headers: name → description.
	Headers map[string]string
}

// Routes is every operation of the router and the standalone server.
var Routes = []Route{
	{Method: "GET", Path: "/agents", ID: "listAgents", Summary: "The registered agent names, sorted.", Status: 200, Reply: "string", ReplyArray: true},
	{Method: "GET", Path: "/agents/{name}/schema", ID: "agentSchema", Summary: "An agent's input and output JSON Schemas.", Status: 200, Reply: "AgentSchema"},
	{Method: "POST", Path: "/agents/{name}/run", ID: "runAgent", Summary: "Run an agent on one task and wait for its result.", Body: "RunBody", Status: 200, Reply: "AgentResult",
		Headers: map[string]string{"X-Request-Id": "The run's trace id."}},
	{Method: "POST", Path: "/agents/{name}/gather", ID: "gather", Summary: "Run an agent on many tasks at once: the results in task order, or (Accept: application/x-ndjson or text/event-stream) each StreamLine as it finishes, then a summary.", Body: "GatherRequest", BodyTypes: []string{"application/json", "application/x-ndjson"}, Status: 200, Reply: "AgentResult", ReplyArray: true, Streams: "StreamLine",
		Query:   map[string]string{"max_concurrency": "Tasks in flight for an application/x-ndjson body (1..10000; default 100)."},
		Headers: map[string]string{"X-Request-Id": "The batch's trace id."}},
	{Method: "GET", Path: "/groups", ID: "listGroups", Summary: "The registered group names, sorted.", Status: 200, Reply: "string", ReplyArray: true},
	{Method: "GET", Path: "/groups/{name}/topology", ID: "groupTopology", Summary: "A group's nodes and edges, with a Mermaid flowchart.", Status: 200, Reply: "Topology"},
	{Method: "POST", Path: "/groups/{name}/run", ID: "runGroup", Summary: "Run a group on one task and wait for its result.", Body: "RunBody", Status: 200, Reply: "RunResult",
		Headers: map[string]string{"X-Request-Id": "The run's trace id."}},
	{Method: "POST", Path: "/submit", ID: "submit", Summary: "Start a run in the background; poll, stream or cancel it by run_id.", Body: "SubmitRequest", Status: 202, Reply: "SubmitReply"},
	{Method: "GET", Path: "/runs", ID: "listRuns", Summary: "The run history: every top-level run (synchronous runs, gathers, group runs from the event store, and submitted runs), newest first, a page at a time, with the total.", Status: 200, Reply: "RunPage",
		Query: map[string]string{"status": "Only runs with this status: spawned, running, waiting, completed, failed, rejected or cancelled.", "target": "Only runs of this agent or group.",
			"type":  "Only runs of this type: run, gather, group or submitted.",
			"state": "The submitted runs alone, in this state: pending, running, waiting, completed, failed or cancelled (not with status, target or type).", "limit": "Runs per page (default 50, at most 1000).", "cursor": "The next_cursor of the previous page.",
			"tenant": "The submitted runs of this tenant alone (svc serve --api-keys): an admin key's filter; any other key lists its own tenant's submitted runs without it, and another tenant's name is a 403."}},
	{Method: "GET", Path: "/runs/{id}/status", ID: "runStatus", Summary: "A submitted run's state and progress.", Status: 200, Reply: "RunStatus"},
	{Method: "GET", Path: "/runs/{id}/result", ID: "runResult", Summary: "A finished run's result: 409 while it runs or when it was cancelled.", Status: 200, Reply: "RunResult"},
	{Method: "POST", Path: "/runs/{id}/cancel", ID: "cancelRun", Summary: "Cancel a submitted run.", Status: 204},
	{Method: "POST", Path: "/runs/{id}/resume", ID: "resumeRun", Summary: "Answer one request of a waiting run (approve, deny or answer) and resume it; 409 when the run is not waiting or the request is unknown or answered.", Body: "ResumeRequest", Status: 202, Reply: "RunStatus"},
	{Method: "GET", Path: "/runs/{id}/stream", ID: "runStream", Summary: "A run's events as server-sent events (data: RunEvent), resumable with Last-Event-ID.", Status: 200, Reply: "RunEvent", ReplyType: "text/event-stream",
		Query: map[string]string{"after": "Resume after this event id (as Last-Event-ID)."}},
	{Method: "POST", Path: "/batches", ID: "submitBatch", Summary: "Store a batch of tasks for an agent and run it in the background: 202 once every task is stored. A JSON BatchRequest, or one TaskSpec a line (application/x-ndjson, any count) with target, max_concurrency, mode and callback_url in the query; a bad line fails only its task. Mode provider sends the model calls to the provider's batch API (half price, up to 24 h): only for an agent whose run is one model call without tools (refused with a 400 saying why).", Body: "BatchRequest", BodyTypes: []string{"application/json", "application/x-ndjson"}, Status: 202, Reply: "BatchAccepted",
		Query: map[string]string{"target": "The agent, for an application/x-ndjson body.", "max_concurrency": "Tasks in flight for an application/x-ndjson body (1..10000; default 100).",
			"mode":         "runtime (default) or provider, for an application/x-ndjson body.",
			"callback_url": "For an application/x-ndjson body: an http(s) URL that gets one signed POST when the batch ends (docs/api.md, Webhooks)."},
		Headers: map[string]string{"Location": "The batch's status: batches/{id}."}},
	{Method: "GET", Path: "/batches", ID: "listBatches", Summary: "Batches, newest first, a page at a time.", Status: 200, Reply: "BatchPage",
		Query: map[string]string{"limit": "Batches per page (default 50, at most 1000).", "cursor": "The next_cursor of the previous page."}},
	{Method: "GET", Path: "/batches/{id}", ID: "batchStatus", Summary: "A batch's state, counts, tokens and cost so far.", Status: 200, Reply: "BatchStatus"},
	{Method: "GET", Path: "/batches/{id}/results", ID: "batchResults", Summary: "A batch's stored results, one BatchResultLine a line (application/x-ndjson), by index or finish order; a line {\"error\": ErrorInfo} ends a stream that broke.", Status: 200, Reply: "BatchResultLine", ReplyType: "application/x-ndjson",
		Query: map[string]string{"order": "index (default) or finish.", "after": "Resume after this index (by finish: this seq).", "follow": "true: wait for the results to come until the batch ends (by index, each after those before it)."}},
	{Method: "POST", Path: "/batches/{id}/cancel", ID: "cancelBatch", Summary: "Cancel a batch; its stored results stay.", Status: 204},
	{Method: "GET", Path: "/runs/{trace_id}/tree", ID: "runTree", Summary: "A trace's invocations as a tree: run, agents, tools, children.", Status: 200, Reply: "EventTree"},
	{Method: "GET", Path: "/events", ID: "listEvents", Summary: "Stored events, oldest first.", Status: 200, Reply: "RuntimeEvent", ReplyArray: true,
		Query: map[string]string{"limit": "At most this many events.", "since": sinceDoc, "until": untilDoc, "trace_id": "Only this trace.", "event_type": "Only this event type."}},
	{Method: "GET", Path: "/events/stream", ID: "streamEvents", Summary: "Live events as server-sent events (data: RuntimeEvent).", Status: 200, Reply: "RuntimeEvent", ReplyType: "text/event-stream",
		Query: map[string]string{"event_type": "Only these event types (repeatable, or comma-separated).", "agent": "Only this agent's events."}},
	{Method: "GET", Path: "/usage", ID: "usage", Summary: "Tokens (and the cached input tokens among them), cost and invocations in total and per agent, model or trace.", Status: 200, Reply: "Usage",
		Query: map[string]string{"group_by": "agent (default), model, trace or none.", "since": sinceDoc, "until": untilDoc}},
	{Method: "GET", Path: "/tools", ID: "tools", Summary: "The tools agents can call; with group_by, their calls, failures and latency percentiles.", Status: 200, Reply: "ToolDescriptor", ReplyArray: true, Alt: "ToolUsage",
		Query: map[string]string{"group_by": "tool or agent_tool: answer with usage rows instead of the catalogue.", "since": sinceDoc + " With group_by only.", "until": untilDoc}},
	{Method: "GET", Path: "/runtime/stats", ID: "runtimeStats", Summary: "The dashboard rollup: header counts, burn rate, rejections, error groups, tool servers, workers, budget.", Status: 200, Reply: "RuntimeStats",
		Query: map[string]string{"since": sinceDoc + " Windows the event counts, tokens, traces, rejections and error groups.", "until": untilDoc}},
	{Method: "GET", Path: "/runtime/budget", ID: "runtimeBudget", Summary: "The runtime's token budget as it stands.", Status: 200, Reply: "BudgetStatus"},
	{Method: "POST", Path: "/runtime/budget/reset", ID: "resetRuntimeBudget", Summary: "Start the runtime's token budget again from zero.", Status: 200, Reply: "BudgetStatus"},
	{Method: "GET", Path: "/healthz", ID: "healthz", Summary: "Liveness.", Status: 200, Reply: "Health", Public: true},
	{Method: "GET", Path: "/health", ID: "health", Summary: "Liveness (alias of /healthz).", Status: 200, Reply: "Health", Public: true},
	{Method: "GET", Path: "/readyz", ID: "readyz", Summary: "Readiness: 503 with a problem naming what is missing.", Status: 200, Reply: "Health", Public: true},
	{Method: "HEAD", Path: "/healthz", ID: "healthzHead", Summary: "Liveness for probes that ask with HEAD: GET's status and headers, no body.", Status: 200, Public: true},
	{Method: "HEAD", Path: "/health", ID: "healthHead", Summary: "Liveness with HEAD (alias of HEAD /healthz).", Status: 200, Public: true},
	{Method: "HEAD", Path: "/readyz", ID: "readyzHead", Summary: "Readiness for probes that ask with HEAD: GET's status (503 when not ready) and headers, no body.", Status: 200, Public: true},
	{Method: "GET", Path: "/openapi.json", ID: "openapi", Summary: "This document.", Status: 200, Reply: "", ReplyType: "application/json"},
	{Method: "GET", Path: "/metrics", ID: "metrics", Summary: "Prometheus metrics (svc serve --metrics only).", Status: 200, ReplyType: "text/plain"},
}

// errorStatuses are the problem answers every operation may give (see
// docs/api.md's error table): which ones a route gives depends on the kind.
var errorStatuses = []string{"400", "401", "403", "404", "405", "409", "413", "415", "422", "429", "500", "502", "503", "504"}

// Build returns the OpenAPI document as indented JSON. statusOf is the
// server's table of error kinds to HTTP statuses (package http/server
// owns it, and serves the document built with it): the problem body's
// "error" lists every kind, and x-svc-error-statuses gives each one's
// status.
func Build(statusOf func(svc.Kind) int) ([]byte, error) {
	schemas, err := schemas()
	if err != nil {
		return nil, err
	}
	kinds := make([]any, len(svc.Kinds))
	statuses := map[string]any{}
	var table strings.Builder
	for i, k := range svc.Kinds {
		kinds[i] = string(k)
		statuses[string(k)] = statusOf(k)
		fmt.Fprintf(&table, "\n- %s: %d", k, statusOf(k))
	}
	p := schemas["Problem"]
	p.Properties["error"] = &jsonschema.Schema{Type: "string", Enum: kinds,
		Description: "The error kind, from which a client rebuilds the typed error; each kind's HTTP status:" + table.String()}
	paths := map[string]map[string]any{}
	for _, r := range Routes {
		item := paths[r.Path]
		if item == nil {
			item = map[string]any{}
			paths[r.Path] = item
		}
		item[strings.ToLower(r.Method)] = operation(r)
	}
	doc := map[string]any{
		"openapi": "3.1.0",
		"info": map[string]any{
			"title":       "svc",
			"version":     Version,
			"description": "The HTTP API of svc, an agent runtime: run agents and groups, gather, submit and follow runs, read events and rollups. Errors are application/problem+json with the error kind in `error`.",
			"license":     map[string]any{"name": "see the repository"},
		},
		"paths": paths,
		"components": map[string]any{
			"schemas": schemas,
			"responses": map[string]any{
				"Problem": map[string]any{
					"description": "An error: the kind in `error`, the message in `detail`.",
					"content":     map[string]any{"application/problem+json": map[string]any{"schema": ref("Problem")}},
				},
			},
			"x-svc-error-statuses": statuses,
			"securitySchemes": map[string]any{
				"bearer": map[string]any{"type": "http", "scheme": "bearer", "description": "svc serve --auth-token: every route but /healthz, /health and /readyz."},
			},
		},
		"security": []any{map[string]any{"bearer": []any{}}},
	}
	// Through JSON once, to rewrite what the generator writes for a
	// pointer to a component.
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("openapi: %w", err)
	}
	var tree any
	if err := json.Unmarshal(b, &tree); err != nil {
		return nil, fmt.Errorf("openapi: %w", err)
	}
	nullableRefs(tree)
	if b, err = json.MarshalIndent(tree, "", "  "); err != nil {
		return nil, fmt.Errorf("openapi: %w", err)
	}
	return append(b, '\n'), nil
}

// nullableRefs rewrites {"type": ["null"], "$ref": R}, the generator's
// schema for a pointer to a component, as {"anyOf": [{"type": "null"},
// {"$ref": R}]}: beside a $ref, "type" would have to hold as well, and
// only null would pass.
func nullableRefs(v any) {
	switch v := v.(type) {
	case map[string]any:
		if r, ok := v["$ref"]; ok {
			if _, typed := v["type"]; typed {
				delete(v, "type")
				delete(v, "$ref")
				v["anyOf"] = []any{map[string]any{"type": "null"}, map[string]any{"$ref": r}}
			}
		}
		for _, c := range v {
			nullableRefs(c)
		}
	case []any:
		for _, c := range v {
			nullableRefs(c)
		}
	}
}

func operation(r Route) map[string]any {
	op := map[string]any{"operationId": r.ID, "summary": r.Summary}
	var params []any
	for _, name := range pathParams(r.Path) {
		params = append(params, map[string]any{"name": name, "in": "path", "required": true, "schema": str()})
	}
	for _, name := range slices.Sorted(maps.Keys(r.Query)) {
		params = append(params, map[string]any{"name": name, "in": "query", "required": false, "schema": str(), "description": r.Query[name]})
	}
	if r.Path == "/runs/{id}/stream" {
		params = append(params, map[string]any{"name": "Last-Event-ID", "in": "header", "required": false, "schema": str(), "description": "Resume after this event id."})
	}
	if r.Method == "POST" && r.Path == "/submit" {
		params = append(params, map[string]any{"name": "Idempotency-Key", "in": "header", "required": false, "schema": str(), "description": "A retried submit with the same key answers the same run_id."})
	}
	if len(params) > 0 {
		op["parameters"] = params
	}
	if r.Body != "" {
		content := map[string]any{"application/json": map[string]any{"schema": ref(r.Body)}}
		if slices.Contains(r.BodyTypes, "application/x-ndjson") {
			content["application/x-ndjson"] = map[string]any{"schema": map[string]any{"type": "string",
				"description": "One TaskSpec (components/schemas/TaskSpec) per line, read as the batch goes."}}
		}
		op["requestBody"] = map[string]any{"required": true, "content": content}
	}
	responses := map[string]any{}
	ok := map[string]any{"description": r.Summary}
	if r.Status != 204 && r.Method != "HEAD" {
		mt := r.ReplyType
		if mt == "" {
			mt = "application/json"
		}
		var schema any = map[string]any{}
		switch {
		case r.Reply == "string":
			schema = str()
		case r.Reply != "":
			schema = ref(r.Reply)
		}
		if r.ReplyArray {
			schema = map[string]any{"type": "array", "items": schema}
		}
		if r.Alt != "" {
			schema = map[string]any{"oneOf": []any{schema, ref(r.Alt)}}
		}
		if mt == "text/event-stream" || mt == "text/plain" {
			schema = map[string]any{"type": "string", "description": describeStream(r)}
		}
		if mt == "application/x-ndjson" {
			schema = map[string]any{"type": "string", "description": "One " + r.Reply + " (components/schemas/" + r.Reply + ") per line."}
		}
		content := map[string]any{mt: map[string]any{"schema": schema}}
		if r.Streams != "" {
			for _, st := range []string{"application/x-ndjson", "text/event-stream"} {
				content[st] = map[string]any{"schema": map[string]any{"type": "string",
					"description": "One " + r.Streams + " (components/schemas/" + r.Streams + ") per line or frame, as each finishes; the summary last."}}
			}
		}
		ok["content"] = content
	}
	if len(r.Headers) > 0 {
		hs := map[string]any{}
		for k, v := range r.Headers {
			hs[k] = map[string]any{"description": v, "schema": str()}
		}
		ok["headers"] = hs
	}
	responses[fmt.Sprint(r.Status)] = ok
	for _, s := range errorStatuses {
		responses[s] = map[string]any{"$ref": "#/components/responses/Problem"}
	}
	op["responses"] = responses
	if r.Public {
		op["security"] = []any{}
	}
	return op
}

func describeStream(r Route) string {
	if r.Reply == "" {
		return "Prometheus text exposition format."
	}
	return "Server-sent events: each frame's data is one " + r.Reply + " as JSON (see components/schemas/" + r.Reply + "); `: ping` comments keep the connection alive."
}

// pathParams returns the {names} of a path template in order.
func pathParams(path string) []string {
	var out []string
	for seg := range strings.SplitSeq(path, "/") {
		if strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}") {
			out = append(out, seg[1:len(seg)-1])
		}
	}
	return out
}

// The since and until of the windowed routes.
const (
	sinceDoc = "Only events at or after this time: RFC 3339, Unix milliseconds, or a duration before now (1h, 90m)."
	untilDoc = "Only events before this time: RFC 3339, Unix milliseconds, or a duration before now."
)

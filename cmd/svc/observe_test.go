package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/http/client"
)

// A real svc serve keeps its events in the SQLite event store under
// --data-dir and answers the rollup routes from it; with --metrics it
// serves the Prometheus exposition with runtime, HTTP and Go metrics.
func TestServeObservation(t *testing.T) {
	t.Parallel()
	s := startServe(t, nil, "--specs", exampleSpecs, "--metrics")
	c, err := client.New(s.url)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	res, err := c.Run(ctx, "clock", svc.TaskSpec{Input: json.RawMessage(`"time?"`), RequestID: "obs-trace-1"})
	if err != nil || !res.Success {
		t.Fatalf("run clock: %+v, %v", res, err)
	}
	if _, err := c.Run(ctx, "echo", svc.TaskSpec{Input: json.RawMessage(`"one two"`)}); err != nil {
		t.Fatal(err)
	}

	// The store emitter batches: wait until both runs are stored.
	var usage svc.Usage
	for {
		if usage, err = c.Usage(ctx, svc.GroupByAgent); err != nil {
			t.Fatal(err)
		}
		if usage.Total.Invocations == 2 || ctx.Err() != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if usage.Groups["clock"].TokensUsed != res.Metadata.TokensUsed || usage.Total.Invocations != 2 {
		t.Errorf("usage by agent = %+v, want clock's %d tokens and 2 invocations", usage, res.Metadata.TokensUsed)
	}

	tu, err := c.ToolUsage(ctx, svc.GroupByTool)
	if err != nil {
		t.Fatal(err)
	}
	if len(tu.Rows) != 1 || tu.Rows[0].Tool != "current_time" || tu.Rows[0].Calls != 1 {
		t.Errorf("tool usage = %+v, want one current_time call", tu)
	}
	tools, err := c.ListTools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, d := range tools {
		if d.Name == "current_time" && d.Source == "function" && strings.Contains(strings.Join(d.Agents, ","), "clock") {
			found = true
		}
	}
	if !found {
		t.Errorf("GET /tools = %+v, want current_time with agent clock", tools)
	}
	tree, err := c.Tree(ctx, "obs-trace-1")
	if err != nil {
		t.Fatal(err)
	}
	if tree.Root == nil || len(tree.Root.Children) != 1 || len(tree.Root.Children[0].Children) != 1 ||
		tree.Root.Children[0].Children[0].Name != "current_time" {
		t.Errorf("tree = %+v, want run → clock → current_time", tree.Root)
	}
	evs, err := c.Events(ctx, svc.EventQuery{TraceID: "obs-trace-1", EventType: svc.EventToolCallCompleted})
	if err != nil || len(evs) != 1 {
		t.Errorf("GET /events?trace_id&event_type = %d events, %v; want 1", len(evs), err)
	}
	st, err := c.RuntimeStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Header.AgentsCompleted != 2 || st.Header.ToolCalls != 1 {
		t.Errorf("runtime stats header = %+v", st.Header)
	}
	if _, err := c.Events(ctx, svc.EventQuery{Limit: svc.MaxEventLimit + 1}); svc.KindOf(err) != svc.KindSpecValidation {
		t.Errorf("limit above the maximum: %v, want a SpecValidationError (400)", err)
	}

	resp, body := get(t, s.url+"/metrics", nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", resp.StatusCode, body)
	}
	text := string(body)
	for _, want := range []string{
		"gen_ai_client_operation_duration_seconds_bucket",
		"gen_ai_client_token_usage",
		"svc_tool_calls",
		`http_server_request_duration_seconds_count{http_request_method="POST",http_response_status_code="200",http_route="/agents/{name}/run"`,
		"go_goroutines",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(text, "obs-trace-1") {
		t.Error("/metrics carries a trace id")
	}

	s.signal(t, syscall.SIGTERM)
	if code := s.wait(t, 15*time.Second); code != 0 {
		t.Errorf("exit %d", code)
	}
}

// --events none serves no rollups; a bad --events is a usage error.
func TestServeEventsFlag(t *testing.T) {
	t.Parallel()
	s := startServe(t, nil, "--specs", exampleSpecs, "--events", "none")
	if resp, _ := get(t, s.url+"/usage", nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /usage with --events none: %d, want 404", resp.StatusCode)
	}
	if resp, _ := get(t, s.url+"/metrics", nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /metrics without --metrics: %d, want 404", resp.StatusCode)
	}
	s.signal(t, syscall.SIGTERM)
	s.wait(t, 15*time.Second)

	dir := t.TempDir()
	r := svcExec(t, nil, "", "serve", "--specs", exampleSpecs, "--events", "mongodb://x", "--port", "0", "--data-dir", dir)
	if r.code != 2 || !strings.Contains(r.stderr, "--events") {
		t.Errorf("bad --events: exit %d, stderr %q; want 2 naming the flag", r.code, r.stderr)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("a refused command line left files in --data-dir: %v", entries)
	}
}

// --sse-heartbeat sets the idle heartbeat of GET /events/stream.
func TestServeSSEHeartbeatFlag(t *testing.T) {
	t.Parallel()
	s := startServe(t, nil, "--specs", exampleSpecs, "--sse-heartbeat", "100ms")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url+"/events/stream", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 4096)
	var got strings.Builder
	for !strings.Contains(got.String(), ": ping") {
		n, err := resp.Body.Read(buf)
		if err != nil {
			t.Fatalf("stream ended before a heartbeat (%v); read %q", err, got.String())
		}
		got.Write(buf[:n])
	}
	cancel()
	s.signal(t, syscall.SIGTERM)
	if code := s.wait(t, 15*time.Second); code != 0 {
		t.Errorf("exit %d", code)
	}

	r := svcExec(t, nil, "", "serve", "--specs", exampleSpecs, "--sse-queue-size", "0", "--port", "0", "--data-dir", t.TempDir())
	if r.code != 2 || !strings.Contains(r.stderr, "--sse-queue-size") {
		t.Errorf("--sse-queue-size 0: exit %d, stderr %q; want 2 naming the flag", r.code, r.stderr)
	}
}

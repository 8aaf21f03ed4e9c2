package mcpserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/app"
	"github.com/svc-dev/svc/http/mcpserver"
	"github.com/svc-dev/svc/internal/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder is the runtime's backend, remembering how each run ended.
type recorder struct {
	svc.Backend
	started chan string // each run's agent, as it starts
	mu      sync.Mutex
	ends    []error
}

func (r *recorder) Run(ctx context.Context, agent string, task svc.TaskSpec) (svc.AgentResult, error) {
	select {
	case r.started <- agent:
	default:
	}
	res, err := r.Backend.Run(ctx, agent, task)
	r.mu.Lock()
	r.ends = append(r.ends, err)
	r.mu.Unlock()
	return res, err
}

// ended returns how each run so far ended.
func (r *recorder) ended() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]error(nil), r.ends...)
}

// runtime starts the runtime of testdata/specs.
func runtime(t *testing.T) *recorder {
	t.Helper()
	a, err := app.New(app.Options{SpecsDir: "testdata/specs", NoListen: true, Store: "memory", Events: "none", Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := a.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	})
	return &recorder{Backend: a.Backend(), started: make(chan string, 16)}
}

// session connects an SDK client to the MCP server of a new runtime over
// the in-memory transport.
func session(t *testing.T) (*mcp.ClientSession, *recorder) {
	t.Helper()
	rec := runtime(t)
	ctx := context.Background()
	srv, err := mcpserver.New(ctx, rec, mcpserver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st, ct := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.Close()
		_ = ss.Wait()
	})
	return cs, rec
}

func schemaJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestToolsListedWithSchemas(t *testing.T) {
	cs, _ := session(t)
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, tool := range res.Tools {
		got[tool.Name] = schemaJSON(t, tool.InputSchema)
	}
	want := map[string]string{
		// An object input_type is the tool's schema as it is.
		"greet": `{"properties":{"text":{"type":"string"}},"required":["text"],"type":"object"}`,
		// No input_type: any value, wrapped in "input".
		"echo":   `{"properties":{"input":{}},"required":["input"],"type":"object"}`,
		"broken": `{"properties":{"input":{}},"required":["input"],"type":"object"}`,
		"slow":   `{"properties":{"input":{}},"required":["input"],"type":"object"}`,
		// A group takes its entry agent's schema.
		"group_chain": `{"properties":{"text":{"type":"string"}},"required":["text"],"type":"object"}`,
		"group_fork":  `{"properties":{"input":{}},"required":["input"],"type":"object"}`,
	}
	if len(got) != len(want) {
		t.Errorf("tools %v, want %d tools", got, len(want))
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("tool %q schema %s, want %s", name, got[name], w)
		}
	}
}

func call(t *testing.T, cs *mcp.ClientSession, name string, args any) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("call %s: %v", name, err)
	}
	return res
}

func text(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

func structured(t *testing.T, res *mcp.CallToolResult, v any) {
	t.Helper()
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("structured content %s: %v", b, err)
	}
}

func TestCallReturnsTheAgentResult(t *testing.T) {
	cs, _ := session(t)
	res := call(t, cs, "greet", map[string]any{"text": "hi"})
	if res.IsError {
		t.Fatalf("IsError: %s", text(res))
	}
	var r svc.AgentResult
	structured(t, res, &r)
	if !r.Success || r.AgentName != "greet" || string(r.Output) != `{"text":"hi"}` || r.TaskID == "" || r.Metadata.TraceID == "" {
		t.Errorf("result %+v", r)
	}
	if !strings.Contains(text(res), `"agent_name":"greet"`) {
		t.Errorf("text content %q lacks the result JSON", text(res))
	}

	// A wrapped input reaches the agent unwrapped.
	res = call(t, cs, "echo", map[string]any{"input": "plain string"})
	structured(t, res, &r)
	if res.IsError || string(r.Output) != `"plain string"` {
		t.Errorf("echo: IsError %v, output %s", res.IsError, r.Output)
	}
}

func TestCallGroup(t *testing.T) {
	cs, _ := session(t)
	res := call(t, cs, "group_chain", map[string]any{"text": "draft"})
	if res.IsError {
		t.Fatalf("IsError: %s", text(res))
	}
	var r svc.AgentResult
	structured(t, res, &r)
	// One terminal node: the plain AgentResult of its agent.
	if !r.Success || r.AgentName != "echo" || string(r.Output) != `{"text":"draft"}` {
		t.Errorf("result %+v", r)
	}
}

// A group with several terminal nodes answers with a GroupResult.
func TestCallGroupSeveralTerminals(t *testing.T) {
	cs, _ := session(t)
	res := call(t, cs, "group_fork", map[string]any{"input": "both ways"})
	if res.IsError {
		t.Fatalf("IsError: %s", text(res))
	}
	var r svc.GroupResult
	structured(t, res, &r)
	if !r.Group || !r.Success || len(r.Outputs) != 2 || string(r.Outputs["left"].Output) != `"both ways"` || string(r.Outputs["right"].Output) != `"both ways"` {
		t.Errorf("result %+v", r)
	}
}

func TestFailedRunIsToolError(t *testing.T) {
	cs, _ := session(t)
	res := call(t, cs, "broken", map[string]any{"input": "x"})
	if !res.IsError {
		t.Fatalf("IsError false: %s", text(res))
	}
	var r svc.AgentResult
	structured(t, res, &r)
	if r.Success || r.Error == nil || r.Error.Type != string(svc.KindModel) {
		t.Errorf("result %+v", r)
	}
	if !strings.Contains(text(res), "run failed: ModelError") {
		t.Errorf("text %q does not name the failure", text(res))
	}
}

func TestRefusedCallIsToolError(t *testing.T) {
	cs, _ := session(t)
	for _, tc := range []struct {
		tool string
		args any
		kind svc.Kind
	}{
		{"greet", map[string]any{"text": 7}, svc.KindSpecValidation}, // against input_type
		{"echo", map[string]any{"other": 1}, svc.KindSpecValidation}, // no "input"
	} {
		res := call(t, cs, tc.tool, tc.args)
		var p mcpserver.ErrorPayload
		structured(t, res, &p)
		if !res.IsError || p.Error.Type != string(tc.kind) || !strings.HasPrefix(text(res), string(tc.kind)+": ") {
			t.Errorf("%s %v: IsError %v, payload %+v, text %q; want %s", tc.tool, tc.args, res.IsError, p, text(res), tc.kind)
		}
	}
}

func TestCancelStopsTheRun(t *testing.T) {
	cs, rec := session(t)
	checkCancel(t, cs, rec)
}

func TestCancelStopsTheRunOverHTTP(t *testing.T) {
	cs, rec := httpSession(t)
	checkCancel(t, cs, rec)
}

// checkCancel cancels a call of the slow agent once its run is under way
// and checks that the run ends cancelled.
func checkCancel(t *testing.T, cs *mcp.ClientSession, rec *recorder) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{"input": "x"}})
		done <- err
	}()
	select {
	case <-rec.started:
	case <-time.After(30 * time.Second):
		t.Fatal("the run did not start")
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("call: %v, want context.Canceled", err)
	}
	// The client's cancellation notification reaches the server, which
	// cancels the run's context: the run ends long before its ten minutes.
	testutil.Within(t, 30*time.Second, "the run ends cancelled", func() bool {
		ends := rec.ended()
		return len(ends) == 1 && svc.KindOf(ends[0]) == svc.KindCancelled
	})
}

// httpSession connects an SDK client to Handler of a new runtime over
// streamable HTTP.
func httpSession(t *testing.T) (*mcp.ClientSession, *recorder) {
	t.Helper()
	rec := runtime(t)
	hs := httptest.NewServer(mcpserver.Handler(rec, mcpserver.Options{}))
	t.Cleanup(hs.Close)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: hs.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs, rec
}

func TestHandlerServesStreamableHTTP(t *testing.T) {
	cs, _ := httpSession(t)
	res := call(t, cs, "greet", map[string]any{"text": "over http"})
	var r svc.AgentResult
	structured(t, res, &r)
	if res.IsError || string(r.Output) != `{"text":"over http"}` {
		t.Errorf("IsError %v, result %+v", res.IsError, r)
	}
}

package app

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/internal/testutil"
	"github.com/svc-dev/svc/supervisor"
)

// TestActorSystemToolServersAndSubscribers: in the host's system, the
// process's MCP tool server actors and SSE subscriber actors are under
// its prefix too, beside the runs, and nothing of svc's is left after
// Shutdown; once the host stops its system no goroutine is left.
func TestActorSystemToolServersAndSubscribers(t *testing.T) {
	before := goleak.IgnoreCurrent()
	srv := sdk.NewServer(&sdk.Implementation{Name: "svc-test", Version: "1"}, nil)
	type echoIn struct {
		Text string `json:"text"`
	}
	sdk.AddTool(srv, &sdk.Tool{Name: "echo", Description: "echoes text", Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, _ *sdk.CallToolRequest, in echoIn) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "echo: " + in.Text}}}, nil, nil
		})
	mcpHTTP := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil))
	defer mcpHTTP.Close()

	host := supervisor.NewActorSystem(nil)
	hostActor := host.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		if s, ok := c.Message().(string); ok {
			c.Respond("host: " + s)
		}
	}))
	a, err := New(Options{NoListen: true, Store: "memory", ActorSystem: host, ActorPrefix: "embedded",
		Agents: []svc.Agent{{Name: "tooly", Model: "test:echo",
			MCPServers: []svc.MCPServer{{Name: "go", Transport: "http", URL: mcpHTTP.URL, Prefix: "go_"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	ids := func() []string {
		var out []string
		for _, m := range host.ProcessRegistry.LocalPIDs.LocalPIDs {
			out = append(out, m.Keys()...)
		}
		return out
	}
	has := func(prefix string) bool {
		for _, id := range ids() {
			if strings.HasPrefix(id, prefix) {
				return true
			}
		}
		return false
	}
	// A run of the agent starts its tool server (lazily, on first use).
	if _, err := a.Backend().Run(context.Background(), "tooly", svc.TaskSpec{Input: json.RawMessage(`"x"`)}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the MCP tool server's actor", func() bool { return has("embedded/toolservers/tooly/go-") })
	// A live /events/stream client has an SSE subscriber actor.
	web := httptest.NewServer(a.Router())
	defer web.Close()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, web.URL+"/events/stream", nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the SSE subscriber's actor", func() bool { return has("embedded/subscribers/sse-") })
	for _, id := range ids() {
		if !strings.HasPrefix(id, "embedded/") && !strings.HasPrefix(id, "future") && id != hostActor.Id && id != "eventstream" && id != "deadletter" {
			t.Errorf("actor %q: not under the embedded/ prefix", id)
		}
	}
	cancel()
	_ = res.Body.Close()
	web.Close()
	shutdown(t, a)
	for _, id := range ids() {
		if strings.HasPrefix(id, "embedded/") {
			t.Errorf("actor %s left after Shutdown", id)
		}
	}
	if got, err := host.Root.RequestFuture(hostActor, "ping", 5*time.Second).Result(); err != nil || got != "host: ping" {
		t.Fatalf("host actor after the process stopped: %v %v", got, err)
	}
	host.Shutdown()
	mcpHTTP.Close()
	goleak.VerifyNone(t, before)
}

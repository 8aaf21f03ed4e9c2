package client_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/emitters/sse"
	"github.com/svc-dev/svc/http/server"
	"github.com/svc-dev/svc/internal/testutil"
)

// liveServer is a standalone server over the fake backend whose
// /events/stream is fed by a real SSE emitter the test emits into.
func liveServer(t *testing.T) (*sse.Emitter, string) {
	t.Helper()
	live, err := sse.New(nil, sse.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = live.Close() })
	h, err := server.NewStandalone(&fakeBackend{}, server.StandaloneConfig{RouterOptions: []server.Option{server.WithSSEEmitter(live)}})
	if err != nil {
		t.Fatal(err)
	}
	return live, serve(t, h).URL
}

// emitUntil emits ev until got delivers an event, since the remote
// subscription attaches asynchronously after the stream's 200.
func emitUntil(t *testing.T, live *sse.Emitter, ev svc.RuntimeEvent, got <-chan svc.RuntimeEvent) svc.RuntimeEvent {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(20 * time.Second)
	for {
		live.Emit(ev)
		select {
		case e, ok := <-got:
			if !ok {
				t.Fatal("stream closed")
			}
			return e
		case <-tick.C:
		case <-deadline:
			t.Fatal("no event within 20s")
		}
	}
}

func TestClientSubscribe(t *testing.T) {
	live, url := liveServer(t)
	c := newClient(t, url)
	sub, err := c.Subscribe(t.Context(), svc.EventFilter{Agent: "echo"})
	if err != nil {
		t.Fatal(err)
	}
	ev := svc.RuntimeEvent{EventType: svc.EventAgentSpawned, Timestamp: time.Now().UTC(), AgentName: "echo", TraceID: "t1",
		Payload: svc.Payload{"backend": "local", "trust_level": "medium"}}
	got := emitUntil(t, live, ev, sub.Events())
	if got.EventType != ev.EventType || got.TraceID != "t1" || got.Payload["backend"] != "local" {
		t.Errorf("got %+v", got)
	}
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	for range sub.Events() { // drained and closed after Close
	}
	// The server side lets go of the subscriber once the client has gone.
	testutil.Eventually(t, "no subscriber actors after the client closed its subscription",
		func() bool { return live.Subscribers() == 0 })
}

func TestClientSubscribeReportsServerDrops(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, ": dropped 5\nid: 1\nevent: agent_spawned\ndata: {\"event_type\":\"agent_spawned\",\"agent_name\":\"a\",\"trace_id\":\"t\",\"payload\":{}}\n\n")
	})
	c := newClient(t, serve(t, h).URL)
	sub, err := c.Subscribe(t.Context(), svc.EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if ev, ok := <-sub.Events(); !ok || ev.AgentName != "a" {
		t.Fatalf("event %+v, %v", ev, ok)
	}
	if _, ok := <-sub.Events(); ok {
		t.Fatal("events after the server ended the stream")
	}
	if d := sub.Dropped(); d != 5 {
		t.Errorf("Dropped() = %d, want the server's 5", d)
	}
}

// A router over an HTTP client (a proxy in front of a remote svc) serves
// the remote server's event stream; giving it an SSE emitter as well is an
// error: the backend is the server, and the router serves one stream.
func TestRouterOverClientProxiesTheEventStream(t *testing.T) {
	live, url := liveServer(t)
	remote := newClient(t, url)
	if _, err := server.NewRouter(remote, server.WithSSEEmitter(live)); err == nil || !strings.Contains(err.Error(), "not both") {
		t.Fatalf("NewRouter(client, WithSSEEmitter) = %v, want an error", err)
	}
	proxy, err := server.NewRouter(remote)
	if err != nil {
		t.Fatal(err)
	}
	psrv := serve(t, proxy)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, psrv.URL+"/events/stream?event_type=agent_completed", nil)
	resp, err := psrv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("proxy /events/stream: %d", resp.StatusCode)
	}
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	ev := svc.RuntimeEvent{EventType: svc.EventAgentCompleted, Timestamp: time.Now().UTC(), AgentName: "echo", TraceID: "via-proxy",
		Payload: svc.Payload{"duration_ms": 1.0, "tokens_used": 2, "backend": "local", "model": "test:echo"}}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(20 * time.Second)
	for {
		live.Emit(ev)
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("proxy stream ended")
			}
			if strings.HasPrefix(l, "data: ") && strings.Contains(l, `"trace_id":"via-proxy"`) {
				return
			}
		case <-tick.C:
		case <-deadline:
			t.Fatal("the remote event never came through the proxy")
		}
	}
}

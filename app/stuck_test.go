package app

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/internal/testutil"
	"github.com/svc-dev/svc/supervisor"
	"github.com/svc-dev/svc/tools"
)

// blockingAgent is an agent whose one tool ignores its context and blocks
// until release is called (at the latest when the test ends, so goleak
// finds no goroutine left).
func blockingAgent(t *testing.T) (ag svc.Agent, entered <-chan struct{}, release func()) {
	in := make(chan struct{}, 16)
	gate := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	t.Cleanup(release)
	tool := tools.MustFunc("block", "Blocks until released.", svc.AccessRead,
		func(context.Context, struct{}) (struct{}, error) {
			in <- struct{}{}
			<-gate
			return struct{}{}, nil
		})
	ag = svc.Agent{Name: "stuck", Model: "test:echo", TrustLevel: svc.TrustHigh,
		Tools: []svc.Tool{tool}, ModelSettings: map[string]any{"call_tools": "all"}}
	return ag, in, release
}

func stuckApp(t *testing.T, timeout float64, ag svc.Agent) *App {
	t.Helper()
	a, err := New(Options{DataDir: t.TempDir(), Store: "memory", Events: "memory", Agents: []svc.Agent{ag},
		Logger: zap.NewNop(), RuntimeOptions: func(o svc.Options) svc.Options { o.TimeoutSeconds = timeout; return o }})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	return a
}

func stuckCount(t *testing.T, a *App) int {
	t.Helper()
	resp, err := httpClient.Get(a.URL() + "/runtime/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Stuck *struct {
			Count int `json:"count"`
			Calls []struct {
				Kind, Name, Reason string
			} `json:"calls"`
		} `json:"stuck"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || st.Stuck == nil {
		t.Fatalf("GET /runtime/stats: %v, stuck %v", err, st.Stuck)
	}
	if len(st.Stuck.Calls) != st.Stuck.Count {
		t.Errorf("stuck = %+v: count and calls disagree", st.Stuck)
	}
	for _, c := range st.Stuck.Calls {
		if c.Kind != "tool" || c.Name != "block" || c.Reason != "timeout" {
			t.Errorf("stuck call %+v; want tool block, timeout", c)
		}
	}
	return st.Stuck.Count
}

// Over HTTP, a run whose tool never returns is answered at its timeout
// (504, TimeoutError), and GET /runtime/stats counts the stuck call until
// it returns.
func TestHTTPRunWithStuckToolTimesOut(t *testing.T) {
	ag, _, release := blockingAgent(t)
	a := stuckApp(t, 0.5, ag)
	defer shutdown(t, a)
	t.Cleanup(release) // before the shutdown, should the test fail

	resp, err := httpClient.Post(a.URL()+"/agents/stuck/run", "application/json", strings.NewReader(`{"input":"x"}`))
	if err != nil {
		t.Fatalf("POST /agents/stuck/run: %v (the request was not answered)", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusGatewayTimeout || !strings.Contains(string(body), `"TimeoutError"`) ||
		!strings.Contains(string(body), "tool block did not return") {
		t.Fatalf("POST /agents/stuck/run = %d %s; want 504 TimeoutError naming the tool", resp.StatusCode, body)
	}
	testutil.Eventually(t, "GET /runtime/stats to count 1 stuck call", func() bool { return stuckCount(t, a) == 1 })
	release()
	testutil.Eventually(t, "GET /runtime/stats to count 0 stuck calls", func() bool { return stuckCount(t, a) == 0 })
}

// Shutdown finishes within its context although a request waits on a run
// whose tool never returns; its error names the call.
func TestShutdownWithStuckTool(t *testing.T) {
	ag, entered, release := blockingAgent(t)
	a := stuckApp(t, 300, ag)
	answered := make(chan int, 1)
	go func() {
		resp, err := httpClient.Post(a.URL()+"/agents/stuck/run", "application/json", strings.NewReader(`{"input":"x"}`))
		if err != nil {
			answered <- -1
			return
		}
		resp.Body.Close()
		answered <- resp.StatusCode
	}()
	<-entered
	if n := a.InFlight(); n.Requests != 1 || n.Runs != 1 {
		t.Errorf("InFlight = %+v; want 1 request, 1 run", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- a.Shutdown(ctx) }()
	var err error
	testutil.Eventually(t, "Shutdown to return", func() bool {
		select {
		case err = <-stopped:
			return true
		default:
			return false
		}
	})
	var se *supervisor.StuckError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "tool block (agent stuck") {
		t.Errorf("Shutdown: %v; want a StuckError naming tool block", err)
	}
	if code := <-answered; code != http.StatusServiceUnavailable && code != -1 {
		t.Errorf("the request in flight got %d; want 503 or a closed connection", code)
	}
	release()
}

package app

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/eventstore"
	"github.com/svc-dev/svc/eventstore/sqliteevents"
	"github.com/svc-dev/svc/http/client"
	"github.com/svc-dev/svc/stores/pebblestore"
	"github.com/svc-dev/svc/stores/sqlitestore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const exampleSpecs = "../examples/specs"

func shutdown(t *testing.T, a *App) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := a.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

// httpClient keeps no idle connections, so no transport goroutine outlives
// a test.
var httpClient = &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// TestServe starts the process on port 0, runs an agent and submits a run
// over HTTP, follows the SSE stream, reads the metrics, and shuts down:
// no goroutine is left (TestMain) and both stores under the data dir can
// be opened again, so the process let go of them.
func TestServe(t *testing.T) {
	dataDir := t.TempDir()
	runsDir := filepath.Join(dataDir, "runs.pebble")
	a, err := New(Options{SpecsDir: exampleSpecs, DataDir: dataDir, Store: "pebble:" + runsDir, Metrics: true,
		AuthToken: "s3cret", Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	if a.Addr() != nil || a.Router() != nil || a.Backend() != nil || a.Runtime() != nil {
		t.Fatal("accessors answer before Start")
	}
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	if a.Addr() == nil || a.Addr().(*net.TCPAddr).Port == 0 {
		t.Fatalf("Addr = %v, want the port chosen for port 0", a.Addr())
	}
	// One actor system: the runtime's run shards live in the system the
	// SSE emitter spawns its subscribers into.
	if _, ok := a.system.ProcessRegistry.GetLocal("svc/runs-0"); !ok {
		t.Error("the runtime's shards are not in the process's actor system")
	}

	c, err := client.New(a.URL(), client.WithAuthToken("s3cret"), client.WithHTTPClient(httpClient))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sub, err := c.Subscribe(ctx, svc.EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	// The stream is open on the server once its subscriber actor runs.
	for a.live.Subscribers() == 0 {
		if ctx.Err() != nil {
			t.Fatal("no SSE subscriber on the server")
		}
		time.Sleep(5 * time.Millisecond)
	}

	res, err := c.Run(svc.WithRequestID(ctx, "app-trace-1"), "echo", svc.TaskSpec{Input: json.RawMessage(`{"text":"hi"}`), RequestID: "app-trace-1"})
	if err != nil || !res.Success {
		t.Fatalf("run: %+v, %v", res, err)
	}
	seen := map[svc.EventType]bool{}
	for !seen[svc.EventAgentCompleted] {
		select {
		case ev, ok := <-sub.Events():
			if !ok {
				t.Fatal("the event stream ended")
			}
			if ev.TraceID == "app-trace-1" {
				seen[ev.EventType] = true
			}
		case <-ctx.Done():
			t.Fatalf("SSE saw %v of the run, not agent_completed", seen)
		}
	}
	if !seen[svc.EventAgentSpawned] {
		t.Errorf("SSE saw %v, want agent_spawned too", seen)
	}

	id, err := c.Submit(ctx, svc.SubmitRequest{Target: "echo", Task: svc.TaskSpec{Input: json.RawMessage(`1`)}})
	if err != nil {
		t.Fatal(err)
	}
	for {
		st, err := c.RunStatus(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if st.State == svc.RunCompleted {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}

	req, _ := http.NewRequest(http.MethodGet, a.URL()+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`http_server_request_duration_seconds_count{http_request_method="POST",http_response_status_code="200",http_route="/agents/{name}/run"`,
		`http_server_active_requests{http_request_method="GET"`,
		"gen_ai_client_operation_duration_seconds_bucket",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	// Shutdown ends the open event stream rather than waiting for it.
	shutdown(t, a)
	select {
	case _, ok := <-sub.Events():
		for ok {
			_, ok = <-sub.Events()
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the event stream outlived Shutdown")
	}
	if _, err := httpClient.Get(a.URL() + "/healthz"); err == nil {
		t.Error("the server still answers after Shutdown")
	}

	// The stores were released: Pebble holds a lock on its directory.
	runs, err := pebblestore.Open(runsDir)
	if err != nil {
		t.Fatalf("reopen the run store: %v", err)
	}
	rec, err := runs.Get(context.Background(), id)
	_ = runs.Close()
	if err != nil || rec.State != svc.RunCompleted {
		t.Errorf("submitted run after restart: %+v, %v", rec, err)
	}
	events, err := sqliteevents.Open(filepath.Join(dataDir, "events.db"), eventstore.Retention{})
	if err != nil {
		t.Fatal(err)
	}
	evs, err := events.Events(context.Background(), svc.EventQuery{TraceID: "app-trace-1"})
	_ = events.Close()
	if err != nil || len(evs) == 0 {
		t.Errorf("the event store has %d events of the run (%v); the emitter was not flushed", len(evs), err)
	}
}

// Start failures clean up what they started: a later store open succeeds
// and no goroutine is left (TestMain).
func TestStartFailures(t *testing.T) {
	t.Run("bad specs dir", func(t *testing.T) {
		dataDir := filepath.Join(t.TempDir(), "data")
		a, err := New(Options{SpecsDir: filepath.Join(t.TempDir(), "none"), DataDir: dataDir})
		if err != nil {
			t.Fatal(err)
		}
		err = a.Start()
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Option != "SpecsDir" {
			t.Fatalf("Start = %v, want a ConfigError for SpecsDir", err)
		}
		if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
			t.Errorf("a bad specs dir still created the data dir (%v)", err)
		}
		if err := a.Start(); err == nil {
			t.Error("Start after a failed Start succeeded")
		}
		shutdown(t, a)
	})
	t.Run("port in use", func(t *testing.T) {
		busy, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer busy.Close()
		runsDir := filepath.Join(t.TempDir(), "runs")
		a, err := New(Options{SpecsDir: exampleSpecs, Store: "pebble:" + runsDir, Events: "memory",
			Port: busy.Addr().(*net.TCPAddr).Port, Metrics: true, Reload: true})
		if err != nil {
			t.Fatal(err)
		}
		err = a.Start()
		var ce *ConfigError
		if err == nil || errors.As(err, &ce) || !strings.Contains(err.Error(), "listen") {
			t.Fatalf("Start = %v, want a listen error that is not a ConfigError", err)
		}
		s, err := pebblestore.Open(runsDir)
		if err != nil {
			t.Fatalf("the run store is still held after the failed Start: %v", err)
		}
		_ = s.Close()
		shutdown(t, a)
	})
	t.Run("store that does not open", func(t *testing.T) {
		a, err := New(Options{Store: "sqlite:/nonexistent/dir/runs.db", Events: "memory"})
		if err != nil {
			t.Fatal(err)
		}
		var ce *ConfigError
		if err := a.Start(); !errors.As(err, &ce) || ce.Option != "Store" {
			t.Fatalf("Start = %v, want a ConfigError for Store", err)
		}
	})
}

// Shutdown before Start, twice, and concurrently are all fine; Start after
// Shutdown is refused.
func TestShutdownIdempotent(t *testing.T) {
	a, err := New(Options{NoListen: true})
	if err != nil {
		t.Fatal(err)
	}
	shutdown(t, a)
	shutdown(t, a)
	if err := a.Start(); err == nil {
		t.Fatal("Start after Shutdown succeeded")
	}

	b, err := New(Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err == nil {
		t.Error("a second Start succeeded")
	}
	done := make(chan error, 2)
	for range 2 {
		go func() { done <- b.Shutdown(context.Background()) }()
	}
	for range 2 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
	shutdown(t, b)
}

// Without a listener the process serves in process: its Router through
// client.OverHandler, its Backend directly, with agents registered from Go
// beside those of the specs, and SQLite stores it releases.
func TestNoListen(t *testing.T) {
	dataDir := t.TempDir()
	a, err := New(Options{NoListen: true, DataDir: dataDir, Agents: []svc.Agent{{Name: "go_echo", Model: "test:echo"}},
		SpecsDir: exampleSpecs})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	if a.Addr() != nil || a.URL() != "" {
		t.Errorf("Addr = %v with NoListen", a.Addr())
	}
	local, err := client.NewLocal(client.OverHandler(a.Router()))
	if err != nil {
		t.Fatal(err)
	}
	res, err := local.Run(context.Background(), "go_echo", svc.TaskSpec{Input: json.RawMessage(`"x"`)})
	if err != nil || string(res.Output) != `"x"` {
		t.Fatalf("go_echo over the router: %+v, %v", res, err)
	}
	names, _ := a.Backend().Agents(context.Background())
	if !strings.Contains(strings.Join(names, ","), "go_echo") || !strings.Contains(strings.Join(names, ","), "echo") {
		t.Errorf("agents %v, want go_echo and the specs' agents", names)
	}
	shutdown(t, a)
	s, err := sqlitestore.Open(filepath.Join(dataDir, "runs.db"))
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
}

// New refuses bad options before anything happens, naming the field.
func TestNewChecksOptions(t *testing.T) {
	for _, tt := range []struct {
		opts   Options
		option string
	}{
		{Options{Store: "mongo://x"}, "Store"},
		{Options{Store: "memory", RunStore: sqliteStoreForTest(t)}, "Store"},
		{Options{Events: "kafka"}, "Events"},
		{Options{Port: 70000}, "Port"},
		{Options{SSEQueueSize: -1}, "SSEQueueSize"},
		{Options{Reload: true}, "Reload"},
		{Options{ReloadDirs: []string{"x"}}, "Reload"},
		{Options{SpecsDir: ".", Reload: true, ReloadExclude: []string{"[x"}}, "ReloadInclude"},
		{Options{NoListen: true, Listener: dummyListener{}}, "Listener"},
	} {
		_, err := New(tt.opts)
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Option != tt.option {
			t.Errorf("New(%+v) = %v, want a ConfigError for %s", tt.opts, err, tt.option)
		}
	}
}

func sqliteStoreForTest(t *testing.T) svc.RunStore {
	s, err := sqlitestore.Open(filepath.Join(t.TempDir(), "runs.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

type dummyListener struct{ net.Listener }

// A listener given in Options is served, and closed by Shutdown.
func TestListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(Options{Listener: ln, Store: "memory", Events: "none"})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	if a.Addr().String() != ln.Addr().String() {
		t.Errorf("Addr %v, want the listener's %v", a.Addr(), ln.Addr())
	}
	resp, err := httpClient.Get(a.URL() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("healthz %d", resp.StatusCode)
	}
	// Without an event store there are no rollup routes.
	resp, err = httpClient.Get(a.URL() + "/usage")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /usage without an event store: %d, want 404", resp.StatusCode)
	}
	shutdown(t, a)
	if _, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		t.Error("the listener is still open after Shutdown")
	}
}

// Shutdown is bounded by its context: a run that would take a minute is
// cancelled once ctx ends, Shutdown says so, and everything is released.
func TestShutdownBoundedByContext(t *testing.T) {
	a, err := New(Options{NoListen: true, Store: "memory", Events: "memory",
		Agents: []svc.Agent{{Name: "slow", Model: "test:echo", ModelSettings: map[string]any{"latency_ms": 60000}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	sub, err := a.live.Subscribe(context.Background(), svc.EventFilter{EventTypes: []svc.EventType{svc.EventAgentSpawned}})
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() {
		_, err := a.Backend().Run(context.Background(), "slow", svc.TaskSpec{Input: json.RawMessage(`1`)})
		ran <- err
	}()
	select { // the run is in flight once it has spawned
	case <-sub.Events():
	case <-time.After(10 * time.Second):
		t.Fatal("the run did not start")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = a.Shutdown(ctx)
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown = %v, want the deadline reported", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Shutdown took %v with a 300ms context", d)
	}
	select {
	case err := <-ran:
		if err == nil {
			t.Error("the run in flight succeeded; want it cancelled")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the run in flight never returned")
	}
}

// With Reload, a new spec file is served without a restart, and agents
// registered from Go stay.
func TestReload(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		p := filepath.Join(dir, "agents", name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("first.yaml", "version: 1\nname: first\nmodel: test:echo\n")
	a, err := New(Options{SpecsDir: dir, Reload: true, ReloadInterval: 20 * time.Millisecond, NoListen: true,
		Store: "memory", Events: "none", Agents: []svc.Agent{{Name: "go_agent", Model: "test:echo"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	defer shutdown(t, a)
	write("second.yaml", "version: 1\nname: second\nmodel: test:echo\n")
	deadline := time.Now().Add(10 * time.Second)
	for {
		names, _ := a.Backend().Agents(context.Background())
		if strings.Join(names, ",") == "first,go_agent,second" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("agents %v, want first, go_agent and second after the reload", names)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

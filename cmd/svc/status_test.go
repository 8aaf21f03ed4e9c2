package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/svcproc"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/internal/testutil"
)

func TestStatusLineFormat(t *testing.T) {
	t.Parallel()
	ts := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		ev   svc.RuntimeEvent
		want string
	}{
		{"agent_completed", svc.RuntimeEvent{
			EventType: svc.EventAgentCompleted, Timestamp: ts, AgentName: "echo", TaskID: "t-1", TraceID: "req-1",
			Payload: svc.Payload{"tokens_used": 3.0, "model": "test:echo", "duration_ms": 1.25, "backend": "local"},
		}, "agent_completed agent=echo task=t-1 trace=req-1 backend=local duration_ms=1.25 model=test:echo tokens_used=3"},
		{"run-level event without task", svc.RuntimeEvent{
			EventType: svc.EventGroupStarted, AgentName: "support", TraceID: "req-2",
			Payload: svc.Payload{"node_count": 3.0, "group_name": "support"},
		}, "group_started agent=support task=- trace=req-2 group_name=support node_count=3"},
		{"strings that need quotes", svc.RuntimeEvent{
			EventType: svc.EventAgentFailed, AgentName: "triage", TaskID: "t", TraceID: "r",
			Payload: svc.Payload{"error": "ModelError: provider unavailable", "reason": "", "backend": `a"b`, "dash": "-", "eq": "k=v", "nl": "a\nb"},
		}, `agent_failed agent=triage task=t trace=r backend="a\"b" dash="-" eq="k=v" error="ModelError: provider unavailable" nl="a\nb" reason=""`},
		{"lists, objects, booleans, null", svc.RuntimeEvent{
			EventType: svc.EventWorkerHeartbeat, AgentName: "rt-1", TraceID: "rt-1",
			Payload: svc.Payload{"agent_subscriptions": []any{"billing", "triage"}, "meta": map[string]any{"b": 1.0, "a": true}, "ok": false, "none": nil, "big": 1e21},
		}, `worker_heartbeat agent=rt-1 task=- trace=rt-1 agent_subscriptions=["billing","triage"] big=1e+21 meta={"a":true,"b":1} none=null ok=false`},
		{"empty event", svc.RuntimeEvent{}, "- agent=- task=- trace=-"},
		{"odd names", svc.RuntimeEvent{EventType: "x y", AgentName: "a b", Payload: svc.Payload{"": "v", "k k": "v"}},
			`"x y" agent="a b" task=- trace=- ""=v "k k"=v`},
	}
	for _, tt := range tests {
		if got := formatEvent(tt.ev); got != tt.want {
			t.Errorf("%s:\n got %s\nwant %s", tt.name, got, tt.want)
		}
	}
}

// parseStatus parses args as svc status does and returns the settings.
func parseStatus(t *testing.T, args ...string) *statusCmd {
	t.Helper()
	s := &statusCmd{}
	if err := statusCommand(s).ParseFlags(args); err != nil {
		t.Fatalf("flags %v: %v", args, err)
	}
	return s
}

func TestStatusFlags(t *testing.T) {
	t.Setenv("SVC_AUTH_TOKEN", "from-env")
	tests := []struct {
		args    []string
		wantURL string
		wantErr string
	}{
		{nil, "http://127.0.0.1:8420/events/stream", ""},
		// --url is the base URL; the stream's own URL still works.
		{[]string{"--url", "https://example.test/svc/"}, "https://example.test/svc/events/stream", ""},
		{[]string{"--url", "http://127.0.0.1:9000"}, "http://127.0.0.1:9000/events/stream", ""},
		{[]string{"--filter-event-type", "agent_spawned", "--filter-event-type", "agent_failed,tool_call_failed", "--filter-agent", "billing team"},
			"http://127.0.0.1:8420/events/stream?agent=billing+team&event_type=agent_spawned&event_type=agent_failed&event_type=tool_call_failed", ""},
		{[]string{"--url", "https://example.test/svc/events/stream?x=1", "--filter-agent", "a"},
			"https://example.test/svc/events/stream?agent=a&x=1", ""},
		{[]string{"--filter-event-type", "agent_exploded"}, "", `"agent_exploded": not an event type`},
		{[]string{"--url", "127.0.0.1:8420/events/stream"}, "", "--url"},
		{[]string{"--url", "localhost:8420/events/stream"}, "", "want an http:// or https:// URL"},
		{[]string{"--url", "ftp://host/events/stream"}, "", "want an http:// or https:// URL"},
	}
	for _, tt := range tests {
		got, err := parseStatus(t, tt.args...).streamURL()
		switch {
		case tt.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%v: error %v, want one containing %q", tt.args, err, tt.wantErr)
			}
		case err != nil:
			t.Errorf("%v: %v", tt.args, err)
		case got != tt.wantURL:
			t.Errorf("%v:\n URL %s\nwant %s", tt.args, got, tt.wantURL)
		}
	}

	if s := parseStatus(t); s.auth.token != "from-env" || s.noReconnect || s.idleTimeout != time.Minute {
		t.Errorf("defaults: token %q, no-reconnect %v, idle %v; want $SVC_AUTH_TOKEN, false, 1m", s.auth.token, s.noReconnect, s.idleTimeout)
	}
	if s := parseStatus(t, "--auth-token", "flag", "--no-reconnect"); s.auth.token != "flag" || !s.noReconnect {
		t.Errorf("--auth-token flag --no-reconnect: token %q, no-reconnect %v", s.auth.token, s.noReconnect)
	}
}

// statusRun is svc status running in this process.
type statusRun struct {
	out, errw *syncBuffer
	done      chan error
	cancel    context.CancelFunc
}

// runStatus runs s against url in a goroutine, with short backoffs.
func runStatus(t *testing.T, s *statusCmd, url string) *statusRun {
	t.Helper()
	s.url = url
	s.minBackoff, s.maxBackoff = time.Millisecond, 20*time.Millisecond
	if s.idleTimeout == 0 {
		s.idleTimeout = time.Minute
	}
	ctx, cancel := context.WithCancel(t.Context())
	r := &statusRun{out: &syncBuffer{}, errw: &syncBuffer{}, done: make(chan error, 1), cancel: cancel}
	go func() { r.done <- s.run(ctx, r.out, r.errw) }()
	t.Cleanup(func() {
		cancel()
		<-r.done
	})
	return r
}

// wait returns what run returned, failing the test if it keeps running.
func (r *statusRun) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r.done:
		r.done <- err // for the cleanup
		return err
	case <-time.After(20 * time.Second):
		t.Fatalf("svc status still running; stderr:\n%s", r.errw.String())
		return nil
	}
}

// eventData is the SSE data line of ev.
func eventData(t *testing.T, typ svc.EventType, agent, trace string) string {
	t.Helper()
	ev := svc.RuntimeEvent{EventType: typ, AgentName: agent, TaskID: "t", TraceID: trace, Payload: svc.Payload{"backend": "local"}}
	b, err := ev.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// sseServer serves handler on a loopback port for the test.
func sseServer(t *testing.T, handler func(w http.ResponseWriter, r *http.Request, conn int)) *httptest.Server {
	t.Helper()
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handler(w, r, int(conns.Add(1)))
	}))
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

func startSSE(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
}

func TestStatusPrintsEventsAndSkipsMalformed(t *testing.T) {
	t.Parallel()
	var gotAuth, gotQuery atomic.Value
	srv := sseServer(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		gotAuth.Store(r.Header.Get("Authorization"))
		gotQuery.Store(r.URL.RawQuery)
		startSSE(w)
		fmt.Fprint(w, ": ping\n\n")
		fmt.Fprintf(w, "id: 1\nevent: agent_spawned\ndata: %s\n\n", eventData(t, svc.EventAgentSpawned, "echo", "r1"))
		fmt.Fprint(w, "data: {not json\n\n")
		fmt.Fprint(w, "data: {\"no\":\"event type\"}\n\n")
		fmt.Fprint(w, "data: [1,2]\n\n")
		// CRLF line ends, and the JSON split over two data lines.
		data := eventData(t, svc.EventAgentCompleted, "echo", "r1")
		cut := strings.Index(data, `,"timestamp"`) + 1
		fmt.Fprintf(w, "id: 2\r\ndata: %s\r\ndata: %s\r\n\r\n", data[:cut], data[cut:])
		// A frame cut short by the end of the stream is dropped.
		fmt.Fprintf(w, "data: %s\n", eventData(t, svc.EventAgentFailed, "echo", "r1"))
	})
	s := parseStatus(t, "--no-reconnect", "--auth-token", "tok", "--filter-agent", "echo")
	r := runStatus(t, s, srv.URL+"/events/stream")
	if err := r.wait(t); err != nil {
		t.Fatalf("run = %v after a clean end with --no-reconnect, want nil; stderr:\n%s", err, r.errw)
	}
	want := "agent_spawned agent=echo task=t trace=r1 backend=local\nagent_completed agent=echo task=t trace=r1 backend=local\n"
	if got := r.out.String(); got != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", got, want)
	}
	if n := strings.Count(r.errw.String(), "skipped a frame"); n != 3 {
		t.Errorf("stderr reports %d skipped frames, want 3:\n%s", n, r.errw)
	}
	if gotAuth.Load() != "Bearer tok" || gotQuery.Load() != "agent=echo" {
		t.Errorf("request: Authorization %q, query %q", gotAuth.Load(), gotQuery.Load())
	}
}

// The stream ends, the next connect is refused with a 503, then it works
// again: status prints what each connection brought and keeps going.
func TestStatusReconnects(t *testing.T) {
	t.Parallel()
	srv := sseServer(t, func(w http.ResponseWriter, r *http.Request, conn int) {
		switch conn {
		case 1:
			startSSE(w)
			fmt.Fprintf(w, "data: %s\n\n", eventData(t, svc.EventAgentSpawned, "a", "first"))
		case 2:
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
		case 3:
			startSSE(w)
			fmt.Fprintf(w, "data: %s\n\n", eventData(t, svc.EventAgentSpawned, "a", "third"))
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		default:
			http.Error(w, "unexpected", http.StatusInternalServerError)
		}
	})
	r := runStatus(t, parseStatus(t), srv.URL)
	testutil.Within(t, 20*time.Second, "the event of the third connection", func() bool { return strings.Contains(r.out.String(), "trace=third") })
	r.cancel()
	if err := r.wait(t); err != nil {
		t.Errorf("run = %v after cancel, want nil", err)
	}
	lines := strings.Split(strings.TrimSpace(r.out.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "trace=first") || !strings.Contains(lines[1], "trace=third") {
		t.Errorf("stdout %q", lines)
	}
	errs := r.errw.String()
	for _, want := range []string{"the server ended the stream; reconnecting", "503 Service Unavailable: shutting down; reconnecting"} {
		if !strings.Contains(errs, want) {
			t.Errorf("stderr does not say %q:\n%s", want, errs)
		}
	}
	if n := strings.Count(errs, "connected to"); n != 2 {
		t.Errorf("%d connections reported, want 2:\n%s", n, errs)
	}
}

// Refusals are final even when reconnecting: retrying would not change
// them.
func TestStatusRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		status  int
		body    string
		ctype   string
		mention string
	}{
		{"unauthorized", 401, `{"detail":"missing bearer token"}`, "application/problem+json", "401 Unauthorized: missing bearer token"},
		{"no event stream", 404, `{"detail":"no route for GET /events/stream"}`, "application/problem+json", "no route for GET /events/stream (a server without an event stream"},
		{"bad filter", 400, `{"detail":"event_type \"x\" is not an event type"}`, "application/problem+json", `400 Bad Request: event_type "x"`},
		{"not a stream", 200, `{"status":"ok"}`, "application/json", `not an event stream`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var conns atomic.Int64
			srv := sseServer(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
				conns.Add(1)
				w.Header().Set("Content-Type", tc.ctype)
				w.WriteHeader(tc.status)
				_, _ = io.WriteString(w, tc.body)
			})
			r := runStatus(t, parseStatus(t), srv.URL)
			err := r.wait(t)
			if err == nil || !strings.Contains(err.Error(), tc.mention) {
				t.Fatalf("run = %v, want an error mentioning %q", err, tc.mention)
			}
			if n := conns.Load(); n != 1 {
				t.Errorf("%d requests, want 1: a refusal is not retried", n)
			}
		})
	}
}

func TestStatusNoReconnectFailures(t *testing.T) {
	t.Parallel()
	t.Run("connect fails", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		_ = ln.Close()
		r := runStatus(t, parseStatus(t, "--no-reconnect"), "http://"+addr+"/events/stream")
		if err := r.wait(t); err == nil || !strings.Contains(err.Error(), "connect") {
			t.Errorf("run = %v, want a connect error", err)
		}
	})
	t.Run("dropped mid-stream", func(t *testing.T) {
		t.Parallel()
		srv := sseServer(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
			startSSE(w)
			fmt.Fprintf(w, "data: %s\n\n", eventData(t, svc.EventAgentSpawned, "a", "r"))
			w.(http.Flusher).Flush()
			// Close the connection without ending the chunked body.
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				_ = conn.Close()
			}
		})
		r := runStatus(t, parseStatus(t, "--no-reconnect"), srv.URL)
		if err := r.wait(t); err == nil || !strings.Contains(err.Error(), "stream dropped") {
			t.Errorf("run = %v, want a dropped stream", err)
		}
		if !strings.Contains(r.out.String(), "trace=r") {
			t.Errorf("the event before the drop was not printed: %q", r.out)
		}
	})
	t.Run("silent stream", func(t *testing.T) {
		t.Parallel()
		srv := sseServer(t, func(w http.ResponseWriter, r *http.Request, _ int) {
			startSSE(w)
			<-r.Context().Done()
		})
		s := parseStatus(t, "--no-reconnect", "--idle-timeout", "50ms")
		r := runStatus(t, s, srv.URL)
		if err := r.wait(t); err == nil || !strings.Contains(err.Error(), "--idle-timeout 50ms") {
			t.Errorf("run = %v, want the idle timeout", err)
		}
	})
}

// statusProc is a running `svc status` process.
type statusProc struct {
	cmd            *exec.Cmd
	stdout, stderr *syncBuffer
	done           chan struct{}
	code           int
}

// startStatus starts svc status with args and the extra environment env;
// it is killed when the test ends.
func startStatus(t *testing.T, env []string, args ...string) *statusProc {
	t.Helper()
	p := &statusProc{cmd: exec.Command(svcBin, append([]string{"status"}, args...)...), stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
	p.cmd.Env = append(svcproc.Env(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		err := p.cmd.Wait()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			p.code = ee.ExitCode()
		} else if err != nil {
			p.code = -1
		}
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		checkNoRace(t, p.stderr.String())
		if t.Failed() {
			t.Logf("svc status stdout:\n%s\nstderr:\n%s", p.stdout.String(), p.stderr.String())
		}
	})
	return p
}

// waitFor polls buf until re matches at least n times.
func waitFor(t *testing.T, p *statusProc, buf *syncBuffer, re *regexp.Regexp, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for len(re.FindAllString(buf.String(), -1)) < n {
		select {
		case <-p.done:
			t.Fatalf("svc status exited with %d before %d× %s", p.code, n, re)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %d× %s within 30s", n, re)
		}
	}
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

// runEcho runs the echo agent over HTTP with trace id trace.
func runEcho(t *testing.T, url, trace string) {
	t.Helper()
	resp, body := do(t, context.Background(), http.MethodPost, url+"/agents/echo/run", `{"input":1}`, map[string]string{"X-Request-Id": trace})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("run echo: status %d: %s", resp.StatusCode, body)
	}
}

// svc status follows a real svc serve, through a restart of the server on
// the same port.
func TestStatusFollowsServeAcrossRestart(t *testing.T) {
	t.Parallel()
	port := freePort(t)
	s1 := startServe(t, nil, "--specs", exampleSpecs, "--port", port)
	st := startStatus(t, nil, "--url", "http://127.0.0.1:"+port+"/events/stream",
		"--filter-event-type", "agent_spawned", "--filter-event-type", "agent_completed", "--filter-agent", "echo")
	connected := regexp.MustCompile(`connected to http://127\.0\.0\.1:` + port + `/events/stream\?`)
	waitFor(t, st, st.stderr, connected, 1)

	runEcho(t, s1.url, "req-before-restart")
	// Another agent's events are filtered out by the server.
	if resp, body := do(t, context.Background(), http.MethodPost, s1.url+"/agents/resilient/run", `{"input":"x"}`, map[string]string{"X-Request-Id": "req-other"}); resp.StatusCode != http.StatusOK {
		t.Fatalf("run resilient: %d %s", resp.StatusCode, body)
	}
	line := func(typ, trace string) *regexp.Regexp {
		return regexp.MustCompile(`(?m)^` + typ + ` agent=echo task=\S+ trace=` + trace + ` backend=local `)
	}
	waitFor(t, st, st.stdout, line("agent_spawned", "req-before-restart"), 1)
	waitFor(t, st, st.stdout, line("agent_completed", "req-before-restart"), 1)

	s1.signal(t, syscall.SIGTERM)
	if code := s1.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("the first server exited with %d", code)
	}
	waitFor(t, st, st.stderr, regexp.MustCompile(`reconnecting in`), 1)
	s2 := startServe(t, nil, "--specs", exampleSpecs, "--port", port)
	waitFor(t, st, st.stderr, connected, 2)

	runEcho(t, s2.url, "req-after-restart")
	waitFor(t, st, st.stdout, line("agent_spawned", "req-after-restart"), 1)
	waitFor(t, st, st.stdout, line("agent_completed", "req-after-restart"), 1)

	if err := st.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-st.done:
	case <-time.After(20 * time.Second):
		t.Fatal("svc status did not stop on SIGINT")
	}
	if st.code != 0 {
		t.Errorf("svc status exited with %d after SIGINT, want 0", st.code)
	}
	lines := strings.Split(strings.TrimSpace(st.stdout.String()), "\n")
	if len(lines) != 4 {
		t.Errorf("%d lines, want agent_spawned and agent_completed before and after the restart:\n%s", len(lines), st.stdout.String())
	}
	for _, l := range lines {
		if !regexp.MustCompile(`^agent_(spawned|completed) agent=echo `).MatchString(l) {
			t.Errorf("a line the filters should have kept out: %s", l)
		}
	}
	s2.signal(t, syscall.SIGINT)
	if code := s2.wait(t, 20*time.Second); code != 0 {
		t.Errorf("the second server exited with %d", code)
	}
}

func TestStatusCLIExitCodes(t *testing.T) {
	t.Parallel()
	port := freePort(t)
	r := svcExec(t, nil, "", "status", "--no-reconnect", "--url", "http://127.0.0.1:"+port+"/events/stream")
	if r.code != 1 || !strings.Contains(r.stderr, "connect") {
		t.Errorf("nothing listening, --no-reconnect: exit %d, stderr %q; want 1 and the connect error", r.code, r.stderr)
	}
	r = svcExec(t, nil, "", "status", "--filter-event-type", "agent_exploded")
	if r.code != 2 || !strings.Contains(r.stderr, "agent_exploded") {
		t.Errorf("unknown event type: exit %d, stderr %q; want 2", r.code, r.stderr)
	}
	s := startServe(t, nil, "--specs", exampleSpecs, "--auth-token", "secret")
	r = svcExec(t, nil, "", "status", "--url", s.url+"/events/stream")
	if r.code != 1 || !strings.Contains(r.stderr, "401") {
		t.Errorf("without the token: exit %d, stderr %q; want 1 and the 401, without retrying", r.code, r.stderr)
	}
	// With the token from the environment it connects; the server's
	// shutdown then ends the stream cleanly: exit 0 with --no-reconnect.
	st := startStatus(t, []string{"SVC_AUTH_TOKEN=secret"}, "--no-reconnect", "--url", s.url+"/events/stream")
	waitFor(t, st, st.stderr, regexp.MustCompile(`connected to`), 1)
	s.signal(t, syscall.SIGTERM)
	select {
	case <-st.done:
	case <-time.After(20 * time.Second):
		t.Fatal("svc status --no-reconnect kept running after the server shut down")
	}
	if st.code != 0 {
		t.Errorf("exit %d after the server ended the stream, want 0; stderr:\n%s", st.code, st.stderr.String())
	}
}

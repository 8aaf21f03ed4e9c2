package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/internal/testutil"
)

// do sends one request and returns the response with its body read.
func do(t *testing.T, ctx context.Context, method, url, body string, header map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, url, err)
	}
	return resp, b
}

func get(t *testing.T, url string, header map[string]string) (*http.Response, []byte) {
	t.Helper()
	return do(t, context.Background(), http.MethodGet, url, "", header)
}

// problem is the problem+json error body of docs/api.md.
type problem struct {
	Type      string `json:"type"`
	Title     string `json:"title"`
	Status    int    `json:"status"`
	Detail    string `json:"detail"`
	Error     string `json:"error"`
	Message   string `json:"message"`
	RequestID string `json:"request_id"`
	Agent     string `json:"agent"`
	TaskID    string `json:"task_id"`
}

func decodeProblem(t *testing.T, resp *http.Response, body []byte, status int) problem {
	t.Helper()
	if resp.StatusCode != status {
		t.Fatalf("status %d, want %d; body %s", resp.StatusCode, status, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type %q, want application/problem+json", ct)
	}
	var p problem
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("problem body: %v: %s", err, body)
	}
	if p.Status != status || p.Error == "" || p.Message == "" || p.RequestID == "" {
		t.Errorf("incomplete problem: %+v", p)
	}
	if rid := resp.Header.Get("X-Request-Id"); rid != p.RequestID {
		t.Errorf("request_id %q, X-Request-Id %q: want the same", p.RequestID, rid)
	}
	return p
}

func TestServeExamples(t *testing.T) {
	t.Parallel()
	s := startServe(t, nil, "--specs", exampleSpecs, "--max-body-bytes", "4096")

	t.Run("healthz", func(t *testing.T) {
		resp, body := get(t, s.url+"/healthz", nil)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("status %d: %s", resp.StatusCode, body)
		}
	})
	t.Run("agents", func(t *testing.T) {
		resp, body := get(t, s.url+"/agents", nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		var names []string
		if err := json.Unmarshal(body, &names); err != nil {
			t.Fatalf("%v: %s", err, body)
		}
		if want := exampleNames(t, "agents"); !slices.Equal(names, want) {
			t.Errorf("agents %v, want %v", names, want)
		}
	})
	t.Run("groups", func(t *testing.T) {
		resp, body := get(t, s.url+"/groups", nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		var names []string
		if err := json.Unmarshal(body, &names); err != nil {
			t.Fatalf("%v: %s", err, body)
		}
		if want := exampleNames(t, "groups"); !slices.Equal(names, want) {
			t.Errorf("groups %v, want %v", names, want)
		}
	})
	t.Run("run over HTTP", func(t *testing.T) {
		resp, body := do(t, context.Background(), http.MethodPost, s.url+"/agents/echo/run", `{"input":{"x":[1,2]}}`,
			map[string]string{"X-Request-Id": "req-echo-1"})
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		if got := resp.Header.Get("X-Request-Id"); got != "req-echo-1" {
			t.Errorf("X-Request-Id %q, want it echoed", got)
		}
		res := decodeResult(t, string(body))
		if !res.Success || compactJSON(t, res.Output) != `{"x":[1,2]}` || res.Metadata.TraceID != "req-echo-1" {
			t.Errorf("result %+v", res)
		}
	})
	t.Run("svc run --url", func(t *testing.T) {
		r := svcExec(t, nil, "", "run", "echo", "--url", s.url, "--input", "1", "--request-id", "req-cli-1")
		if r.code != 0 {
			t.Fatalf("exit %d; stderr: %s", r.code, r.stderr)
		}
		res := decodeResult(t, r.stdout)
		if !res.Success || string(res.Output) != "1" || res.Metadata.TraceID != "req-cli-1" {
			t.Errorf("result %+v", res)
		}
		r = svcExec(t, nil, "", "run", "resilient", "--url", s.url, "--input", `"x"`)
		if res := decodeResult(t, r.stdout); r.code != 0 || res.Metadata.Model != "test:echo" {
			t.Errorf("resilient over HTTP: exit %d, metadata %+v", r.code, res.Metadata)
		}
	})
	t.Run("svc run --url refused", func(t *testing.T) {
		r := svcExec(t, nil, "", "run", "nope", "--url", s.url, "--input", "1")
		if r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, "nope") {
			t.Errorf("exit %d, stdout %q, stderr %q; want 1, nothing, a message naming the agent", r.code, r.stdout, r.stderr)
		}
	})
	t.Run("unknown agent", func(t *testing.T) {
		resp, body := do(t, context.Background(), http.MethodPost, s.url+"/agents/nope/run", `{"input":1}`, nil)
		if p := decodeProblem(t, resp, body, http.StatusNotFound); p.Error != string(svc.KindRegistry) {
			t.Errorf("error %q, want RegistryError", p.Error)
		}
	})
	t.Run("max body bytes", func(t *testing.T) {
		big := `{"input":"` + strings.Repeat("a", 8192) + `"}`
		resp, body := do(t, context.Background(), http.MethodPost, s.url+"/agents/echo/run", big, nil)
		if p := decodeProblem(t, resp, body, http.StatusRequestEntityTooLarge); p.Error != string(svc.KindPayloadTooLarge) {
			t.Errorf("error %q, want PayloadTooLargeError", p.Error)
		}
	})

	s.signal(t, syscall.SIGINT)
	if code := s.wait(t, 15*time.Second); code != 0 {
		t.Errorf("exit %d after SIGINT, want 0", code)
	}
	if !strings.Contains(s.stderr.String(), "svc stopped") {
		t.Errorf("no \"svc stopped\" in the log:\n%s", s.stderr.String())
	}
}

func TestServeAuth(t *testing.T) {
	t.Parallel()
	s := startServe(t, nil, "--specs", exampleSpecs, "--auth-token", "secret", "--log-format", "json")
	bearer := func(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }

	for name, hdr := range map[string]map[string]string{"no token": nil, "wrong token": bearer("guess"), "not bearer": {"Authorization": "Basic c2VjcmV0"}} {
		t.Run(name, func(t *testing.T) {
			resp, body := get(t, s.url+"/agents", hdr)
			decodeProblem(t, resp, body, http.StatusUnauthorized)
			if h := resp.Header.Get("WWW-Authenticate"); !strings.HasPrefix(h, "Bearer") {
				t.Errorf("WWW-Authenticate %q, want a Bearer challenge", h)
			}
			if bytes.Contains(body, []byte("secret")) {
				t.Errorf("the 401 body leaks the token: %s", body)
			}
		})
	}
	t.Run("with token", func(t *testing.T) {
		resp, body := get(t, s.url+"/agents", bearer("secret"))
		if resp.StatusCode != http.StatusOK {
			t.Errorf("status %d: %s", resp.StatusCode, body)
		}
	})
	t.Run("healthz stays open", func(t *testing.T) {
		resp, body := get(t, s.url+"/healthz", nil)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("status %d: %s", resp.StatusCode, body)
		}
	})
	t.Run("svc run with --auth-token", func(t *testing.T) {
		r := svcExec(t, nil, "", "run", "echo", "--url", s.url, "--auth-token", "secret", "--input", `{"k":"v"}`)
		if r.code != 0 {
			t.Fatalf("exit %d; stderr: %s", r.code, r.stderr)
		}
		if res := decodeResult(t, r.stdout); !res.Success || compactJSON(t, res.Output) != `{"k":"v"}` {
			t.Errorf("result %+v", res)
		}
	})
	t.Run("svc run with SVC_AUTH_TOKEN", func(t *testing.T) {
		r := svcExec(t, []string{"SVC_AUTH_TOKEN=secret"}, "", "run", "echo", "--url", s.url, "--input", "2")
		if r.code != 0 {
			t.Fatalf("exit %d; stderr: %s", r.code, r.stderr)
		}
	})
	t.Run("svc run without token", func(t *testing.T) {
		r := svcExec(t, nil, "", "run", "echo", "--url", s.url, "--input", "2")
		if r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, "bearer token") {
			t.Errorf("exit %d, stdout %q, stderr %q; want 1, no result, a message about the token", r.code, r.stdout, r.stderr)
		}
	})
	if strings.Contains(s.stderr.String(), "secret") {
		t.Errorf("the server log contains the token:\n%s", s.stderr.String())
	}
}

func TestServeAuthFromEnv(t *testing.T) {
	t.Parallel()
	s := startServe(t, []string{"SVC_AUTH_TOKEN=from-env"}, "--specs", exampleSpecs)
	if resp, body := get(t, s.url+"/agents", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("no token: status %d, want 401: %s", resp.StatusCode, body)
	}
	if resp, body := get(t, s.url+"/agents", map[string]string{"Authorization": "Bearer from-env"}); resp.StatusCode != http.StatusOK {
		t.Errorf("token from SVC_AUTH_TOKEN: status %d, want 200: %s", resp.StatusCode, body)
	}
}

// spawned matches the log line of a run of the slow agent having started.
var spawned = regexp.MustCompile(`agent_spawned.*"agent": ?"slow"`)

func TestServeGracefulShutdown(t *testing.T) {
	t.Parallel()
	dir := writeSpecs(t, map[string]string{
		"agents/slow.yaml": "version: 1\nname: slow\nmodel: test:echo\nmodel_settings: {latency_ms: 1500}\n",
	})
	s := startServe(t, nil, "--specs", dir, "--shutdown-grace", "20s")

	type reply struct {
		status int
		body   []byte
		err    error
	}
	replies := make(chan reply, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, s.url+"/agents/slow/run", strings.NewReader(`{"input":"in flight"}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := httpClient.Do(req)
		if err != nil {
			replies <- reply{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		replies <- reply{status: resp.StatusCode, body: b, err: err}
	}()
	// The run has started (and its model is sleeping) once it is logged.
	s.waitLog(t, spawned, 10*time.Second)
	s.signal(t, syscall.SIGTERM)

	var r reply
	select {
	case r = <-replies:
	case <-time.After(20 * time.Second):
		t.Fatal("the request in flight did not complete")
	}
	if r.err != nil {
		t.Fatalf("request in flight: %v", r.err)
	}
	if r.status != http.StatusOK {
		t.Fatalf("status %d, want 200: %s", r.status, r.body)
	}
	if res := decodeResult(t, string(r.body)); !res.Success || string(res.Output) != `"in flight"` {
		t.Errorf("result %+v", res)
	}
	if code := s.wait(t, 20*time.Second); code != 0 {
		t.Errorf("exit %d, want 0", code)
	}
	log := s.stderr.String()
	if i, j := strings.Index(log, "svc shutting down"), strings.Index(log, "svc stopped"); i < 0 || j < i {
		t.Errorf("log lacks \"svc shutting down\" then \"svc stopped\":\n%s", log)
	}
}

func TestServeGraceExpires(t *testing.T) {
	t.Parallel()
	dir := writeSpecs(t, map[string]string{
		"agents/slow.yaml": "version: 1\nname: slow\nmodel: test:echo\nmodel_settings: {latency_ms: 60000}\n",
	})
	s := startServe(t, nil, "--specs", dir, "--shutdown-grace", "300ms")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	replied := make(chan struct{})
	go func() {
		defer close(replied)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/agents/slow/run", strings.NewReader(`{"input":1}`))
		req.Header.Set("Content-Type", "application/json")
		if resp, err := httpClient.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	s.waitLog(t, spawned, 10*time.Second)
	s.signal(t, syscall.SIGTERM)
	// The model would sleep a minute; the grace period ends it long before.
	if code := s.wait(t, 20*time.Second); code != 1 {
		t.Errorf("exit %d, want 1 when requests outlive the grace period", code)
	}
	if !strings.Contains(s.stderr.String(), "--shutdown-grace 300ms") {
		t.Errorf("stderr does not say the grace period ran out:\n%s", s.stderr.String())
	}
	select {
	case <-replied:
	case <-time.After(10 * time.Second):
		t.Error("the request in flight was left hanging after the server exited")
	}
}

func TestServeSecondSignalKills(t *testing.T) {
	t.Parallel()
	dir := writeSpecs(t, map[string]string{
		"agents/slow.yaml": "version: 1\nname: slow\nmodel: test:echo\nmodel_settings: {latency_ms: 60000}\n",
	})
	s := startServe(t, nil, "--specs", dir, "--shutdown-grace", "60s")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	replied := make(chan struct{})
	go func() {
		defer close(replied)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/agents/slow/run", strings.NewReader(`{"input":1}`))
		req.Header.Set("Content-Type", "application/json")
		if resp, err := httpClient.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	s.waitLog(t, spawned, 10*time.Second)
	s.signal(t, syscall.SIGTERM)
	s.waitLog(t, regexp.MustCompile("svc shutting down"), 10*time.Second)
	// An operator who does not want to wait out the grace period signals
	// again: the process ends at once instead of a minute later.
	s.signal(t, syscall.SIGTERM)
	if code := s.wait(t, 20*time.Second); code == 0 {
		t.Errorf("exit 0 after a second signal with a request in flight")
	}
	cancel()
	<-replied
}

func TestServeOptionFlagsOverrideRuntimeYAML(t *testing.T) {
	t.Parallel()
	dir := writeSpecs(t, map[string]string{
		"runtime.yaml":     "version: 1\ntimeout_seconds: 60\nmax_spawn_depth: 7\nretry_max_attempts: 3\ntoken_budget: 100\nmax_tokens_per_run: 50\n",
		"agents/slow.yaml": "version: 1\nname: slow\nmodel: test:echo\nmodel_settings: {latency_ms: 2000}\n",
		"agents/fast.yaml": "version: 1\nname: fast\nmodel: test:echo\n",
	})
	s := startServe(t, nil, "--specs", dir, "--timeout-seconds", "0.2", "--retry-max-attempts", "1", "--token-budget", "100000")

	// Flags replace only the options they name; runtime.yaml gives the rest.
	for _, want := range []string{"timeout_seconds=0.2 max_spawn_depth=7 retry_max_attempts=1 ", "token_budget=100000 max_tokens_per_run=50 "} {
		if !strings.Contains(s.stderr.String(), want) {
			t.Errorf("the serving log does not show options %q:\n%s", want, s.stderr.String())
		}
	}
	resp, body := do(t, context.Background(), http.MethodPost, s.url+"/agents/slow/run", `{"input":1}`, nil)
	p := decodeProblem(t, resp, body, http.StatusGatewayTimeout)
	if p.Error != string(svc.KindTimeout) || p.Agent != "slow" {
		t.Errorf("problem %+v, want a TimeoutError of agent slow", p)
	}
	if resp, body := do(t, context.Background(), http.MethodPost, s.url+"/agents/fast/run", `{"input":1}`, nil); resp.StatusCode != http.StatusOK {
		t.Errorf("fast agent: status %d: %s", resp.StatusCode, body)
	}
	r := svcExec(t, nil, "", "run", "slow", "--url", s.url, "--input", "1")
	if r.code != 1 || !strings.Contains(r.stderr, "timed out") {
		t.Errorf("svc run --url on a timeout: exit %d, stderr %q; want 1 and the timeout", r.code, r.stderr)
	}
}

func TestServeRuntimeYAMLApplies(t *testing.T) {
	t.Parallel()
	dir := writeSpecs(t, map[string]string{
		"runtime.yaml":     "version: 1\ntimeout_seconds: 0.2\n",
		"agents/slow.yaml": "version: 1\nname: slow\nmodel: test:echo\nmodel_settings: {latency_ms: 2000}\n",
	})
	s := startServe(t, nil, "--specs", dir)
	resp, body := do(t, context.Background(), http.MethodPost, s.url+"/agents/slow/run", `{"input":1}`, nil)
	if p := decodeProblem(t, resp, body, http.StatusGatewayTimeout); p.Error != string(svc.KindTimeout) {
		t.Errorf("problem %+v, want a TimeoutError from runtime.yaml's timeout", p)
	}
}

func TestServeStartupErrors(t *testing.T) {
	t.Parallel()
	badDir := writeSpecs(t, map[string]string{
		"agents/ok.yaml":  "version: 1\nname: ok\nmodel: test:echo\n",
		"agents/bad.yaml": "version: 1\nname: bad\nmodel: test:echo\n\nunknown_field: true\n",
	})
	badGroup := writeSpecs(t, map[string]string{
		"agents/ok.yaml":  "version: 1\nname: ok\nmodel: test:echo\n",
		"groups/bad.yaml": "version: 1\nnodes:\n  a: {agent: ok}\n  b: {agent: missing}\n",
	})
	badRuntime := writeSpecs(t, map[string]string{
		"runtime.yaml":   "version: 1\nretry_max_attempts: 0\n",
		"agents/ok.yaml": "version: 1\nname: ok\nmodel: test:echo\n",
	})
	// A port taken by this test: serve cannot listen on it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() }) // the subtests run after this function returns
	busy := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)

	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStderr string
	}{
		{"bad agent file", []string{"--specs", badDir}, 2, filepath.Join(badDir, "agents", "bad.yaml") + ":5"},
		{"bad runtime.yaml", []string{"--specs", badRuntime}, 2, filepath.Join(badRuntime, "runtime.yaml") + ":2"},
		{"bad group file", []string{"--specs", badGroup}, 2, filepath.Join(badGroup, "groups", "bad.yaml") + `:4: nodes.b.agent: unknown agent "missing"`},
		{"reload flag without --reload", []string{"--specs", exampleSpecs, "--reload-dir", "x"}, 2, "--reload-dir needs --reload"},
		{"bad reload glob", []string{"--specs", exampleSpecs, "--reload", "--reload-exclude", "[x"}, 2, `"[x"`},
		{"missing specs dir", []string{"--specs", filepath.Join(t.TempDir(), "none")}, 2, "none"},
		{"bad option flag", []string{"--specs", exampleSpecs, "--retry-backoff-factor", "0.5"}, 2, "retry_backoff_factor"},
		{"bad flag value", []string{"--specs", exampleSpecs, "--shutdown-grace", "soon"}, 2, "--shutdown-grace"},
		{"bad log format", []string{"--specs", exampleSpecs, "--log-format", "xml"}, 2, "--log-format"},
		{"stray argument", []string{"--specs", exampleSpecs, "extra"}, 2, "extra"},
		{"port in use", []string{"--specs", exampleSpecs, "--port", busy}, 1, "listen"},
		{"bad store", []string{"--specs", exampleSpecs, "--store", "mongo://x"}, 2, "--store"},
		{"store path missing", []string{"--specs", exampleSpecs, "--store", "sqlite:/nonexistent/dir/runs.db"}, 2, "/nonexistent/dir"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := svcExec(t, nil, "", append([]string{"serve", "--host", "127.0.0.1", "--port", "0", "--data-dir", t.TempDir()}, tt.args...)...)
			if r.code != tt.wantCode {
				t.Errorf("exit %d, want %d; stderr:\n%s", r.code, tt.wantCode, r.stderr)
			}
			if !strings.Contains(r.stderr, tt.wantStderr) {
				t.Errorf("stderr does not mention %q:\n%s", tt.wantStderr, r.stderr)
			}
			if strings.Contains(r.stderr, "svc serving") {
				t.Errorf("serve started anyway:\n%s", r.stderr)
			}
		})
	}
}

// runOutput runs agent over HTTP and returns its output as compact JSON.
func runOutput(t *testing.T, url, agent string) string {
	t.Helper()
	resp, body := do(t, context.Background(), http.MethodPost, url+"/agents/"+agent+"/run", `{"input":1}`, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("run %s: status %d: %s", agent, resp.StatusCode, body)
	}
	return compactJSON(t, decodeResult(t, string(body)).Output)
}

func TestServeReload(t *testing.T) {
	t.Parallel()
	fixed := func(out string) string {
		return "version: 1\nname: fixed\nmodel: test:echo\nmodel_settings: {output: " + out + "}\n"
	}
	dir := writeSpecs(t, map[string]string{
		"agents/fixed.yaml": fixed(`"one"`),
		"agents/slow.yaml":  "version: 1\nname: slow\nmodel: test:echo\nmodel_settings: {latency_ms: 1500, output: old}\n",
	})
	s := startServe(t, nil, "--specs", dir, "--reload")
	if got := runOutput(t, s.url, "fixed"); got != `"one"` {
		t.Fatalf("output %s before any change", got)
	}

	// A run in flight keeps the definition it started with.
	slowOut := make(chan string, 1)
	go func() {
		resp, err := httpClient.Post(s.url+"/agents/slow/run", "application/json", strings.NewReader(`{"input":1}`))
		if err != nil {
			slowOut <- err.Error()
			return
		}
		defer resp.Body.Close()
		var res svc.AgentResult
		if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
			slowOut <- err.Error()
			return
		}
		slowOut <- string(res.Output)
	}()
	s.waitLog(t, spawned, 10*time.Second)

	agentFile := filepath.Join(dir, "agents", "fixed.yaml")
	writeFile(t, agentFile, fixed(`"two"`))
	writeFile(t, filepath.Join(dir, "agents", "slow.yaml"), "version: 1\nname: slow\nmodel: test:echo\nmodel_settings: {output: new}\n")
	testutil.Eventually(t, "the new output", func() bool { return runOutput(t, s.url, "fixed") == `"two"` })
	s.waitLog(t, regexp.MustCompile(`specs reloaded.*"agents": 2.*"groups": 0`), 5*time.Second)
	if got := <-slowOut; got != `"old"` {
		t.Errorf("the run in flight during the reload answered %s, want its starting definition's \"old\"", got)
	}
	if got := runOutput(t, s.url, "slow"); got != `"new"` {
		t.Errorf("slow after the reload: %s", got)
	}

	// A group appears.
	writeFile(t, filepath.Join(dir, "groups", "pipe.yaml"), "version: 1\nnodes: {a: {agent: fixed}, b: {agent: slow}}\nedges: [{from: a, to: b}]\n")
	testutil.Eventually(t, "the new group", func() bool {
		_, body := get(t, s.url+"/groups", nil)
		return strings.TrimSpace(string(body)) == `["pipe"]`
	})

	// A broken agent file: the error with its file and line is logged, and
	// the previous definitions keep serving.
	writeFile(t, agentFile, "version: 1\nname: fixed\nmodel: test:echo\n\nmodel_setings: {output: three}\n")
	s.waitLog(t, regexp.MustCompile(`(?s)ERROR.*specs reload failed.*`+regexp.QuoteMeta(agentFile+":5: model_setings")), 10*time.Second)
	if got := runOutput(t, s.url, "fixed"); got != `"two"` {
		t.Errorf("after a bad change: output %s, want the previous definition's \"two\"", got)
	}
	// So does a group whose topology is wrong.
	groupFile := filepath.Join(dir, "groups", "pipe.yaml")
	writeFile(t, groupFile, "version: 1\nnodes: {a: {agent: fixed}, b: {agent: slow}}\nedges:\n  - {from: a, to: c}\n")
	s.waitLog(t, regexp.MustCompile(regexp.QuoteMeta(groupFile+`:4: edges[0].to: unknown node \"c\"`)), 10*time.Second)
	if _, body := get(t, s.url+"/groups", nil); strings.TrimSpace(string(body)) != `["pipe"]` {
		t.Errorf("groups after a bad change: %s", body)
	}

	s.signal(t, syscall.SIGINT)
	if code := s.wait(t, 15*time.Second); code != 0 {
		t.Errorf("exit %d after SIGINT, want 0", code)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

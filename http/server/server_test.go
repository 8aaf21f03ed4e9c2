package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/http/server"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serve starts h on a loopback listener for the test's lifetime.
func serve(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &httptest.Server{Listener: l, Config: &http.Server{Handler: h}}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// newRouter serves a router over a fresh fake and returns both.
func newRouter(t *testing.T, opts ...server.Option) (*httptest.Server, *fakeBackend) {
	t.Helper()
	f := &fakeBackend{}
	rt, err := server.NewRouter(f, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, rt), f
}

type reply struct {
	status int
	header http.Header
	body   []byte
}

func do(t *testing.T, srv *httptest.Server, method, path, body string, hdr ...string) reply {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		// What every JSON client sends; a test of the media type check
		// overrides it through hdr.
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{resp.StatusCode, resp.Header, b}
}

// problem decodes a problem+json reply and checks the members every problem
// must have.
func problem(t *testing.T, r reply, wantStatus int) server.Problem {
	t.Helper()
	if r.status != wantStatus {
		t.Fatalf("status = %d, want %d; body %s", r.status, wantStatus, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type = %q, want application/problem+json", ct)
	}
	var raw map[string]any
	if err := json.Unmarshal(r.body, &raw); err != nil {
		t.Fatalf("problem body %s: %v", r.body, err)
	}
	for _, k := range []string{"type", "title", "status", "detail", "error", "message", "request_id"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("problem lacks %q: %s", k, r.body)
		}
	}
	var p server.Problem
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatal(err)
	}
	if p.Status != wantStatus || p.Title != http.StatusText(wantStatus) {
		t.Errorf("status/title = %d %q, want %d %q", p.Status, p.Title, wantStatus, http.StatusText(wantStatus))
	}
	if p.Type != "urn:svc:error:"+p.Error {
		t.Errorf("type = %q, want urn:svc:error:%s", p.Type, p.Error)
	}
	if p.Message != p.Detail || p.Detail == "" {
		t.Errorf("detail %q / message %q: want equal and non-empty", p.Detail, p.Message)
	}
	if wantStatus == http.StatusServiceUnavailable && r.header.Get("Retry-After") != "5" {
		t.Errorf("503 without Retry-After: 5 (got %q)", r.header.Get("Retry-After"))
	}
	return p
}

func TestRoutes(t *testing.T) {
	srv, f := newRouter(t)

	r := do(t, srv, "GET", "/agents", "")
	var names []string
	if r.status != 200 || json.Unmarshal(r.body, &names) != nil || strings.Join(names, ",") != strings.Join(fakeAgents, ",") {
		t.Fatalf("GET /agents = %d %s", r.status, r.body)
	}

	r = do(t, srv, "GET", "/agents/echo/schema", "")
	var s svc.AgentSchema
	if r.status != 200 || json.Unmarshal(r.body, &s) != nil || s.Name != "echo" || string(s.Input) != "{}" {
		t.Fatalf("GET schema = %d %s", r.status, r.body)
	}
	p := problem(t, do(t, srv, "GET", "/agents/nope/schema", ""), 404)
	if p.Error != "RegistryError" || p.Agent != "nope" {
		t.Errorf("schema of nope: %+v", p)
	}

	r = do(t, srv, "POST", "/agents/echo/run", `{"id":"t1","input":{"a":[1,2]},"metadata":{"k":"v"}}`)
	var res svc.AgentResult
	if r.status != 200 || json.Unmarshal(r.body, &res) != nil {
		t.Fatalf("run = %d %s", r.status, r.body)
	}
	if !res.Success || res.TaskID != "t1" || string(res.Output) != `{"a":[1,2]}` || res.AgentName != "echo" {
		t.Errorf("run result %+v", res)
	}
	if task, _ := f.seen(); task.Metadata["k"] != "v" {
		t.Errorf("metadata not passed: %+v", task)
	}

	r = do(t, srv, "POST", "/agents/fail/run", `{"input":1}`)
	if r.status != 200 || json.Unmarshal(r.body, &res) != nil || res.Success || res.Error == nil || res.Error.Type != "ModelError" {
		t.Errorf("failed run must be 200 with success false: %d %s", r.status, r.body)
	}

	r = do(t, srv, "POST", "/agents/echo/gather", `{"tasks":[{"input":1},{"input":2},{"input":3}],"max_concurrency":2}`)
	var results []svc.AgentResult
	if r.status != 200 || json.Unmarshal(r.body, &results) != nil || len(results) != 3 {
		t.Fatalf("gather = %d %s", r.status, r.body)
	}
	for i, res := range results {
		if string(res.Output) != fmt.Sprint(i+1) {
			t.Errorf("gather result %d = %s, out of order", i, res.Output)
		}
	}
	if _, n, _ := f.seenGather(); n != 2 {
		t.Errorf("max_concurrency passed as %d, want 2", n)
	}
	do(t, srv, "POST", "/agents/echo/gather", `{"tasks":[{"input":1}]}`)
	if _, n, _ := f.seenGather(); n != svc.DefaultGatherConcurrency {
		t.Errorf("absent max_concurrency passed as %d, want the default", n)
	}

	for _, path := range []string{"/healthz", "/health"} {
		r = do(t, srv, "GET", path, "")
		if r.status != 200 || strings.TrimSpace(string(r.body)) != `{"status":"ok"}` {
			t.Errorf("GET %s = %d %s", path, r.status, r.body)
		}
	}
	r = do(t, srv, "GET", "/readyz", "")
	if r.status != 200 || strings.TrimSpace(string(r.body)) != `{"status":"ready"}` {
		t.Errorf("GET /readyz = %d %s", r.status, r.body)
	}
	f.setReady(svc.Errorf(svc.KindShuttingDown, "draining"))
	if p := problem(t, do(t, srv, "GET", "/readyz", ""), 503); !strings.Contains(p.Detail, "draining") {
		t.Errorf("readyz detail %q", p.Detail)
	}
	f.setReady(errors.New("broker at " + secret))
	if r := do(t, srv, "GET", "/readyz", ""); strings.Contains(string(r.body), secret) {
		t.Errorf("readyz leaked a non-domain error: %s", r.body)
	} else {
		problem(t, r, 503)
	}

	if p := problem(t, do(t, srv, "GET", "/nowhere", ""), 404); p.Error != string(svc.KindNotFound) || p.Detail != "no route for GET /nowhere" {
		t.Errorf("unknown route: error %q, detail %q; want NotFoundError naming the route", p.Error, p.Detail)
	}
	r = do(t, srv, "DELETE", "/agents/echo/run", "")
	if p := problem(t, r, 405); p.Error != string(svc.KindMethodNotAllowed) || !strings.Contains(p.Detail, "DELETE") || !strings.Contains(p.Detail, "allowed: POST") {
		t.Errorf("wrong method: error %q, detail %q; want MethodNotAllowedError naming DELETE and the allowed POST", p.Error, p.Detail)
	}
	if got := r.header.Values("Allow"); len(got) != 1 || got[0] != "POST" {
		t.Errorf("405 Allow = %q, want [POST]", got)
	}
}

// TestErrorStatuses drives every kind through the router and checks the
// status against docs/api.md's table, written out again here so a change to
// the table in the code is caught.
func TestErrorStatuses(t *testing.T) {
	want := map[svc.Kind]int{
		svc.KindRuntime: 500, svc.KindSpecValidation: 400, svc.KindTopology: 400,
		svc.KindPayloadTooLarge: 413, svc.KindTrustViolation: 403, svc.KindRegistry: 404,
		svc.KindRunState: 409, svc.KindBudgetExceeded: 429, svc.KindDepthLimit: 429,
		svc.KindSpawnCycle: 429, svc.KindSpawn: 500, svc.KindToolExecution: 500,
		svc.KindAllAgentsFailed: 500, svc.KindModel: 502, svc.KindTimeout: 504,
		svc.KindCancelled: 409, svc.KindShuttingDown: 503, svc.KindOutputValidation: 500, svc.KindUnauthorized: 401,
		svc.KindUnsupportedMediaType: 415, svc.KindForbiddenOrigin: 403,
		svc.KindNotFound: 404, svc.KindMethodNotAllowed: 405, svc.KindCondition: 500,
		svc.KindBadRequest: 400, svc.KindHeaderTooLarge: 431, svc.KindRequestTimeout: 408,
		svc.KindMisdirectedRequest: 421, svc.KindOverloaded: 503, svc.KindContext: 400,
		svc.KindSpawnCap: 422, svc.KindApprovalRequired: 409, svc.KindForbidden: 403,
		"FrobnicationError": 500, // unknown: falls back to its parent, the base
	}
	for _, k := range svc.Kinds {
		if _, ok := want[k]; !ok {
			t.Errorf("kind %s has no expected status in this test", k)
		}
	}
	srv, _ := newRouter(t)
	for kind, status := range want {
		t.Run(string(kind), func(t *testing.T) {
			if got := server.StatusOf(&svc.Error{Kind: kind}); got != status {
				t.Errorf("StatusOf = %d, want %d", got, status)
			}
			r := do(t, srv, "POST", "/agents/err/run", fmt.Sprintf(`{"id":"t-%s","input":%q}`, kind, kind), "X-Request-Id", "rid-"+string(kind))
			p := problem(t, r, status)
			if p.Error != string(kind) || p.Detail != "boom: "+string(kind) || p.Agent != "err" ||
				p.TaskID != "t-"+string(kind) || p.RequestID != "rid-"+string(kind) || p.Reason != "because" {
				t.Errorf("problem = %+v", p)
			}
		})
	}
}

func TestStatusOf(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{nil, 200},
		{fmt.Errorf("outer: %w", svc.Errorf(svc.KindTopology, "x")), 400},
		{context.DeadlineExceeded, 504},
		{fmt.Errorf("x: %w", context.Canceled), 409},
		{errors.New("plain"), 500},
		{svc.Wrap(svc.KindModel, context.DeadlineExceeded, "provider"), 502},
	} {
		if got := server.StatusOf(tc.err); got != tc.want {
			t.Errorf("StatusOf(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

func TestNonDomainErrorIsHiddenAndLogged(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	srv, _ := newRouter(t, server.WithLogger(zap.New(core)))
	r := do(t, srv, "POST", "/agents/raw/run", `{"input":1}`, "X-Request-Id", "rid-raw")
	p := problem(t, r, 500)
	if strings.Contains(string(r.body), secret) || p.Detail != "internal server error" || p.Error != "AgentRuntimeError" {
		t.Errorf("internal error leaked or mislabelled: %s", r.body)
	}
	entries := logs.FilterMessage("internal error").All()
	if len(entries) != 1 || !strings.Contains(fmt.Sprint(entries[0].ContextMap()["error"]), secret) ||
		entries[0].ContextMap()["request_id"] != "rid-raw" {
		t.Errorf("internal error not logged with its text and request id: %+v", entries)
	}
}

func TestRunBodyErrors(t *testing.T) {
	srv, _ := newRouter(t)
	for _, tc := range []struct{ name, body, want string }{
		{"unknown field", `{"input":1,"inptu":1}`, `unknown field "inptu"`},
		// The agent's input sent as the body: say what the body is.
		{"input not wrapped", `{"text":"hi"}`, `the body is a TaskSpec: {"input": …}`},
		{"input misspelt", `{"inptu":1}`, `it has "inptu"`},
		{"empty object", `{}`, `the body is a TaskSpec: {"input": …} (or {"task": {"input": …}}), with the agent's input under "input"; it is empty`},
		{"unknown field in envelope", `{"task":{"input":1},"requestid":"x"}`, `unknown field "requestid"`},
		{"unknown field in task", `{"task":{"input":1,"ID2":"x"}}`, `unknown field "ID2"`},
		{"wrong type", `{"input":1,"id":7}`, `field "id": expected a string, got JSON number`},
		{"wrong type in envelope", `{"task":{"input":1,"metadata":{"k":1}}}`, `field "task.metadata": expected a string, got JSON number`},
		{"wrong type of task", `{"task":"x"}`, `field "task": expected an object`},
		// Offsets are 0-based and name the byte where the text breaks.
		{"malformed", `{"input": 1,}`, "malformed JSON at offset 12 (line 1, column 13): invalid character '}'"},
		{"double comma", `{"input": [1, 2,, 3]}`, "malformed JSON at offset 16 (line 1, column 17): invalid character ','"},
		{"bad literal", `{"input": {"a": tru}}`, "malformed JSON at offset 19 (line 1, column 20): invalid character '}' in literal true"},
		{"second line", "{\n  \"input\": 1\n  \"id\": \"x\"}", "malformed JSON at offset 17 (line 3, column 3): invalid character '\"' after object key:value pair"},
		{"truncated", `{"input": `, "malformed JSON at offset 10 (line 1, column 11): unexpected end of input"},
		{"unterminated string", `{"input": "abc`, "malformed JSON at offset 14 (line 1, column 15): unexpected end of input"},
		{"trailing data offset", `{"input":1}  {"input":2}`, "unexpected data after the JSON object at offset 13"},
		{"missing input", `{"id":"x"}`, "input is required: the body is a TaskSpec"},
		{"null input", `{"input":null}`, "input is required"},
		{"missing input in envelope", `{"task":{"id":"x"},"request_id":"r"}`, "task.input is required"},
		{"null task", `{"task":null}`, "task must be a TaskSpec object"},
		{"empty body", ``, "request body is empty"},
		{"blank body", " \n\t", "request body is empty"},
		{"trailing data", `{"input":1} {"input":2}`, "unexpected data after the JSON object"},
		{"trailing garbage", `{"input":1}]`, "unexpected data after the JSON object"},
		{"array", `[{"input":1}]`, "must be a JSON object, not an array"},
		{"string", `"hi"`, "must be a JSON object, not a string"},
	} {
		// Agent and group runs take the same body.
		for _, path := range []string{"/agents/echo/run", "/groups/pair/run"} {
			t.Run(tc.name+path, func(t *testing.T) {
				p := problem(t, do(t, srv, "POST", path, tc.body), 400)
				if p.Error != "SpecValidationError" || !strings.Contains(p.Detail, tc.want) {
					t.Errorf("detail %q (%s), want it to contain %q", p.Detail, p.Error, tc.want)
				}
			})
		}
	}
}

func TestGatherBodyErrors(t *testing.T) {
	srv, _ := newRouter(t)
	for _, tc := range []struct{ name, body, want string }{
		{"no tasks", `{"tasks":[]}`, "at least one task"},
		{"tasks absent", `{"max_concurrency":3}`, "at least one task"},
		{"too concurrent", `{"tasks":[{"input":1}],"max_concurrency":10001}`, "max_concurrency 10001"},
		{"negative", `{"tasks":[{"input":1}],"max_concurrency":-1}`, "max_concurrency -1"},
		{"fractional", `{"tasks":[{"input":1}],"max_concurrency":1.5}`, `field "max_concurrency"`},
		{"task without input", `{"tasks":[{"input":1},{"id":"b"}]}`, "tasks[1].input is required"},
		{"unknown field", `{"tasks":[{"input":1}],"concurrency":3}`, `unknown field "concurrency"`},
		{"empty", ``, "request body is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := problem(t, do(t, srv, "POST", "/agents/echo/gather", tc.body), 400)
			if p.Error != "SpecValidationError" || !strings.Contains(p.Detail, tc.want) {
				t.Errorf("detail %q (%s), want it to contain %q", p.Detail, p.Error, tc.want)
			}
		})
	}
	if r := do(t, srv, "POST", "/agents/echo/gather", `{"tasks":[{"input":1}],"max_concurrency":10000}`); r.status != 200 {
		t.Errorf("max_concurrency 10000 refused: %d %s", r.status, r.body)
	}
	p := problem(t, do(t, srv, "POST", "/agents/nope/gather", `{"tasks":[{"input":1}]}`), 404)
	if p.Error != "RegistryError" {
		t.Errorf("gather on unknown agent: %+v", p)
	}
}

func TestPayloadTooLarge(t *testing.T) {
	body := func(n int) string { return `{"input":"` + strings.Repeat("x", n) + `"}` }
	for _, tc := range []struct {
		name   string
		opts   []server.Option
		size   int
		status int
	}{
		{"default limit, under", nil, 1<<20 - 100, 200},
		{"default limit, over", nil, 1 << 20, 413},
		{"small limit, over", []server.Option{server.WithMaxBodyBytes(1024)}, 2048, 413},
		{"small limit, under", []server.Option{server.WithMaxBodyBytes(1024)}, 1000, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, _ := newRouter(t, tc.opts...)
			for _, path := range []string{"/agents/echo/run", "/agents/echo/gather", "/groups/pair/run"} {
				b := body(tc.size)
				if strings.HasSuffix(path, "gather") {
					b = `{"tasks":[` + b + `]}`
				}
				r := do(t, srv, "POST", path, b)
				if tc.status == 200 {
					if r.status != 200 {
						t.Errorf("%s: status %d: %.200s", path, r.status, r.body)
					}
					continue
				}
				if p := problem(t, r, 413); p.Error != "PayloadTooLargeError" {
					t.Errorf("%s: %+v", path, p)
				}
			}
		})
	}
	if _, err := server.NewRouter(&fakeBackend{}, server.WithMaxBodyBytes(0)); err == nil {
		t.Error("WithMaxBodyBytes(0) accepted")
	}
	if _, err := server.NewRouter(nil); err == nil {
		t.Error("nil backend accepted")
	}
}

func isV7(id string) bool {
	u, err := uuid.Parse(id)
	return err == nil && u.Version() == 7
}

func TestRunRequestIDPrecedence(t *testing.T) {
	srv, f := newRouter(t)
	for _, tc := range []struct {
		name, body, header string
		want               string // "" means a new UUIDv7
	}{
		{"task request_id", `{"task":{"input":1,"request_id":"from-task"},"request_id":"from-body"}`, "from-header", "from-task"},
		{"bare task request_id", `{"input":1,"request_id":"from-task"}`, "from-header", "from-task"},
		{"body request_id", `{"task":{"input":1},"request_id":"from-body"}`, "from-header", "from-body"},
		{"header", `{"task":{"input":1}}`, "from-header", "from-header"},
		{"new", `{"input":1}`, "", ""},
		{"invalid header is replaced", `{"input":1}`, strings.Repeat("x", 129), ""},
	} {
		// Agent runs and group runs (with one and several terminals)
		// follow the same precedence.
		for _, path := range []string{"/agents/echo/run", "/groups/pair/run", "/groups/split/run"} {
			t.Run(tc.name+path, func(t *testing.T) {
				var hdr []string
				if tc.header != "" {
					hdr = []string{"X-Request-Id", tc.header}
				}
				r := do(t, srv, "POST", path, tc.body, hdr...)
				if r.status != 200 {
					t.Fatalf("status %d: %s", r.status, r.body)
				}
				task, _ := f.seen()
				got := r.header.Get("X-Request-Id")
				if task.RequestID != got {
					t.Errorf("backend saw %q, response header says %q", task.RequestID, got)
				}
				if tc.want == "" && !isV7(got) {
					t.Errorf("request id %q, want a new UUIDv7", got)
				} else if tc.want != "" && got != tc.want {
					t.Errorf("request id %q, want %q", got, tc.want)
				}
				var res svc.RunResult
				if err := json.Unmarshal(r.body, &res); err != nil {
					t.Fatalf("body %s: %v", r.body, err)
				}
				trace := ""
				switch {
				case res.Agent != nil:
					trace = res.Agent.Metadata.TraceID
				case res.Group != nil:
					trace = res.Group.Metadata.TraceID
				}
				if trace != got {
					t.Errorf("trace_id %q, want %q", trace, got)
				}
			})
		}
	}
}

func TestGatherRequestID(t *testing.T) {
	srv, f := newRouter(t)
	body := `{"tasks":[{"input":1},{"input":2,"request_id":"own"}]}`
	r := do(t, srv, "POST", "/agents/echo/gather", body, "X-Request-Id", "batch-1")
	tasks, _, ctxID := f.seenGather()
	if r.header.Get("X-Request-Id") != "batch-1" || ctxID != "batch-1" {
		t.Errorf("batch id: header %q, ctx %q; want batch-1", r.header.Get("X-Request-Id"), ctxID)
	}
	if tasks[0].RequestID != "" || tasks[1].RequestID != "own" {
		t.Errorf("task request ids changed: %+v", tasks)
	}
	r = do(t, srv, "POST", "/agents/echo/gather", body)
	_, _, ctxID = f.seenGather()
	if id := r.header.Get("X-Request-Id"); !isV7(id) || id != ctxID {
		t.Errorf("batch id %q / ctx %q, want the same new UUIDv7", id, ctxID)
	}
}

// TestMounted checks the router under a host's prefix and middleware: the
// host's request id reaches the run, and the 405 Allow header still works.
func TestMounted(t *testing.T) {
	f := &fakeBackend{}
	rt, err := server.NewRouter(f)
	if err != nil {
		t.Fatal(err)
	}
	host := chi.NewRouter()
	host.Use(server.RequestID)
	host.Mount("/svc", rt)
	srv := serve(t, host)

	r := do(t, srv, "POST", "/svc/agents/echo/run", `{"input":1}`, "X-Request-Id", "host-id")
	if task, _ := f.seen(); r.status != 200 || task.RequestID != "host-id" {
		t.Errorf("mounted run: %d, request id %q", r.status, task.RequestID)
	}
	r = do(t, srv, "GET", "/svc/agents/echo/run", "")
	problem(t, r, 405)
	if r.header.Get("Allow") != "POST" {
		t.Errorf("Allow = %q", r.header.Values("Allow"))
	}
	// An agent name that needs escaping arrives unescaped.
	p := problem(t, do(t, srv, "GET", "/svc/agents/a%20b/schema", ""), 404)
	if p.Agent != "a b" {
		t.Errorf("escaped agent name reached the backend as %q", p.Agent)
	}
	// One that holds an escaped slash, a backslash or is a dot segment is
	// no name (svc.ValidName) and a way to make a path read otherwise
	// (issue 25): the mounted router refuses it, with no standalone
	// CheckPath in front. So does an empty one ("//").
	for path, want := range map[string]string{
		"/svc/agents/a%2Fb/schema":       `agent name "a/b" in the path holds a slash or a backslash`,
		"/svc/agents/..%2F..%2Fx/run":    `agent name "../../x" in the path holds a slash or a backslash`,
		"/svc/agents/a%5Cb/gather":       `agent name "a\\b" in the path holds a slash or a backslash`,
		"/svc/agents/%2e%2e/schema":      `agent name ".." in the path is a dot segment`,
		"/svc/agents//schema":            `agent name in the path is empty`,
		"/svc/groups/%2E/topology":       `group name "." in the path is a dot segment`,
		"/svc/groups/x%2F..%2Fy/run":     `group name "x/../y" in the path holds a slash or a backslash`,
		"/svc/agents/..%252Fx%2F/schema": `agent name "..%2Fx/" in the path holds a slash or a backslash`,
	} {
		method, body := "GET", ""
		if strings.HasSuffix(path, "/run") || strings.HasSuffix(path, "/gather") {
			method, body = "POST", `{"input":1}`
		}
		p := problem(t, do(t, srv, method, path, body), 400)
		if p.Error != string(svc.KindSpecValidation) || p.Detail != want {
			t.Errorf("%s %s: %s %q, want SpecValidationError %q", method, path, p.Error, p.Detail, want)
		}
	}
	if task, _ := f.seen(); task.RequestID != "host-id" {
		t.Errorf("a refused name reached the backend: last task %+v", task)
	}
}

func TestStandaloneAuth(t *testing.T) {
	f := &fakeBackend{}
	h, err := server.NewStandalone(f, server.StandaloneConfig{AuthToken: "s3cret", Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, h)
	for _, tc := range []struct {
		name, path, auth string
		status           int
		challenge        string
	}{
		{"none", "/agents", "", 401, `Bearer realm="svc"`},
		{"wrong", "/agents", "Bearer nope", 401, `Bearer realm="svc", error="invalid_token"`},
		{"prefix of right", "/agents", "Bearer s3cre", 401, `Bearer realm="svc", error="invalid_token"`},
		{"other scheme", "/agents", "Basic czNjcmV0", 401, `Bearer realm="svc"`},
		{"empty bearer", "/agents", "Bearer ", 401, `Bearer realm="svc"`},
		{"right", "/agents", "Bearer s3cret", 200, ""},
		{"right, lower-case scheme", "/agents", "bearer s3cret", 200, ""},
		{"healthz open", "/healthz", "", 200, ""},
		{"health open", "/health", "", 200, ""},
		{"readyz open", "/readyz", "", 200, ""},
		{"run guarded", "/agents/echo/run", "", 401, `Bearer realm="svc"`},
		{"groups guarded", "/groups", "", 401, `Bearer realm="svc"`},
		{"topology guarded", "/groups/pair/topology", "", 401, `Bearer realm="svc"`},
		{"group run guarded", "/groups/pair/run", "", 401, `Bearer realm="svc"`},
		{"group run with token", "/groups/pair/run", "Bearer s3cret", 200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			method, body := "GET", ""
			if strings.HasSuffix(tc.path, "/run") {
				method, body = "POST", `{"input":1}`
			}
			var hdr []string
			if tc.auth != "" {
				hdr = []string{"Authorization", tc.auth}
			}
			r := do(t, srv, method, tc.path, body, hdr...)
			if tc.status == 200 {
				if r.status != 200 {
					t.Errorf("status %d: %s", r.status, r.body)
				}
				return
			}
			if p := problem(t, r, 401); p.Error != "UnauthorizedError" {
				t.Errorf("error = %q, want UnauthorizedError", p.Error)
			}
			if got := r.header.Get("WWW-Authenticate"); got != tc.challenge {
				t.Errorf("WWW-Authenticate = %q, want %q", got, tc.challenge)
			}
			if r.header.Get("X-Request-Id") == "" {
				t.Error("401 without X-Request-Id")
			}
		})
	}

	open, err := server.NewStandalone(f, server.StandaloneConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if r := do(t, serve(t, open), "GET", "/agents", ""); r.status != 200 {
		t.Errorf("no token configured, yet refused: %d", r.status)
	}
	locked := serve(t, server.BearerAuth("")(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	problem(t, do(t, locked, "GET", "/x", "", "Authorization", "Bearer "), 401)
}

func TestRequestIDMiddleware(t *testing.T) {
	var seenHeader, seenCtx string
	srv := serve(t, server.RequestID(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seenHeader, seenCtx = r.Header.Get("X-Request-Id"), svc.RequestIDFrom(r.Context())
	})))
	for _, tc := range []struct {
		in   string
		keep bool
	}{
		{"abc-123", true},
		{strings.Repeat("a", 128), true},
		{strings.Repeat("a", 129), false},
		{"has space", false},
		{"naïve", false},
		{"", false}, // sent empty: counts as absent (docs/api.md)
		{"absent", false},
	} {
		var hdr []string
		if tc.in != "absent" {
			hdr = []string{"X-Request-Id", tc.in}
		}
		r := do(t, srv, "GET", "/", "", hdr...)
		got := r.header.Get("X-Request-Id")
		if got != seenHeader || got != seenCtx {
			t.Errorf("%q: response %q, request header %q, ctx %q: want all equal", tc.in, got, seenHeader, seenCtx)
		}
		if tc.keep && got != tc.in {
			t.Errorf("valid id %q replaced by %q", tc.in, got)
		}
		if !tc.keep && !isV7(got) {
			t.Errorf("invalid id %q became %q, want a new UUIDv7", tc.in, got)
		}
	}
}

func TestAccessLogAndRecoverer(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	h, err := server.NewStandalone(&fakeBackend{}, server.StandaloneConfig{Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, h)

	r := do(t, srv, "POST", "/agents/echo/run", `{"input":"hello"}`, "X-Request-Id", "rid-1")
	entries := logs.FilterMessage("request").All()
	if len(entries) != 1 {
		t.Fatalf("%d access log lines, want 1", len(entries))
	}
	m := entries[0].ContextMap()
	if m["method"] != "POST" || m["path"] != "/agents/echo/run" || m["status"] != int64(200) ||
		m["bytes"] != int64(len(r.body)) || m["request_id"] != "rid-1" || m["duration"] == nil {
		t.Errorf("access log fields %v", m)
	}

	for _, tc := range []struct {
		input  string
		status int
		kind   string
	}{
		{`"a string"`, 500, "AgentRuntimeError"},
		{`"error"`, 500, "AgentRuntimeError"},
		{`"registry"`, 404, "RegistryError"},
	} {
		logs.TakeAll()
		r := do(t, srv, "POST", "/agents/panic/run", `{"input":`+tc.input+`}`)
		p := problem(t, r, tc.status)
		if p.Error != tc.kind || strings.Contains(string(r.body), secret) {
			t.Errorf("panic %s answered %s", tc.input, r.body)
		}
		if tc.status == 500 && logs.FilterMessage("panic").Len() != 1 {
			t.Errorf("panic %s not logged", tc.input)
		}
		if st := logs.FilterMessage("request").All(); len(st) != 1 || st[0].ContextMap()["status"] != int64(tc.status) {
			t.Errorf("access log after panic: %v", st)
		}
	}
}

// TestAccessLogCaller: the access log line names its caller (the access
// log's own line in standalone.go, found once and reused) when the
// logger adds callers, on every line, and none when it does not.
func TestAccessLogCaller(t *testing.T) {
	for _, withCaller := range []bool{true, false} {
		core, logs := observer.New(zap.InfoLevel)
		var opts []zap.Option
		if withCaller {
			opts = append(opts, zap.AddCaller())
		}
		h, err := server.NewStandalone(&fakeBackend{}, server.StandaloneConfig{Logger: zap.New(core, opts...)})
		if err != nil {
			t.Fatal(err)
		}
		srv := serve(t, h)
		for range 3 {
			do(t, srv, "POST", "/agents/echo/run", `{"input":"hello"}`)
		}
		entries := logs.FilterMessage("request").All()
		if len(entries) != 3 {
			t.Fatalf("%d access log lines, want 3", len(entries))
		}
		for _, e := range entries {
			if e.Caller.Defined != withCaller || withCaller && (!strings.HasPrefix(e.Caller.TrimmedPath(), "server/standalone.go:") || e.Caller != entries[0].Caller) {
				t.Errorf("logger adding callers %v: access log line's caller %+v", withCaller, e.Caller)
			}
		}
	}
}

func TestHostHandlers(t *testing.T) {
	mux := chi.NewRouter()
	mux.Use(server.RequestID)
	mux.Use(server.ErrorMiddleware)
	mux.Method("GET", "/returns", server.Handle(func(w http.ResponseWriter, r *http.Request) error {
		return &svc.Error{Kind: svc.KindBudgetExceeded, Message: "over budget", Agent: "a", TaskID: "t"}
	}))
	mux.Method("GET", "/ok", server.Handle(func(w http.ResponseWriter, r *http.Request) error {
		_, err := io.WriteString(w, "fine")
		return err
	}))
	mux.Method("GET", "/late", server.Handle(func(w http.ResponseWriter, r *http.Request) error {
		w.WriteHeader(http.StatusAccepted)
		return svc.Errorf(svc.KindModel, "too late to tell")
	}))
	mux.Get("/panics-error", func(http.ResponseWriter, *http.Request) {
		panic(svc.Errorf(svc.KindTrustViolation, "not at this trust level"))
	})
	mux.Get("/writes", func(w http.ResponseWriter, r *http.Request) {
		server.WriteError(w, r, fmt.Errorf("host: %w", svc.Errorf(svc.KindShuttingDown, "bye")))
	})
	var repanicked any
	outer := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				repanicked = v
				w.WriteHeader(599)
			}
		}()
		mux.ServeHTTP(w, r)
	})
	mux.Get("/panics-string", func(http.ResponseWriter, *http.Request) { panic("a bug") })
	srv := serve(t, outer)

	p := problem(t, do(t, srv, "GET", "/returns", "", "X-Request-Id", "host-rid"), 429)
	if p.Error != "BudgetExceededError" || p.Detail != "over budget" || p.Agent != "a" || p.TaskID != "t" || p.RequestID != "host-rid" {
		t.Errorf("Handle: %+v", p)
	}
	if r := do(t, srv, "GET", "/ok", ""); r.status != 200 || string(r.body) != "fine" {
		t.Errorf("Handle without error: %d %q", r.status, r.body)
	}
	if r := do(t, srv, "GET", "/late", ""); r.status != 202 || len(r.body) != 0 {
		t.Errorf("an error after the header must not rewrite the response: %d %q", r.status, r.body)
	}
	if p := problem(t, do(t, srv, "GET", "/panics-error", ""), 403); p.Error != "TrustViolationError" {
		t.Errorf("ErrorMiddleware: %+v", p)
	}
	if p := problem(t, do(t, srv, "GET", "/writes", ""), 503); p.Detail != "host: bye" || p.Error != "ShuttingDownError" {
		t.Errorf("WriteError: %+v", p)
	}
	if r := do(t, srv, "GET", "/panics-string", ""); r.status != 599 || repanicked != "a bug" {
		t.Errorf("a non-error panic must propagate: %d %v", r.status, repanicked)
	}
}

// WithReadyCheck: /readyz is 503 naming the failing check while it fails,
// without showing a cause that is not a domain error, and 200 again after.
func TestReadyCheck(t *testing.T) {
	var mu sync.Mutex
	var broker error
	set := func(err error) { mu.Lock(); broker = err; mu.Unlock() }
	srv, _ := newRouter(t, server.WithReadyCheck("broker", func(context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		return broker
	}))
	if r := do(t, srv, "GET", "/readyz", ""); r.status != 200 {
		t.Fatalf("GET /readyz = %d %s", r.status, r.body)
	}
	set(&svc.Error{Kind: svc.KindRuntime, Message: "the nats broker is not connected", Err: errors.New("dial 10.0.0.7:4222")})
	p := problem(t, do(t, srv, "GET", "/readyz", ""), 503)
	if p.Reason != "broker" || p.Detail != "not ready: broker: the nats broker is not connected" {
		t.Errorf("problem %+v", p)
	}
	set(errors.New("redis://:hunter2@10.0.0.7"))
	r := do(t, srv, "GET", "/readyz", "")
	if strings.Contains(string(r.body), "hunter2") {
		t.Errorf("readyz leaked a non-domain error: %s", r.body)
	}
	if p := problem(t, r, 503); p.Detail != "not ready: broker" {
		t.Errorf("problem %+v", p)
	}
	set(nil)
	if r := do(t, srv, "GET", "/readyz", ""); r.status != 200 {
		t.Fatalf("GET /readyz after recovery = %d %s", r.status, r.body)
	}
	if _, err := server.NewRouter(&fakeBackend{}, server.WithReadyCheck("", nil)); err == nil {
		t.Error("WithReadyCheck without a name and check accepted")
	}
}

// TestHealthHEAD (issue 25 part 4): probes that ask with HEAD get the
// status and headers of GET, without a body, and need no token; before,
// they got 405 and took the server for down.
func TestHealthHEAD(t *testing.T) {
	f := &fakeBackend{}
	h, err := server.NewStandalone(f, server.StandaloneConfig{AuthToken: "s3cret", Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, h)
	for _, path := range []string{"/healthz", "/health", "/readyz"} {
		get := do(t, srv, "GET", path, "")
		head := do(t, srv, "HEAD", path, "")
		if head.status != http.StatusOK || get.status != http.StatusOK {
			t.Errorf("%s: HEAD %d, GET %d; want 200 for both", path, head.status, get.status)
		}
		if len(head.body) != 0 {
			t.Errorf("HEAD %s sent a body: %q", path, head.body)
		}
		for _, k := range []string{"Content-Type", "Content-Length"} {
			if head.header.Get(k) != get.header.Get(k) || head.header.Get(k) == "" {
				t.Errorf("HEAD %s: %s %q, GET's %q", path, k, head.header.Get(k), get.header.Get(k))
			}
		}
		if head.header.Get("X-Request-Id") == "" {
			t.Errorf("HEAD %s without X-Request-Id", path)
		}
	}
	f.setReady(svc.Errorf(svc.KindShuttingDown, "draining"))
	head := do(t, srv, "HEAD", "/readyz", "")
	if head.status != http.StatusServiceUnavailable || len(head.body) != 0 ||
		head.header.Get("Content-Type") != "application/problem+json" || head.header.Get("Retry-After") == "" {
		t.Errorf("HEAD /readyz while draining: %d %v %q; want GET's 503 headers, no body", head.status, head.header, head.body)
	}
	// Only the probes: another route still takes what it takes.
	r := do(t, srv, "DELETE", "/healthz", "")
	if got := r.header.Values("Allow"); r.status != http.StatusMethodNotAllowed || strings.Join(got, ",") != "GET,HEAD" {
		t.Errorf("DELETE /healthz: %d, Allow %q; want 405 with GET, HEAD", r.status, got)
	}
	if r := do(t, srv, "HEAD", "/agents", "", "Authorization", "Bearer s3cret"); r.status != http.StatusMethodNotAllowed {
		t.Errorf("HEAD /agents: %d, want 405", r.status)
	}
}

package client_test

import (
	"bytes"
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
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"
	"go.uber.org/goleak"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/http/client"
	"github.com/svc-dev/svc/http/client/clienttest"
	"github.com/svc-dev/svc/http/openapi/openapitest"
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

func router(t *testing.T, b svc.Backend) chi.Router {
	t.Helper()
	rt, err := server.NewRouter(b)
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

func newClient(t *testing.T, url string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestContract(t *testing.T) {
	t.Run("fake", func(t *testing.T) {
		clienttest.Run(t, func(*testing.T) svc.Backend { return &fakeBackend{} })
	})
	t.Run("Client", func(t *testing.T) {
		clienttest.Run(t, func(t *testing.T) svc.Backend {
			// Every JSON answer is checked against the OpenAPI document.
			h, _ := openapitest.Wrap(t, router(t, &fakeBackend{}))
			return newClient(t, serve(t, h).URL)
		})
	})
	t.Run("Client/standalone with auth", func(t *testing.T) {
		clienttest.Run(t, func(t *testing.T) svc.Backend {
			h, err := server.NewStandalone(&fakeBackend{}, server.StandaloneConfig{AuthToken: "tok"})
			if err != nil {
				t.Fatal(err)
			}
			checked, _ := openapitest.Wrap(t, h)
			return newClient(t, serve(t, checked).URL, client.WithAuthToken("tok"))
		})
	})
	t.Run("Local/OverHandler", func(t *testing.T) {
		clienttest.Run(t, func(t *testing.T) svc.Backend {
			l, err := client.NewLocal(client.OverHandler(router(t, &fakeBackend{})))
			if err != nil {
				t.Fatal(err)
			}
			return l
		})
	})
	t.Run("Local/OverBackend", func(t *testing.T) {
		clienttest.Run(t, func(t *testing.T) svc.Backend {
			l, err := client.NewLocal(client.OverBackend(&fakeBackend{}))
			if err != nil {
				t.Fatal(err)
			}
			return l
		})
	})
}

// recorded is what a recording server saw of one request.
type recorded struct {
	method, path, auth, requestID string
	body                          []byte
}

// recorder wraps h and keeps every request it serves.
type recorder struct {
	mu   sync.Mutex
	reqs []recorded
}

func (rec *recorder) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rec.mu.Lock()
		rec.reqs = append(rec.reqs, recorded{r.Method, r.URL.Path, r.Header.Get("Authorization"), r.Header.Get("X-Request-Id"), body})
		rec.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		h.ServeHTTP(w, r)
	})
}

func (rec *recorder) take() []recorded {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	r := rec.reqs
	rec.reqs = nil
	return r
}

// callAll makes one call of every kind.
func callAll(t *testing.T, b svc.Backend) {
	t.Helper()
	ctx := t.Context()
	if _, err := b.Agents(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.AgentSchema(ctx, "echo"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Run(ctx, "echo", svc.TaskSpec{Input: json.RawMessage(`1`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Gather(ctx, "echo", []svc.TaskSpec{{Input: json.RawMessage(`1`)}}, svc.DefaultGatherConcurrency); err != nil {
		t.Fatal(err)
	}
	if err := b.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Groups(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.GroupTopology(ctx, "pair"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.RunGroup(ctx, "pair", svc.TaskSpec{Input: json.RawMessage(`1`)}); err != nil {
		t.Fatal(err)
	}
}

func TestAuthHeader(t *testing.T) {
	rec := &recorder{}
	srv := serve(t, rec.wrap(router(t, &fakeBackend{})))
	for _, tc := range []struct {
		name string
		opts []client.Option
		want string
	}{
		{"token", []client.Option{client.WithAuthToken("s3cret")}, "Bearer s3cret"},
		{"no token", nil, ""},
		{"empty token", []client.Option{client.WithAuthToken("")}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			callAll(t, newClient(t, srv.URL, tc.opts...))
			reqs := rec.take()
			if len(reqs) != 8 {
				t.Fatalf("%d requests, want 8", len(reqs))
			}
			for _, r := range reqs {
				if r.auth != tc.want {
					t.Errorf("%s %s: Authorization %q, want %q", r.method, r.path, r.auth, tc.want)
				}
			}
		})
	}
}

func TestRunRequestID(t *testing.T) {
	rec := &recorder{}
	c := newClient(t, serve(t, rec.wrap(router(t, &fakeBackend{}))).URL)
	for _, tc := range []struct {
		name string
		ctx  context.Context
		task svc.TaskSpec
		want string // "" means a new UUIDv7
	}{
		{"task", svc.WithRequestID(t.Context(), "ctx-id"), svc.TaskSpec{RequestID: "task-id"}, "task-id"},
		{"context", svc.WithRequestID(t.Context(), "ctx-id"), svc.TaskSpec{}, "ctx-id"},
		{"new", t.Context(), svc.TaskSpec{}, ""},
	} {
		// Group runs choose and send their request id as agent runs do.
		for _, target := range []string{"agent", "group"} {
			t.Run(tc.name+"/"+target, func(t *testing.T) {
				tc.task.Input = json.RawMessage(`1`)
				var trace string
				if target == "agent" {
					res, err := c.Run(tc.ctx, "echo", tc.task)
					if err != nil {
						t.Fatal(err)
					}
					trace = res.Metadata.TraceID
				} else {
					res, err := c.RunGroup(tc.ctx, "split", tc.task)
					if err != nil {
						t.Fatal(err)
					}
					trace = res.Group.Metadata.TraceID
				}
				checkRunRequest(t, rec.take()[0], tc.task, trace, tc.want)
			})
		}
	}

	// A gather sends the context's id as the batch id, and no header without one.
	tasks := []svc.TaskSpec{{Input: json.RawMessage(`1`)}}
	if _, err := c.Gather(svc.WithRequestID(t.Context(), "batch"), "echo", tasks, svc.DefaultGatherConcurrency); err != nil {
		t.Fatal(err)
	}
	if r := rec.take()[0]; r.requestID != "batch" {
		t.Errorf("gather X-Request-Id %q, want batch", r.requestID)
	}
	if _, err := c.Gather(t.Context(), "echo", tasks, 5); err != nil {
		t.Fatal(err)
	}
	r := rec.take()[0]
	if r.requestID != "" {
		t.Errorf("gather without a context id sent X-Request-Id %q", r.requestID)
	}
	var g svc.GatherRequest
	if err := json.Unmarshal(r.body, &g); err != nil || g.MaxConcurrency != 5 || len(g.Tasks) != 1 {
		t.Errorf("gather body %s", r.body)
	}
}

// checkRunRequest checks what a run sent: the same request id in the
// header and the envelope, the task's own request_id untouched, and the id
// want ("" for a new UUIDv7) that came back as the trace id.
func checkRunRequest(t *testing.T, r recorded, task svc.TaskSpec, trace, want string) {
	t.Helper()
	var body struct {
		Task      svc.TaskSpec `json:"task"`
		RequestID string       `json:"request_id"`
	}
	if err := json.Unmarshal(r.body, &body); err != nil {
		t.Fatalf("body %s: %v", r.body, err)
	}
	if r.requestID != body.RequestID || trace != body.RequestID {
		t.Errorf("header %q, body request_id %q, trace_id %q: want all equal", r.requestID, body.RequestID, trace)
	}
	if body.Task.RequestID != task.RequestID {
		t.Errorf("task.request_id sent as %q, want it untouched (%q)", body.Task.RequestID, task.RequestID)
	}
	if u, err := uuid.Parse(body.RequestID); want == "" && (err != nil || u.Version() != 7) {
		t.Errorf("request id %q, want a new UUIDv7", body.RequestID)
	} else if want != "" && body.RequestID != want {
		t.Errorf("request id %q, want %q", body.RequestID, want)
	}
}

func TestServerURL(t *testing.T) {
	rt := router(t, &fakeBackend{})
	host := chi.NewRouter()
	host.Mount("/base", rt)
	srv := serve(t, host)
	root := serve(t, rt)
	for _, url := range []string{srv.URL + "/base", srv.URL + "/base/", srv.URL + "/base//", root.URL, root.URL + "/"} {
		if _, err := newClient(t, url).Agents(t.Context()); err != nil {
			t.Errorf("New(%q).Agents: %v", url, err)
		}
	}
	for _, url := range []string{"", "localhost:8420", "ftp://host", "http://", "http://host/?q=1", "http://host/#f", "http://u:p@host", "://bad", "http://host:port"} {
		if c, err := client.New(url); err == nil {
			c.Close()
			t.Errorf("New(%q) accepted", url)
		}
	}
	for _, opt := range []client.Option{client.WithTimeout(-time.Second), client.WithTransport(nil), client.WithHTTPClient(nil)} {
		if _, err := client.New(srv.URL, opt); err == nil {
			t.Error("a bad option was accepted")
		}
	}
}

// blocking answers nothing until the request's context ends. It reads the
// body first, as the router does: net/http notices a client hanging up (and
// cancels the context) only once the body has been consumed.
var blocking = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	<-r.Context().Done()
})

func TestTimeout(t *testing.T) {
	srv := serve(t, blocking)
	check := func(t *testing.T, err error, elapsed time.Duration) {
		t.Helper()
		if !errors.Is(err, svc.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("error %v, want a TimeoutError from a deadline", err)
		}
		if elapsed > 5*time.Second {
			t.Errorf("returned after %v", elapsed)
		}
	}
	t.Run("WithTimeout", func(t *testing.T) {
		c := newClient(t, srv.URL, client.WithTimeout(50*time.Millisecond))
		start := time.Now()
		_, err := c.Run(t.Context(), "echo", svc.TaskSpec{Input: json.RawMessage(`1`)})
		check(t, err, time.Since(start))
		start = time.Now()
		_, err = c.Gather(t.Context(), "echo", []svc.TaskSpec{{Input: json.RawMessage(`1`)}}, svc.DefaultGatherConcurrency)
		check(t, err, time.Since(start))
		start = time.Now()
		_, err = c.RunGroup(t.Context(), "pair", svc.TaskSpec{Input: json.RawMessage(`1`)})
		check(t, err, time.Since(start))
	})
	t.Run("earlier context deadline wins", func(t *testing.T) {
		c := newClient(t, srv.URL, client.WithTimeout(time.Hour))
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := c.Agents(ctx)
		check(t, err, time.Since(start))
	})
	t.Run("cancellation", func(t *testing.T) {
		c := newClient(t, srv.URL)
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(50*time.Millisecond, cancel)
		if err := c.Ready(ctx); !errors.Is(err, svc.ErrCancelled) || !errors.Is(err, context.Canceled) {
			t.Errorf("error %v, want a CancelledError", err)
		}
	})
	// The default bound is observed on the request's context, without
	// waiting 30 seconds for it.
	for _, tc := range []struct {
		name string
		opts []client.Option
		want time.Duration // 0: no deadline
	}{
		{"default", nil, client.DefaultTimeout},
		{"set", []client.Option{client.WithTimeout(7 * time.Second)}, 7 * time.Second},
		{"disabled", []client.Option{client.WithTimeout(0)}, 0},
	} {
		t.Run("deadline/"+tc.name, func(t *testing.T) {
			var deadline time.Time
			var has bool
			rt := roundTripFunc(func(r *http.Request) (*http.Response, error) {
				deadline, has = r.Context().Deadline()
				return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader(`["echo"]`)), Header: http.Header{}}, nil
			})
			c := newClient(t, "http://svc.invalid", append(tc.opts, client.WithTransport(rt))...)
			start := time.Now()
			if _, err := c.Agents(t.Context()); err != nil {
				t.Fatal(err)
			}
			end := time.Now()
			if tc.want == 0 {
				if has {
					t.Errorf("deadline set in %v, want none", time.Until(deadline))
				}
				return
			}
			// The call set deadline = now + want at some instant in [start, end].
			if !has || deadline.Sub(start) < tc.want || deadline.Sub(end) > tc.want {
				t.Errorf("deadline %v after the call began (has %v), want %v", deadline.Sub(start), has, tc.want)
			}
		})
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestErrorRebuild sends every kind through the router and checks that the
// client rebuilds the same error: kind, message, agent, task and reason.
func TestErrorRebuild(t *testing.T) {
	srv := serve(t, router(t, &fakeBackend{}))
	sentinels := map[svc.Kind]error{
		svc.KindRuntime: svc.ErrRuntime, svc.KindSpecValidation: svc.ErrSpecValidation,
		svc.KindTopology: svc.ErrTopology, svc.KindPayloadTooLarge: svc.ErrPayloadTooLarge,
		svc.KindUnsupportedMediaType: svc.ErrUnsupportedMediaType, svc.KindForbiddenOrigin: svc.ErrForbiddenOrigin,
		svc.KindTrustViolation: svc.ErrTrustViolation, svc.KindRegistry: svc.ErrRegistry,
		svc.KindRunState: svc.ErrRunState, svc.KindBudgetExceeded: svc.ErrBudgetExceeded,
		svc.KindDepthLimit: svc.ErrDepthLimit, svc.KindSpawnCycle: svc.ErrSpawnCycle,
		svc.KindSpawn: svc.ErrSpawn, svc.KindToolExecution: svc.ErrToolExecution,
		svc.KindAllAgentsFailed: svc.ErrAllAgentsFailed, svc.KindModel: svc.ErrModel,
		svc.KindTimeout: svc.ErrTimeout, svc.KindCancelled: svc.ErrCancelled,
		svc.KindShuttingDown: svc.ErrShuttingDown, svc.KindOutputValidation: svc.ErrOutputValidation, svc.KindUnauthorized: svc.ErrUnauthorized,
		svc.KindNotFound: svc.ErrNotFound, svc.KindMethodNotAllowed: svc.ErrMethodNotAllowed,
		svc.KindCondition:          svc.ErrCondition,
		svc.KindBadRequest:         svc.ErrBadRequest,
		svc.KindHeaderTooLarge:     svc.ErrHeaderTooLarge,
		svc.KindRequestTimeout:     svc.ErrRequestTimeout,
		svc.KindMisdirectedRequest: svc.ErrMisdirectedRequest,
		svc.KindOverloaded:         svc.ErrOverloaded,
		svc.KindContext:            svc.ErrContext,
		svc.KindSpawnCap:           svc.ErrSpawnCap,
		svc.KindApprovalRequired:   svc.ErrApprovalRequired,
		svc.KindForbidden:          svc.ErrForbidden,
	}
	clients := map[string]svc.Backend{"Client": newClient(t, srv.URL)}
	local, err := client.NewLocal(client.OverHandler(router(t, &fakeBackend{})))
	if err != nil {
		t.Fatal(err)
	}
	clients["Local"] = local
	for cname, c := range clients {
		for _, kind := range append(svc.Kinds, "FrobnicationError") {
			t.Run(cname+"/"+string(kind), func(t *testing.T) {
				task := svc.TaskSpec{ID: "t1", Input: json.RawMessage(fmt.Sprintf("%q", kind))}
				_, err := c.Run(t.Context(), "err", task)
				checkRebuilt(t, err, kind, sentinels)
				// The fake's group "err" runs agent err on the same task.
				_, err = c.RunGroup(t.Context(), "err", task)
				checkRebuilt(t, err, kind, sentinels)
			})
		}
	}
	if len(sentinels) != len(svc.Kinds) {
		t.Errorf("the test knows %d kinds, the root package %d", len(sentinels), len(svc.Kinds))
	}
}

// checkRebuilt checks that err is the fake agent err's error of kind,
// rebuilt whole.
func checkRebuilt(t *testing.T, err error, kind svc.Kind, sentinels map[svc.Kind]error) {
	t.Helper()
	var e *svc.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T), want an *svc.Error", err, err)
	}
	if e.Kind != kind || e.Message != "boom: "+string(kind) || e.Agent != "err" || e.TaskID != "t1" || e.Reason != "because" {
		t.Errorf("rebuilt %+v", e)
	}
	if !errors.Is(err, svc.ErrRuntime) {
		t.Error("does not match ErrRuntime")
	}
	if s, known := sentinels[kind]; known && !errors.Is(err, s) {
		t.Errorf("does not match its sentinel")
	}
	if kind == "FrobnicationError" && (errors.Is(err, svc.ErrModel) || errors.Is(err, svc.ErrSpecValidation)) {
		t.Error("an unknown kind matches a specific sentinel")
	}
}

func TestNonProblemErrors(t *testing.T) {
	for _, tc := range []struct {
		name, contentType, body string
		status                  int
		want                    []string
	}{
		{"plain text", "text/plain", "upstream unavailable\n", 502, []string{"HTTP 502 Bad Gateway", "upstream unavailable"}},
		{"html", "text/html", "<html><body>Bad\x00 gateway</body></html>", 502, []string{"HTTP 502", "<html><body>Bad gateway"}},
		{"empty", "", "", 500, []string{"HTTP 500 Internal Server Error"}},
		{"json without kind", "application/json", `{"error":"something odd happened"}`, 404, []string{"HTTP 404 Not Found"}},
		{"problem without kind", "application/problem+json", `{"title":"Nope","detail":"no such thing"}`, 404, []string{"HTTP 404 Not Found: no such thing"}},
		{"json claiming text", "text/plain", `{"error":"ModelError","detail":"x"}`, 503, []string{"HTTP 503"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tc.contentType != "" {
					w.Header().Set("Content-Type", tc.contentType)
				}
				w.WriteHeader(tc.status)
				io.WriteString(w, tc.body)
			}))
			_, err := newClient(t, srv.URL).Agents(t.Context())
			var e *svc.Error
			if !errors.As(err, &e) || e.Kind != svc.KindRuntime {
				t.Fatalf("error %v, want an AgentRuntimeError", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(e.Message, w) {
					t.Errorf("message %q lacks %q", e.Message, w)
				}
			}
		})
	}
}

func TestBadSuccessResponses(t *testing.T) {
	for _, tc := range []struct{ name, body string }{
		{"null", `null`},
		{"array", `[1]`},
		{"not json", `<html>`},
	} {
		t.Run("group run/"+tc.name, func(t *testing.T) {
			srv := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, tc.body)
			}))
			res, err := newClient(t, srv.URL).RunGroup(t.Context(), "g", svc.TaskSpec{Input: json.RawMessage(`1`)})
			if !errors.Is(err, svc.ErrRuntime) || res.Agent != nil || res.Group != nil {
				t.Errorf("RunGroup = %+v, %v; want an AgentRuntimeError alone", res, err)
			}
		})
	}
	for _, tc := range []struct{ name, body string }{
		{"gather count", `[{"task_id":"only one"}]`},
		{"not json", `<html>`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, tc.body)
			}))
			tasks := []svc.TaskSpec{{Input: json.RawMessage(`1`)}, {Input: json.RawMessage(`2`)}}
			if _, err := newClient(t, srv.URL).Gather(t.Context(), "echo", tasks, svc.DefaultGatherConcurrency); !errors.Is(err, svc.ErrRuntime) {
				t.Errorf("error %v, want an AgentRuntimeError", err)
			}
		})
	}
}

func TestLocalOptions(t *testing.T) {
	f := &fakeBackend{}
	for _, tc := range []struct {
		name string
		opts []client.LocalOption
	}{
		{"neither", nil},
		{"both", []client.LocalOption{client.OverBackend(f), client.OverHandler(router(t, f))}},
		{"nil backend", []client.LocalOption{client.OverBackend(nil)}},
		{"nil handler", []client.LocalOption{client.OverHandler(nil)}},
	} {
		if _, err := client.NewLocal(tc.opts...); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
	l, err := client.NewLocal(client.OverBackend(f))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil || f.closed.Load() != 0 {
		t.Errorf("Close = %v and closed the backend %d times; want a no-op", err, f.closed.Load())
	}
}

// TestLocalHandlerTransport checks that a panic in the handler is an
// error, and that an abandoned call frees the handler.
func TestLocalHandlerTransport(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/readyz", func(http.ResponseWriter, *http.Request) { panic("handler bug") })
	handlerDone := make(chan struct{})
	mux.HandleFunc("/agents/echo/schema", func(w http.ResponseWriter, r *http.Request) {
		defer close(handlerDone)
		<-r.Context().Done()
	})
	l, err := client.NewLocal(client.OverHandler(mux))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Ready(t.Context()); err == nil || !strings.Contains(err.Error(), "handler bug") {
		t.Errorf("Ready over a panicking handler = %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if _, err := l.AgentSchema(ctx, "echo"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("AgentSchema past its deadline = %v", err)
	}
	select {
	case <-handlerDone:
	case <-time.After(5 * time.Second):
		t.Error("the handler was not cancelled with the call")
	}
}

// TestGroupNameEscaped checks that a group name that needs escaping reaches
// the backend whole: a name the router did not route would be a 404
// without a RegistryError.
func TestGroupNameEscaped(t *testing.T) {
	c := newClient(t, serve(t, router(t, &fakeBackend{})).URL)
	for _, name := range []string{"x y", "q?r#s", "%2F"} {
		_, err := c.GroupTopology(t.Context(), name)
		if !errors.Is(err, svc.ErrRegistry) || !strings.Contains(err.Error(), fmt.Sprintf("%q", name)) {
			t.Errorf("GroupTopology(%q) = %v, want a RegistryError naming it", name, err)
		}
		_, err = c.RunGroup(t.Context(), name, svc.TaskSpec{Input: json.RawMessage(`1`)})
		if !errors.Is(err, svc.ErrRegistry) || !strings.Contains(err.Error(), fmt.Sprintf("%q", name)) {
			t.Errorf("RunGroup(%q) = %v, want a RegistryError naming it", name, err)
		}
	}
	// A name with a slash is no name (svc.ValidName), and the server
	// refuses an escaped slash in a path (issue 25): a SpecValidationError
	// naming it, not a run.
	for _, name := range []string{"a/b", "..", `a\b`} {
		_, err := c.GroupTopology(t.Context(), name)
		if !errors.Is(err, svc.ErrSpecValidation) || !strings.Contains(err.Error(), fmt.Sprintf("group name %q", name)) {
			t.Errorf("GroupTopology(%q) = %v, want a SpecValidationError naming it", name, err)
		}
	}
}

// TestRouteErrorsRebuilt: a route the server does not have (the runs of a
// server whose backend has none) comes back as a NotFoundError, not as a
// RegistryError about some run nor as the base kind.
func TestRouteErrorsRebuilt(t *testing.T) {
	c := newClient(t, serve(t, router(t, &fakeBackend{})).URL)
	_, err := c.RunStatus(t.Context(), "some-run")
	if !errors.Is(err, svc.ErrNotFound) || errors.Is(err, svc.ErrRegistry) || svc.KindOf(err) != svc.KindNotFound ||
		!strings.Contains(err.Error(), "no route for GET /runs/some-run/status") {
		t.Fatalf("RunStatus against a server without runs: %v (%s), want a NotFoundError naming the route", err, svc.KindOf(err))
	}
}

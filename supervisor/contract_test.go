package supervisor_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"go.uber.org/zap"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/http/client"
	"github.com/svc-dev/svc/http/client/clienttest"
	"github.com/svc-dev/svc/http/openapi/openapitest"
	"github.com/svc-dev/svc/http/server"
	"github.com/svc-dev/svc/supervisor"
)

// fixture is the runtime the client contract suite expects (see
// clienttest.Run): echo, fail and slow agents on the test provider, and the
// groups pair, split and slowpair over them.
func fixture(t *testing.T) *supervisor.Runtime {
	rt := newRuntime(t, svc.Options{}, nil, nil,
		svc.Agent{Name: "echo", Model: "test:echo"},
		svc.Agent{Name: "fail", Model: "test:fail"},
		svc.Agent{Name: "slow", Model: "test:echo", ModelSettings: map[string]any{"latency_ms": 10000}},
	)
	err := rt.RegisterGroups(
		svc.Group{Name: "pair",
			Nodes: []svc.GroupNode{{Name: "a", Agent: "echo"}, {Name: "b", Agent: "echo"}},
			Edges: []svc.GroupEdge{{From: "a", To: "b"}}},
		svc.Group{Name: "split",
			Nodes: []svc.GroupNode{{Name: "a", Agent: "echo"}, {Name: "b", Agent: "echo"}, {Name: "c", Agent: "echo"}},
			Edges: []svc.GroupEdge{{From: "a", To: "b"}, {From: "a", To: "c"}}},
		svc.Group{Name: "slowpair",
			Nodes: []svc.GroupNode{{Name: "a", Agent: "echo"}, {Name: "b", Agent: "slow"}},
			Edges: []svc.GroupEdge{{From: "a", To: "b"}}},
	)
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

func router(t *testing.T, b svc.Backend) *httptest.Server {
	h, err := server.NewRouter(b, server.WithLogger(zap.NewNop()))
	if err != nil {
		t.Fatal(err)
	}
	// Every JSON answer is checked against the OpenAPI document.
	checked, c := openapitest.Wrap(t, h)
	srv := httptest.NewServer(checked)
	t.Cleanup(srv.Close)
	validated.Store(srv, c)
	return srv
}

// validated maps the servers of router to their OpenAPI checkers.
var validated sync.Map

// checkedCount is the number of answers the checkers of the servers
// router started have validated so far.
func checkedCount() int {
	n := 0
	validated.Range(func(_, c any) bool {
		n += c.(*openapitest.Checker).Checked()
		return true
	})
	return n
}

// TestBackendContract runs the one client contract suite against the
// runtime itself and against every client in front of it.
func TestBackendContract(t *testing.T) {
	t.Run("Runtime", func(t *testing.T) {
		clienttest.Run(t, func(t *testing.T) svc.Backend { return fixture(t) })
	})
	t.Run("HTTPClient", func(t *testing.T) {
		before := checkedCount()
		clienttest.Run(t, func(t *testing.T) svc.Backend {
			c, err := client.New(router(t, fixture(t)).URL + "/")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			return c
		})
		// The suite's answers went through the OpenAPI check.
		if n := checkedCount() - before; n < 30 {
			t.Errorf("%d answers were checked against the OpenAPI document, want the suite's (at least 30)", n)
		}
	})
	t.Run("LocalOverRuntime", func(t *testing.T) {
		clienttest.Run(t, func(t *testing.T) svc.Backend {
			c, err := client.NewLocal(client.OverBackend(fixture(t)))
			if err != nil {
				t.Fatal(err)
			}
			return c
		})
	})
	t.Run("LocalOverRouter", func(t *testing.T) {
		clienttest.Run(t, func(t *testing.T) svc.Backend {
			h, err := server.NewRouter(fixture(t), server.WithLogger(zap.NewNop()))
			if err != nil {
				t.Fatal(err)
			}
			c, err := client.NewLocal(client.OverHandler(h))
			if err != nil {
				t.Fatal(err)
			}
			return c
		})
	})
}

// TestRunBackendContract runs the submitted-runs contract suite against the
// runtime and the clients in front of it.
func TestRunBackendContract(t *testing.T) {
	t.Run("Runtime", func(t *testing.T) {
		clienttest.RunSubmit(t, func(t *testing.T) svc.RunBackend { return fixture(t) })
	})
	t.Run("HTTPClient", func(t *testing.T) {
		clienttest.RunSubmit(t, func(t *testing.T) svc.RunBackend {
			c, err := client.New(router(t, fixture(t)).URL)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			return c
		})
	})
	t.Run("LocalOverRouter", func(t *testing.T) {
		clienttest.RunSubmit(t, func(t *testing.T) svc.RunBackend {
			h, err := server.NewRouter(fixture(t), server.WithLogger(zap.NewNop()))
			if err != nil {
				t.Fatal(err)
			}
			c, err := client.NewLocal(client.OverHandler(h))
			if err != nil {
				t.Fatal(err)
			}
			return c
		})
	})
}

func TestIdempotencyKeyOverHTTP(t *testing.T) {
	srv := router(t, fixture(t))
	post := func(body, key string) (int, string) {
		req, _ := http.NewRequest("POST", srv.URL+"/submit", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var r struct {
			RunID string `json:"run_id"`
			Error string `json:"error"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&r)
		return resp.StatusCode, r.RunID + r.Error
	}
	s1, id1 := post(`{"target":"echo","task":{"input":1}}`, "abc")
	s2, id2 := post(`{"target":"echo","task":{"input":1}}`, "abc")
	if s1 != 202 || s2 != 202 || id1 != id2 || id1 == "" {
		t.Fatalf("same key and body: %d %s / %d %s", s1, id1, s2, id2)
	}
	if s3, e := post(`{"target":"echo","task":{"input":2}}`, "abc"); s3 != 409 || e != "RunStateError" {
		t.Fatalf("same key, other body: %d %s", s3, e)
	}
}

// TestConditionErrorOverHTTP: a group condition that fails at run time is a
// 500 ConditionError on the wire, not a 400, and the Go client rebuilds the
// same kind the runtime returns.
func TestConditionErrorOverHTTP(t *testing.T) {
	rt := newRuntime(t, svc.Options{}, nil, nil, svc.Agent{Name: "echo", Model: "test:echo"})
	err := rt.RegisterGroups(svc.Group{Name: "costly",
		Nodes: []svc.GroupNode{{Name: "a", Agent: "echo"}, {Name: "b", Agent: "echo"}},
		Edges: []svc.GroupEdge{{From: "a", To: "b", When: `lists.range(100000).map(x, lists.range(1000).map(y, y)).size() > 0`}}})
	if err != nil {
		t.Fatal(err)
	}
	srv := router(t, rt)
	resp, err := http.Post(srv.URL+"/groups/costly/run", "application/json", strings.NewReader(`{"input":1}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var p server.Problem
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusInternalServerError || p.Error != string(svc.KindCondition) ||
		!strings.Contains(p.Detail, "edges[0].when") || !strings.Contains(p.Detail, "cost limit") {
		t.Errorf("POST /groups/costly/run = %d %+v, want a 500 ConditionError naming the edge and the cost limit", resp.StatusCode, p)
	}
	c, err := client.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := c.RunGroup(t.Context(), "costly", svc.TaskSpec{Input: json.RawMessage(`1`)}); !errors.Is(err, svc.ErrCondition) || errors.Is(err, svc.ErrTopology) {
		t.Errorf("client RunGroup = %v, want a ConditionError", err)
	}
}

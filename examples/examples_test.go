// Package examples_test runs every example spec over real HTTP, so the
// answers shown in README.md and docs/groups.md stay true.
package examples_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/http/server"
	"github.com/svc-dev/svc/model"
	"github.com/svc-dev/svc/spec"
	"github.com/svc-dev/svc/supervisor"
	"github.com/svc-dev/svc/tools"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func serve(t *testing.T) string {
	t.Helper()
	models := model.Default()
	set, err := spec.Load("specs", spec.Env{
		Tools:      tools.Builtins(tools.BuiltinOptions{}),
		CheckModel: func(id string) error { _, err := models.Resolve(id); return err },
	})
	if err != nil {
		t.Fatal(err)
	}
	rt, err := supervisor.New(supervisor.Config{Options: set.Options, Models: models})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rt.Shutdown(ctx)
	})
	if err := rt.Register(set.Agents...); err != nil {
		t.Fatal(err)
	}
	if err := rt.RegisterGroups(set.Groups...); err != nil {
		t.Fatal(err)
	}
	h, err := server.NewRouter(rt, server.WithLogger(zap.NewNop()))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

func post(t *testing.T, url, body string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v: %s", url, err, b)
	}
	return resp.StatusCode, m
}

func js(v any) string { b, _ := json.Marshal(v); return string(b) }

func TestExampleAgents(t *testing.T) {
	base := serve(t)
	st, r := post(t, base+"/agents/echo/run", `{"input":{"text":"hello"}}`)
	if st != 200 || js(r["output"]) != `{"text":"hello"}` {
		t.Fatalf("echo: %d %v", st, r)
	}
	st, r = post(t, base+"/agents/resilient/run", `{"input":"hi"}`)
	if st != 200 || r["success"] != true || r["metadata"].(map[string]any)["model"] != "test:echo" {
		t.Fatalf("resilient: %d %v", st, r)
	}
	st, r = post(t, base+"/agents/clock/run", `{"input":"what time?"}`)
	if st != 200 || !strings.Contains(js(r["output"]), `"current_time"`) {
		t.Fatalf("clock: %d %v", st, r)
	}
	st, r = post(t, base+"/agents/triage/run", `{"input":{"text":"x"}}`)
	if st != 200 || js(r["output"]) != `{"category":"billing","confidence":0.9}` {
		t.Fatalf("triage: %d %v", st, r)
	}
	if st, r = post(t, base+"/agents/triage/run", `{"input":{"ticket":"x"}}`); st != 400 || r["error"] != "SpecValidationError" {
		t.Fatalf("triage with bad input: %d %v", st, r)
	}
}

func TestExampleGroups(t *testing.T) {
	base := serve(t)
	for _, tc := range []struct {
		group, body string
		status      int
		check       func(map[string]any) bool
	}{
		{"pipeline", `{"input":{"text":"hello"},"request_id":"demo-1"}`, 200, func(r map[string]any) bool {
			return r["group"] == nil && js(r["output"]) == `{"draft":{"text":"hello"},"stage":"reviewed"}` &&
				r["metadata"].(map[string]any)["trace_id"] == "demo-1"
		}},
		{"support", `{"input":{"text":"I was charged twice"}}`, 200, func(r map[string]any) bool {
			return r["agent_name"] == "billing_expert" && js(r["output"]) == `{"resolution":"refund issued","team":"billing"}`
		}},
		{"fanout", `{"input":{"items":["a","bad","c"]}}`, 200, func(r map[string]any) bool {
			return r["success"] == true && js(r["output"]) == `["a","c"]`
		}},
		{"fanout", `{"input":{"items":["bad","bad"]}}`, 500, func(r map[string]any) bool {
			return r["error"] == "AllAgentsFailedError"
		}},
		{"panel", `{"input":"new pricing plan"}`, 200, func(r map[string]any) bool {
			outs, _ := r["outputs"].(map[string]any)
			return r["group"] == true && r["success"] == true && len(outs) == 2 && outs["legal"] != nil && outs["finance"] != nil
		}},
		{"crew", `{"input":"write a report"}`, 200, func(r map[string]any) bool {
			return r["agent_name"] == "lead" && strings.Contains(js(r["output"]), `"delegate":{"output":{"facts"`)
		}},
	} {
		st, r := post(t, base+"/groups/"+tc.group+"/run", tc.body)
		if st != tc.status || !tc.check(r) {
			t.Errorf("%s %s: %d %s", tc.group, tc.body, st, js(r))
		}
	}
	resp, err := http.Get(base + "/groups/support/topology")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var top svc.Topology
	if err := json.NewDecoder(resp.Body).Decode(&top); err != nil || js(top.Entry) != `["triage"]` || js(top.Terminal) != `["billing","tech"]` ||
		!strings.HasPrefix(top.Mermaid, "flowchart TD") {
		t.Fatalf("topology: %v %+v", err, top)
	}
}

package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"go.uber.org/zap"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/http/openapi"
)

// TestRepeatedQueryParameter (issue 25 part 4): every route that takes
// query parameters (all those the OpenAPI document lists, so a new one is
// covered when it is documented) refuses one given twice with a 400
// naming it, and an unknown one likewise, before its handler does
// anything: ?max_concurrency=1&max_concurrency=500 was taken as whichever
// the handler read. event_type on /events/stream is the one parameter
// documented as repeatable.
func TestRepeatedQueryParameter(t *testing.T) {
	// everything's methods are nil interfaces: a handler that got as far
	// as the backend would panic, answered 500.
	h, err := NewStandalone(everything{}, StandaloneConfig{Logger: zap.NewNop(),
		RouterOptions: []Option{WithSSEEmitter(struct{ svc.EventSubscriber }{})},
		Events:        struct{ svc.EventReader }{}, Metrics: http.NotFoundHandler()})
	if err != nil {
		t.Fatal(err)
	}
	params := regexp.MustCompile(`\{[^}]+\}`)
	// Values each route would take once.
	values := map[string][2]string{
		"max_concurrency": {"1", "500"}, "after": {"1", "2"}, "limit": {"1", "2"},
		"since": {"0", "1"}, "until": {"0", "1"}, "trace_id": {"a", "b"},
		"event_type": {"agent_spawned", "agent_completed"}, "agent": {"echo", "other"},
		"group_by": {"agent", "model"}, "state": {"completed", "failed"}, "cursor": {"a", "b"}, "tenant": {"team-a", "team-b"},
		"status": {"completed", "failed"}, "target": {"echo", "other"}, "type": {"run", "group"},
		"order": {"index", "finish"}, "follow": {"true", "false"}, "mode": {"runtime", "provider"},
		"callback_url": {"https://a.example/x", "https://b.example/y"},
	}
	ask := func(method, target string) (int, Problem) {
		var body *strings.Reader
		if method == http.MethodPost {
			body = strings.NewReader(`{"input":1}` + "\n")
		} else {
			body = strings.NewReader("")
		}
		req := httptest.NewRequest(method, target, body)
		if method == http.MethodPost {
			req.Header.Set("Content-Type", svc.MediaNDJSON)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		var p Problem
		_ = json.Unmarshal(rec.Body.Bytes(), &p)
		return rec.Code, p
	}
	covered := 0
	for _, rt := range openapi.Routes {
		if len(rt.Query) == 0 {
			continue
		}
		path := params.ReplaceAllString(rt.Path, "x")
		for name := range rt.Query {
			v, ok := values[name]
			if !ok {
				t.Fatalf("%s %s: no test values for %q", rt.Method, rt.Path, name)
			}
			if rt.Path == "/events/stream" && name == "event_type" {
				continue // repeatable by design: the types add up
			}
			covered++
			target := path + "?" + name + "=" + v[0] + "&" + name + "=" + v[1]
			status, p := ask(rt.Method, target)
			want := `query parameter "` + name + `" is given 2 times; give it once`
			if status != http.StatusBadRequest || p.Error != string(svc.KindSpecValidation) || p.Detail != want {
				t.Errorf("%s %s: %d %s %q; want 400 SpecValidationError %q", rt.Method, target, status, p.Error, p.Detail, want)
			}
		}
		target := path + "?nope=1"
		status, p := ask(rt.Method, target)
		if status != http.StatusBadRequest || !strings.HasPrefix(p.Detail, `query parameter "nope" is not known here`) {
			t.Errorf("%s %s: %d %q; want 400 naming the unknown parameter", rt.Method, target, status, p.Detail)
		}
	}
	if covered < 10 {
		t.Fatalf("only %d parameters checked; the document lists more", covered)
	}
}

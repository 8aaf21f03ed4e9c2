package server_test

import (
	"net/http"
	"strings"
	"testing"

	"go.uber.org/zap"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/http/server"
)

// TestBodyMediaType: a body of any other type than application/json is a
// 415 on every route that reads one, so an HTML form or a text/plain
// fetch (which a browser sends cross-site without a preflight) cannot
// start a run.
func TestBodyMediaType(t *testing.T) {
	srv, _ := newRunRouter(t, "")
	routes := []struct{ path, body string }{
		{"/agents/echo/run", `{"input":1}`},
		{"/agents/echo/gather", `{"tasks":[{"input":1}]}`},
		{"/submit", `{"target":"echo","task":{"input":1}}`},
	}
	for _, rt := range routes {
		for _, ct := range []string{"", "text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
			"multipart/form-data; boundary=x", "application/json; charset=latin1", "application/jsonx", "application/json;;"} {
			r := do(t, srv, http.MethodPost, rt.path, rt.body, "Content-Type", ct)
			p := problem(t, r, http.StatusUnsupportedMediaType)
			if p.Error != string(svc.KindUnsupportedMediaType) || !strings.Contains(p.Detail, "application/json") {
				t.Errorf("%s with %q: %+v", rt.path, ct, p)
			}
		}
		for _, ct := range []string{"application/json", "application/json; charset=utf-8", "Application/JSON;Charset=\"UTF-8\""} {
			r := do(t, srv, http.MethodPost, rt.path, rt.body, "Content-Type", ct)
			if r.status/100 != 2 {
				t.Errorf("%s with %q = %d %s", rt.path, ct, r.status, r.body)
			}
		}
	}
}

// TestCancelBodyOptional: cancel needs no body, so it needs no
// Content-Type; a body it is sent must still be JSON.
func TestCancelBodyOptional(t *testing.T) {
	srv, f := newRunRouter(t, "")
	f.Hold = make(chan struct{})
	id, _ := submit(t, srv, "", `{"target":"slow","task":{"input":1}}`)
	problem(t, do(t, srv, http.MethodPost, "/runs/"+id+"/cancel", "x", "Content-Type", "text/plain"), http.StatusUnsupportedMediaType)
	if r := do(t, srv, http.MethodPost, "/runs/"+id+"/cancel", ""); r.status != http.StatusNoContent {
		t.Errorf("cancel without a body = %d %s", r.status, r.body)
	}
	if r := do(t, srv, http.MethodPost, "/runs/"+id+"/cancel", "{}"); r.status != http.StatusNoContent {
		t.Errorf("cancel with a JSON body = %d %s", r.status, r.body)
	}
	waitState(t, srv, "", id)
}

// TestOrigin: a browser request from another site is a 403 unless its
// origin is allowed; same-origin pages and clients that send no Origin
// pass; allowed origins get CORS answers, preflight included, ahead of
// the bearer token a preflight cannot carry.
func TestOrigin(t *testing.T) {
	for _, allowed := range [][]string{nil, {"https://app.example", "http://localhost:3000"}} {
		h, err := server.NewStandalone(&fakeBackend{}, server.StandaloneConfig{
			AuthToken: "s3cret", Logger: zap.NewNop(), AllowedOrigins: allowed})
		if err != nil {
			t.Fatal(err)
		}
		srv := serve(t, h)
		self := "http://" + srv.Listener.Addr().String()
		auth := "Bearer s3cret"
		for _, tc := range []struct {
			origin string
			ok     bool
		}{
			{"", true},
			{self, true},
			{strings.ToUpper(self[:4]) + self[4:], true},
			{"https://" + srv.Listener.Addr().String(), false}, // another scheme is another origin
			{"http://evil.example", false},
			{"null", false},
			{"http://localhost:3000", allowed != nil},
			{"https://app.example", allowed != nil},
			{"https://app.example:443", allowed != nil},
			{"http://app.example", false},
			{"https://app.example.evil", false},
			{"garbage", false},
		} {
			r := do(t, srv, http.MethodPost, "/agents/echo/run", `{"input":1}`, "Origin", tc.origin, "Authorization", auth)
			if !tc.ok {
				if p := problem(t, r, http.StatusForbidden); p.Error != string(svc.KindForbiddenOrigin) {
					t.Errorf("origin %q (allowed %v): %+v", tc.origin, allowed, p)
				}
				if r.header.Get("Access-Control-Allow-Origin") != "" {
					t.Errorf("origin %q: a refusal carries Access-Control-Allow-Origin", tc.origin)
				}
				continue
			}
			if r.status != http.StatusOK {
				t.Errorf("origin %q (allowed %v) = %d %s", tc.origin, allowed, r.status, r.body)
			}
			want := "" // no CORS headers for clients without an Origin, nor for the server's own pages
			if tc.origin != "" && !strings.EqualFold(tc.origin, self) {
				want = tc.origin
			}
			if got := r.header.Get("Access-Control-Allow-Origin"); got != want {
				t.Errorf("origin %q: Access-Control-Allow-Origin %q", tc.origin, got)
			}
		}
		// A preflight carries no token; an allowed origin is answered, any
		// other is refused.
		pre := do(t, srv, http.MethodOptions, "/agents/echo/run", "", "Origin", "https://app.example",
			"Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", "authorization, content-type")
		if allowed == nil {
			problem(t, pre, http.StatusForbidden)
			continue
		}
		if pre.status != http.StatusNoContent || pre.header.Get("Access-Control-Allow-Origin") != "https://app.example" ||
			!strings.Contains(pre.header.Get("Access-Control-Allow-Methods"), "POST") ||
			!strings.Contains(strings.ToLower(pre.header.Get("Access-Control-Allow-Headers")), "authorization") {
			t.Errorf("preflight = %d %v", pre.status, pre.header)
		}
		// An error answer to an allowed origin is readable by its page too.
		r := do(t, srv, http.MethodPost, "/agents/echo/run", `{"input":1}`, "Origin", "https://app.example")
		problem(t, r, http.StatusUnauthorized)
		if r.header.Get("Access-Control-Allow-Origin") != "https://app.example" {
			t.Errorf("401 to an allowed origin lacks Access-Control-Allow-Origin: %v", r.header)
		}
	}
	for _, bad := range [][]string{{"*"}, {"app.example"}, {"https://app.example/path"}, {"ftp://x"}, {"null"}} {
		if _, err := server.NewStandalone(&fakeBackend{}, server.StandaloneConfig{AllowedOrigins: bad}); err == nil {
			t.Errorf("AllowedOrigins %q accepted", bad)
		}
	}
}

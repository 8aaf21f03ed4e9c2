package server_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/http/server"
)

// pageHandler stands in for dashboard.Handler: it answers with the path it
// was given, so a test sees what the router handed it.
var pageHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain")
	_, _ = w.Write([]byte("page:" + r.URL.Path))
})

// TestWithDashboard: the page is served below /dashboard/ with the path
// relative to it, /dashboard redirects relatively, and both hold when the
// router is mounted under a prefix.
func TestWithDashboard(t *testing.T) {
	if _, err := server.NewRouter(&fakeBackend{}, server.WithDashboard(nil)); err == nil {
		t.Error("WithDashboard(nil) accepted")
	}
	rt, err := server.NewRouter(&fakeBackend{}, server.WithDashboard(pageHandler))
	if err != nil {
		t.Fatal(err)
	}
	host := chi.NewRouter()
	host.Mount("/svc", rt)
	for name, srv := range map[string]*httptest.Server{"root": serve(t, rt), "mounted": serve(t, host)} {
		prefix := ""
		if name == "mounted" {
			prefix = "/svc"
		}
		t.Run(name, func(t *testing.T) {
			for path, want := range map[string]string{"/dashboard/": "page:/", "/dashboard/js/app.js": "page:/js/app.js"} {
				if r := do(t, srv, "GET", prefix+path, ""); r.status != 200 || string(r.body) != want {
					t.Errorf("GET %s: %d %q, want %q", prefix+path, r.status, r.body, want)
				}
			}
			client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			res, err := client.Get(srv.URL + prefix + "/dashboard")
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			loc, _ := res.Location()
			if res.StatusCode != http.StatusMovedPermanently || loc == nil || loc.Path != prefix+"/dashboard/" {
				t.Errorf("GET %s/dashboard: %d to %v, want 301 to %s/dashboard/", prefix, res.StatusCode, loc, prefix)
			}
		})
	}
	// Without the option there is no page.
	plain, err := server.NewRouter(&fakeBackend{})
	if err != nil {
		t.Fatal(err)
	}
	problem(t, do(t, serve(t, plain), "GET", "/dashboard/", ""), 404)
}

// TestStandaloneDashboardAuth: the page's files need no token (a browser
// cannot send one when it opens the page), everything else still does,
// including paths that only look as if they were below /dashboard/.
func TestStandaloneDashboardAuth(t *testing.T) {
	h, err := server.NewStandalone(&fakeBackend{}, server.StandaloneConfig{AuthToken: "s3cret", Logger: zap.NewNop(),
		RouterOptions: []server.Option{server.WithDashboard(pageHandler)}})
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, h)
	for _, path := range []string{"/dashboard/", "/dashboard/style.css", "/dashboard/js/api.js"} {
		if r := do(t, srv, "GET", path, ""); r.status != 200 || !strings.HasPrefix(string(r.body), "page:") {
			t.Errorf("GET %s without a token: %d %q, want the page", path, r.status, r.body)
		}
	}
	for _, path := range []string{"/agents", "/dashboard/../agents", "/dashboardx", "/dashboard/%2e%2e/agents", "/events/stream"} {
		r := do(t, srv, "GET", path, "")
		if r.status == 200 {
			t.Errorf("GET %s without a token: 200 %q", path, r.body)
		}
		switch path {
		case "/agents", "/dashboardx", "/events/stream":
			problem(t, r, 401)
		default:
			// A dot segment is refused before the token is looked at
			// (CheckPath): no route has one.
			problem(t, r, 400)
		}
	}
}

package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/go-chi/chi/v5"
	"go.uber.org/zap"

	svc "github.com/svc-dev/svc"
)

// fakeKeys is an Authenticator of fixed keys: "key-<scope>" holds that
// one scope (tenant t-<scope>), "expired" is expired.
type fakeKeys struct {
	mu     sync.Mutex
	denied []string // "route: reason (key id)"
}

func (f *fakeKeys) Authenticate(token string) (svc.Principal, error) {
	if token == "expired" {
		return svc.Principal{KeyID: "k-expired", Tenant: "t"}, svc.Errorf(svc.KindUnauthorized, "the API key expired at 2020-01-01T00:00:00Z")
	}
	s, ok := strings.CutPrefix(token, "key-")
	if !ok || !svc.KeyScope(s).Valid() {
		return svc.Principal{}, svc.Errorf(svc.KindUnauthorized, "invalid bearer token")
	}
	return svc.Principal{KeyID: "k-" + s, Tenant: "t-" + s, Scopes: []svc.KeyScope{svc.KeyScope(s)}}, nil
}

func (f *fakeKeys) Denied(p svc.Principal, route, reason string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.denied = append(f.denied, route+": "+reason+" ("+p.KeyID+")")
}

func (f *fakeKeys) KeyUsage() []svc.KeyUse {
	return []svc.KeyUse{{KeyID: "k-admin", Tenant: "t-admin", Requests: 7}}
}

// standaloneRoutes walks the routes of the standalone server with every
// option on: those of NewRouter with its options, the observation routes,
// /metrics and /mcp.
func standaloneRoutes(t *testing.T, opts []Option, cfg StandaloneConfig) [][2]string {
	t.Helper()
	rt, err := NewRouter(everything{}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	mountObservation(rt, everything{}, cfg.Events, nil)
	rt.Method(http.MethodGet, "/metrics", cfg.Metrics)
	rt.Handle(MCPPath, cfg.MCP)
	var routes [][2]string
	err = chi.Walk(rt, func(method, pattern string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		routes = append(routes, [2]string{method, pattern})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(routes) < 30 {
		t.Fatalf("walked %d routes; the router has more", len(routes))
	}
	return routes
}

// openRoute reports whether the standalone server serves pattern without
// a key: the health checks and the dashboard.
func openRoute(pattern string) bool {
	return openPaths[pattern] || pattern == "/dashboard" || strings.HasPrefix(pattern, DashboardPath)
}

// TestEveryRouteHasAScope: every route of the standalone server, found by
// walking the router as the OpenAPI coverage test does, is open or has a
// scope in routeScopes, and every entry of routeScopes is a route: a route
// added without deciding who may use it fails here.
func TestEveryRouteHasAScope(t *testing.T) {
	opts := []Option{WithSSEEmitter(struct{ svc.EventSubscriber }{}), WithDashboard(http.NotFoundHandler())}
	cfg := StandaloneConfig{Events: struct{ svc.EventReader }{}, Metrics: http.NotFoundHandler(), MCP: http.NotFoundHandler()}
	used := map[string]bool{}
	for _, r := range standaloneRoutes(t, opts, cfg) {
		method, pattern := r[0], r[1]
		if openRoute(pattern) {
			continue
		}
		if _, ok := scopeOf(method, pattern); !ok {
			t.Errorf("%s %s has no scope in routeScopes", method, pattern)
		}
		for _, k := range []string{method + " " + pattern, "* " + pattern} {
			if _, ok := routeScopes[k]; ok {
				used[k] = true
			}
		}
	}
	for k := range routeScopes {
		if !used[k] {
			t.Errorf("routeScopes has %q, which no route of the server is", k)
		}
	}
}

// TestKeyAuthScopes: on every route of the standalone server, a key
// without the route's scope is refused with 403 ForbiddenError before any
// handler runs, and the refusal is reported with its route; the key with
// the scope, and an admin key, get past the check; a missing, unknown or
// expired key is a 401 with a challenge.
func TestKeyAuthScopes(t *testing.T) {
	var (
		mu      sync.Mutex
		reached []svc.Principal
	)
	record := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, _ := svc.PrincipalFrom(r.Context())
		mu.Lock()
		reached = append(reached, p)
		mu.Unlock()
		w.WriteHeader(http.StatusTeapot)
	})
	opts := []Option{WithSSEEmitter(struct{ svc.EventSubscriber }{}), WithDashboard(record)}
	keys := &fakeKeys{}
	// everything's methods are nil interfaces: a handler that calls the
	// backend panics, which the standalone server answers 500; past the
	// key check anything but 401 and 403 will do.
	cfg := StandaloneConfig{Keys: keys, Logger: zap.NewNop(), RouterOptions: opts,
		Events: struct{ svc.EventReader }{}, Metrics: record, MCP: record}
	h, err := NewStandalone(everything{}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	send := func(method, path, key string) (int, Problem, http.Header) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var p Problem
		_ = json.NewDecoder(resp.Body).Decode(&p)
		return resp.StatusCode, p, resp.Header
	}
	checked := 0
	for _, r := range standaloneRoutes(t, opts, cfg) {
		method, pattern := r[0], r[1]
		if openRoute(pattern) || method == http.MethodConnect || method == http.MethodTrace || method == http.MethodOptions {
			continue
		}
		path := routeParam.ReplaceAllString(pattern, "x")
		need, _ := scopeOf(method, pattern)
		for _, s := range svc.KeyScopes {
			status, p, _ := send(method, path, "key-"+string(s))
			if method == http.MethodHead && status == http.StatusForbidden {
				// No body to read: the status says it.
				p = Problem{Error: string(svc.KindForbidden), Detail: "the " + string(need) + " scope"}
			}
			allowed := need == scopeAny || s == need || s == svc.ScopeAdmin
			switch {
			case allowed && (status == http.StatusUnauthorized || status == http.StatusForbidden && strings.Contains(p.Detail, "lacks the")):
				// (A handler's own 403, such as the event routes' for a
				// key that is not an admin one, is past the key check.)
				t.Errorf("%s %s with a %s key: %d %s; the route needs %q", method, path, s, status, p.Detail, need)
			case !allowed && (status != http.StatusForbidden || p.Error != string(svc.KindForbidden) || !strings.Contains(p.Detail, "the "+string(need)+" scope")):
				t.Errorf("%s %s with a %s key: %d %+v; want 403 ForbiddenError naming the %s scope", method, path, s, status, p, need)
			}
			if !allowed {
				checked++
			}
		}
		if status, _, hdr := send(method, path, ""); status != http.StatusUnauthorized || !strings.HasPrefix(hdr.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s %s without a key: %d, want 401 with a challenge", method, path, status)
		}
	}
	if checked < 40 {
		t.Errorf("only %d refusals checked", checked)
	}
	mu.Lock()
	for _, p := range reached {
		if p.KeyID == "" {
			t.Errorf("a handler ran without a principal in its context")
		}
	}
	mu.Unlock()

	t.Run("refusals are reported", func(t *testing.T) {
		keys.mu.Lock()
		keys.denied = nil
		keys.mu.Unlock()
		send(http.MethodGet, "/metrics", "key-read")
		send(http.MethodGet, "/runs", "")
		send(http.MethodGet, "/runs", "guess")
		send(http.MethodGet, "/runs", "expired")
		keys.mu.Lock()
		got := strings.Join(keys.denied, "\n")
		keys.mu.Unlock()
		want := "GET /metrics: lacks the admin scope (k-read)\nGET /runs: missing bearer token ()\nGET /runs: invalid bearer token ()\nGET /runs: the API key expired at 2020-01-01T00:00:00Z (k-expired)"
		if got != want {
			t.Errorf("denied:\n%s\nwant:\n%s", got, want)
		}
	})
	t.Run("expired", func(t *testing.T) {
		status, p, hdr := send(http.MethodGet, "/agents", "expired")
		if status != http.StatusUnauthorized || p.Error != string(svc.KindUnauthorized) || !strings.Contains(p.Detail, "expired") ||
			!strings.Contains(hdr.Get("WWW-Authenticate"), `error="invalid_token"`) {
			t.Errorf("expired key: %d %+v", status, p)
		}
	})
	t.Run("the handler sees the principal", func(t *testing.T) {
		mu.Lock()
		reached = nil
		mu.Unlock()
		if status, _, _ := send(http.MethodPost, MCPPath, "key-run"); status != http.StatusTeapot {
			t.Fatalf("POST /mcp with a run key: %d", status)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(reached) != 1 || reached[0].Tenant != "t-run" || reached[0].KeyID != "k-run" {
			t.Errorf("principal in the handler: %+v", reached)
		}
	})
	t.Run("open routes stay open", func(t *testing.T) {
		if status, _, _ := send(http.MethodGet, DashboardPath, ""); status != http.StatusTeapot {
			t.Errorf("GET /dashboard/ without a key: %d", status)
		}
	})
	t.Run("an unknown path with a valid key is a 404", func(t *testing.T) {
		if status, p, _ := send(http.MethodGet, "/nowhere", "key-read"); status != http.StatusNotFound || p.Error != string(svc.KindNotFound) {
			t.Errorf("GET /nowhere: %d %+v", status, p)
		}
	})
	t.Run("both an auth token and keys", func(t *testing.T) {
		if _, err := NewStandalone(everything{}, StandaloneConfig{Keys: keys, AuthToken: "x", Logger: zap.NewNop()}); err == nil {
			t.Error("NewStandalone took both")
		}
	})
}

// TestStatsShowKeyUseToAdmin: GET /runtime/stats lists the keys' use for an
// admin key; a read key is refused (the stats are every tenant's).
func TestStatsShowKeyUseToAdmin(t *testing.T) {
	b := &statsBackend{}
	h, err := NewStandalone(b, StandaloneConfig{Keys: &fakeKeys{}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	get := func(key string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, "/runtime/stats", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w
	}
	w := get("key-admin")
	var st svc.RuntimeStats
	if err := json.Unmarshal(w.Body.Bytes(), &st); err != nil || w.Code != http.StatusOK {
		t.Fatalf("admin: %d %s", w.Code, w.Body)
	}
	if len(st.Keys) != 1 || st.Keys[0].Requests != 7 {
		t.Errorf("admin: keys %+v, want the auditor's one", st.Keys)
	}
	if w := get("key-read"); w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), "ForbiddenError") {
		t.Errorf("read key: %d %s, want 403", w.Code, w.Body)
	}
}

// statsBackend serves /runtime/stats from its runs in flight alone.
type statsBackend struct{ svc.Backend }

func (statsBackend) RunsInFlight() int64 { return 0 }

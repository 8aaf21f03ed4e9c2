package server

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"go.uber.org/zap"

	svc "github.com/svc-dev/svc"
)

// rawReply is an answer read off the wire.
type rawReply struct {
	status int
	header http.Header
	body   []byte
}

// rawRequest sends method target (written on the request line exactly as
// given: no client cleans or re-escapes it) to addr over a new connection.
func rawRequest(t *testing.T, addr, method, target string, hdr ...string) rawReply {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n", method, target, addr)
	for i := 0; i+1 < len(hdr); i += 2 {
		fmt.Fprintf(&b, "%s: %s\r\n", hdr[i], hdr[i+1])
	}
	body := ""
	if method == http.MethodPost {
		// A body every POST route takes, so that a request that got to a
		// handler would reach the backend rather than stop at the body.
		body = `{"input":1,"tasks":[{"input":1}],"target":"echo","task":{"input":1}}`
		if strings.Contains(target, "/gather") {
			body = `{"tasks":[{"input":1}]}`
		} else if strings.Contains(target, "/submit") {
			body = `{"target":"echo","task":{"input":1}}`
		} else {
			body = `{"input":1}`
		}
		fmt.Fprintf(&b, "Content-Type: application/json\r\nContent-Length: %d\r\n", len(body))
	}
	b.WriteString("\r\n" + body)
	if _, err := io.WriteString(c, b.String()); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(method, "/", nil)
	resp, err := http.ReadResponse(bufio.NewReader(c), req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return rawReply{resp.StatusCode, resp.Header, data}
}

// paramTricks are values put in a path parameter to make the path read one
// way to a check that decodes or cleans it and another to the router;
// tricky says whether the path must be refused whoever asks (400), rather
// than simply need the token like any other guarded path.
var paramTricks = []struct {
	value  string
	tricky bool
}{
	{"..%2F..%2Fdashboard%2Fx", true}, // issue 25
	{"..%2f..%2fdashboard%2fx", true}, // lower-case escapes
	{"..%2F..%2FDashBoard%2Fx", true}, // mixed case
	{"%2e%2e%2F%2e%2e%2Fdashboard%2Fx", true},
	{"%2E%2E", true},
	{"%2e", true},
	{"..", true},
	{".", true},
	{"..%5C..%5Cdashboard", true},
	{"..%5c..%5cdashboard", true},
	{`..\..\dashboard`, true},
	{"..%2F..%2Fhealthz", true},
	{"%2e%2e/%2e%2e/dashboard/x", true},
	{"../../dashboard/x", true},
	{"", false},                    // "//"
	{"x/", false},                  // an empty segment after it
	{"..//..//dashboard//x", true}, // dot segments all the same
	{"x%252F..%252Fdashboard", false},
}

// pathTricks are whole-path variants of p, a route with its parameters
// filled in.
func pathTricks(p string) []struct {
	target string
	tricky bool
} {
	upper := "/" + strings.ToUpper(p[1:2]) + p[2:]
	return []struct {
		target string
		tricky bool
	}{
		{p + "/", false}, // trailing slash
		{"/" + p, false}, // double slash
		{upper, false},   // mixed case
		{strings.ToUpper(p), false},
		{"/dashboard/.." + p, true},
		{"/dashboard/%2e%2e" + p, true},
		{"/dashboard/%2E%2E" + p, true},
		{"/dashboard/..%2F.." + p, true},
		{"/dashboard/x/../.." + p, true},
		{"/healthz/.." + p, true},
		{"/./" + p[1:], true},
		{p + "/..", true},
		{p + "/.", true},
		{p + "/%2e%2e", true},
	}
}

// cleanDashboardPath is a path the dashboard's handler may be reached by:
// below /dashboard/, without a dot segment, an escaped dot, slash or
// backslash. (Written out here rather than with pathTrick, which is what
// the test checks.)
func cleanDashboardPath(target string) bool {
	if !strings.HasPrefix(target, "/dashboard/") {
		return false
	}
	lower := strings.ToLower(target)
	for _, bad := range []string{"%2e", "%2f", "%5c", `\`, "/./", "/../"} {
		if strings.Contains(lower, bad) {
			return false
		}
	}
	return !strings.HasSuffix(target, "/.") && !strings.HasSuffix(target, "/..")
}

var routeParam = regexp.MustCompile(`\{[^}]+\}|\*$`)

// TestPathTricksReachNoHandler (issue 25 part 3): with a token configured
// and none sent, no path trick in any path parameter of any route of the
// standalone server, nor around any route, reaches a handler: the answer
// is CheckPath's 400 or BearerAuth's 401, never a handler's. A trick that
// makes the path read otherwise when decoded or cleaned is a 400 with the
// token too. Every route is found by walking the router, as the OpenAPI
// coverage test does, so a new route is covered when it is added.
func TestPathTricksReachNoHandler(t *testing.T) {
	var (
		mu      sync.Mutex
		reached []string
	)
	record := func(what string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			reached = append(reached, what+" "+r.Method+" "+r.RequestURI)
			mu.Unlock()
			w.WriteHeader(http.StatusTeapot)
		})
	}
	opts := []Option{WithSSEEmitter(struct{ svc.EventSubscriber }{}), WithDashboard(record("dashboard"))}
	// everything's methods are nil interfaces: a handler that calls the
	// backend panics, which the standalone server answers 500.
	cfg := StandaloneConfig{AuthToken: "s3cret", Logger: zap.NewNop(), RouterOptions: opts,
		Events: struct{ svc.EventReader }{}, Metrics: record("metrics"), MCP: record("mcp")}
	h, err := NewStandalone(everything{}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	addr := srv.Listener.Addr().String()

	rt, err := NewRouter(everything{}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	mountObservation(rt, everything{}, cfg.Events, nil)
	rt.Method(http.MethodGet, "/metrics", cfg.Metrics)
	rt.Handle(MCPPath, cfg.MCP)
	type route struct{ method, pattern string }
	var routes []route
	err = chi.Walk(rt, func(method, pattern string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		routes = append(routes, route{method, pattern})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(routes) < 30 {
		t.Fatalf("walked %d routes; the router has more", len(routes))
	}

	check := func(t *testing.T, method, target string, tricky bool) {
		t.Helper()
		mu.Lock()
		before := len(reached)
		mu.Unlock()
		for _, token := range []bool{false, true} {
			var hdr []string
			if token {
				if !tricky {
					continue // with the token, a plain path is served: not this test's business
				}
				hdr = []string{"Authorization", "Bearer s3cret"}
			}
			r := rawRequest(t, addr, method, target, hdr...)
			var p Problem
			_ = json.Unmarshal(r.body, &p)
			isCheckPath := r.status == http.StatusBadRequest && p.Error == string(svc.KindSpecValidation) && strings.HasPrefix(p.Detail, "path ")
			if method == http.MethodHead {
				// No body to tell whose 400 or 401 it is; that no handler
				// ran is checked below all the same.
				isCheckPath = r.status == http.StatusBadRequest
				p.Error = string(svc.KindUnauthorized)
			}
			mu.Lock()
			got := reached[before:]
			mu.Unlock()
			switch {
			case tricky && !isCheckPath:
				t.Errorf("%s %s (token %v): %d %s; want CheckPath's 400", method, target, token, r.status, r.body)
			case !tricky && len(got) > 0 && cleanDashboardPath(target):
				// The dashboard's files are open: a plain path below it
				// may get there.
			case !tricky && (r.status != http.StatusUnauthorized || p.Error != string(svc.KindUnauthorized)):
				t.Errorf("%s %s without a token: %d %s; want 401", method, target, r.status, r.body)
			}
			if len(got) > 0 && !(!tricky && cleanDashboardPath(target)) {
				t.Errorf("%s %s (token %v) reached a handler: %v", method, target, token, got)
			}
		}
	}

	for _, rt := range routes {
		if rt.method == http.MethodOptions || rt.method == http.MethodConnect || rt.method == http.MethodTrace {
			continue
		}
		params := routeParam.FindAllStringIndex(rt.pattern, -1)
		t.Run(rt.method+" "+rt.pattern, func(t *testing.T) {
			fill := func(skip int, v string) string {
				var b strings.Builder
				last := 0
				for i, loc := range params {
					b.WriteString(rt.pattern[last:loc[0]])
					if i == skip {
						b.WriteString(v)
					} else {
						b.WriteString("x")
					}
					last = loc[1]
				}
				b.WriteString(rt.pattern[last:])
				return b.String()
			}
			for i := range params {
				for _, tr := range paramTricks {
					check(t, rt.method, fill(i, tr.value), tr.tricky)
				}
			}
			for _, tr := range pathTricks(fill(-1, "")) {
				check(t, rt.method, tr.target, tr.tricky)
			}
		})
	}
}

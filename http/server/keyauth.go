package server

import (
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"

	svc "github.com/svc-dev/svc"
)

// Authenticator tells who presented a bearer token (package tenant's
// Keyring, from svc serve --api-keys).
type Authenticator interface {
	// Authenticate returns the principal of token, or an
	// UnauthorizedError: for a key it does not know (with a zero
	// principal), or for an expired one (with the key's principal).
	Authenticate(token string) (svc.Principal, error)
	// Denied records a refused request (for audit); p is zero when the
	// key was missing or unknown. reason never holds the key.
	Denied(p svc.Principal, route, reason string)
}

// KeyAuditor is an Authenticator that also counts the use of each key:
// GET /runtime/stats shows it to admin keys.
type KeyAuditor interface {
	KeyUsage() []svc.KeyUse
}

// scopeAny is the scope of the routes any valid key may use: the
// discovery routes (the agents, groups, schemas, topologies and the
// OpenAPI document), which every client needs whatever it does.
const scopeAny svc.KeyScope = ""

// routeScopes is the scope each route needs, by "METHOD pattern" as chi
// routes it ("* pattern" for a route of every method). The health checks
// and the dashboard's files are open (openPath) and need no entry. A
// route missing here is refused to every key but an admin one (and a test
// walks the router so that none is missing).
var routeScopes = map[string]svc.KeyScope{
	"GET /agents":                 scopeAny,
	"GET /agents/{name}/schema":   scopeAny,
	"GET /groups":                 scopeAny,
	"GET /groups/{name}/topology": scopeAny,
	"GET /openapi.json":           scopeAny,

	"POST /agents/{name}/run":    svc.ScopeRun,
	"POST /agents/{name}/gather": svc.ScopeRun,
	"POST /groups/{name}/run":    svc.ScopeRun,
	"* " + MCPPath:               svc.ScopeRun,

	"POST /submit":              svc.ScopeSubmit,
	"POST /runs/{id}/cancel":    svc.ScopeSubmit,
	"POST /runs/{id}/resume":    svc.ScopeSubmit,
	"POST /batches":             svc.ScopeSubmit,
	"POST /batches/{id}/cancel": svc.ScopeSubmit,

	"GET /runs":                 svc.ScopeRead,
	"GET /runs/{id}/status":     svc.ScopeRead,
	"GET /runs/{id}/result":     svc.ScopeRead,
	"GET /runs/{id}/stream":     svc.ScopeRead,
	"GET /runs/{trace_id}/tree": svc.ScopeRead,
	"GET /batches":              svc.ScopeRead,
	"GET /batches/{id}":         svc.ScopeRead,
	"GET /batches/{id}/results": svc.ScopeRead,
	"GET /events":               svc.ScopeRead,
	"GET /events/stream":        svc.ScopeRead,
	"GET /usage":                svc.ScopeRead,
	"GET /tools":                svc.ScopeRead,
	"GET /runtime/stats":        svc.ScopeRead,

	// The runtime-wide budget is every tenant's: only admin reads or
	// resets it. So are the process's metrics.
	"GET /runtime/budget":        svc.ScopeAdmin,
	"POST /runtime/budget/reset": svc.ScopeAdmin,
	"GET /metrics":               svc.ScopeAdmin,
}

// scopeOf returns the scope the route of pattern needs, and false when
// the table has none.
func scopeOf(method, pattern string) (svc.KeyScope, bool) {
	if s, ok := routeScopes[method+" "+pattern]; ok {
		return s, true
	}
	if method == http.MethodHead {
		if s, ok := routeScopes[http.MethodGet+" "+pattern]; ok {
			return s, true
		}
	}
	s, ok := routeScopes["* "+pattern]
	return s, ok
}

// KeyAuth refuses requests without a valid API key: a missing, unknown or
// expired key is a 401 UnauthorizedError with a WWW-Authenticate
// challenge, a key without the scope the route needs (routeScopes) a 403
// ForbiddenError. rt is the router the requests go to, whose route
// patterns say which scope a request needs; a path it has no route for is
// let through to its 404 once the key is valid. The health checks and the
// dashboard's files stay open (openPath). The caller's svc.Principal is
// put in the request's context. Refusals are reported to a.Denied; the
// key never appears in an answer or a log.
func KeyAuth(a Authenticator, rt chi.Routes) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if openPath(r) {
				next.ServeHTTP(w, r)
				return
			}
			pattern := rt.Find(chi.NewRouteContext(), r.Method, routedPath(r))
			route := r.Method + " " + pattern
			if pattern == "" {
				route = r.Method + " (no route)"
			}
			got, ok := bearerToken(r.Header.Get("Authorization"))
			if !ok {
				a.Denied(svc.Principal{}, route, "missing bearer token")
				w.Header().Set("WWW-Authenticate", `Bearer realm="svc"`)
				writeProblem(w, r, http.StatusUnauthorized, Problem{Error: string(svc.KindUnauthorized), Detail: "missing bearer token"})
				return
			}
			p, err := a.Authenticate(got)
			if err != nil {
				detail := "invalid bearer token"
				if e, ok := err.(*svc.Error); ok && e.Kind == svc.KindUnauthorized && e.Message != "" {
					detail = e.Message
				}
				a.Denied(p, route, detail)
				w.Header().Set("WWW-Authenticate", `Bearer realm="svc", error="invalid_token"`)
				writeProblem(w, r, http.StatusUnauthorized, Problem{Error: string(svc.KindUnauthorized), Detail: detail})
				return
			}
			if pattern != "" {
				need, known := scopeOf(r.Method, pattern)
				if !known {
					need = svc.ScopeAdmin
				}
				if need != scopeAny && !p.Has(need) {
					detail := "the API key lacks the " + string(need) + " scope this route needs (it has " + scopeList(p.Scopes) + ")"
					a.Denied(p, route, "lacks the "+string(need)+" scope")
					writeProblem(w, r, http.StatusForbidden, Problem{Error: string(svc.KindForbidden), Detail: detail})
					return
				}
			}
			next.ServeHTTP(w, r.WithContext(svc.WithPrincipal(r.Context(), p)))
		})
	}
}

func scopeList(s []svc.KeyScope) string {
	names := make([]string, len(s))
	for i, x := range s {
		names[i] = string(x)
	}
	return strings.Join(names, ", ")
}

// everyTenants refuses, as a ForbiddenError, a caller whose API key is not
// an admin one on a route that serves the events and rollups of every
// tenant: runtime events do not carry their tenant yet (issue 34), so
// such a route cannot show a tenant its own alone, and shows it nothing
// rather than another tenant's. route names the route in the message.
func everyTenants(r *http.Request, route string) error {
	if p, ok := svc.PrincipalFrom(r.Context()); ok && !p.Admin() {
		return svc.Errorf(svc.KindForbidden, "%s serves every tenant's events, which are not kept per tenant yet: it needs an admin key", route)
	}
	return nil
}

// adminEvents wraps h with everyTenants.
func adminEvents(route string, h HandlerFunc) HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		if err := everyTenants(r, route); err != nil {
			return err
		}
		return h(w, r)
	}
}

// adminBatches refuses the batch routes to a caller whose API key is not
// an admin one: batches do not carry their tenant yet (issue 34), so a
// tenant could read or cancel another's; it is refused rather than
// trusted.
func adminBatches(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p, ok := svc.PrincipalFrom(r.Context()); ok && !p.Admin() {
			WriteError(w, r, svc.Errorf(svc.KindForbidden, "batches are not kept per tenant yet: %s %s needs an admin key", r.Method, routedPath(r)))
			return
		}
		next.ServeHTTP(w, r)
	})
}

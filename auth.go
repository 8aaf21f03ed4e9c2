package svc

import (
	"context"
	"slices"
	"time"
)

// KeyScope is one thing an API key may do (svc serve --api-keys). A route
// asks for one scope; a key holding it, or ScopeAdmin, may use the route.
type KeyScope string

const (
	// ScopeRun runs agents and groups and waits: POST /agents/{name}/run,
	// /agents/{name}/gather, /groups/{name}/run, and /mcp.
	ScopeRun KeyScope = "run"
	// ScopeSubmit starts work in the background and steers it: POST
	// /submit, /batches, and the cancel and resume of runs and batches.
	ScopeSubmit KeyScope = "submit"
	// ScopeRead reads the key's own tenant's runs, batches, events and
	// rollups.
	ScopeRead KeyScope = "read"
	// ScopeAdmin may do everything, over every tenant: reset the budget,
	// read /metrics, and see and filter every tenant's data.
	ScopeAdmin KeyScope = "admin"
)

// KeyScopes lists every scope, in the order the documentation gives them.
var KeyScopes = []KeyScope{ScopeRun, ScopeSubmit, ScopeRead, ScopeAdmin}

// Valid reports whether s is one of KeyScopes.
func (s KeyScope) Valid() bool { return slices.Contains(KeyScopes, s) }

// Principal is who made a request: the tenant and scopes of the API key
// it carried. It never holds the key: KeyID names the key in logs and
// stats without revealing it.
type Principal struct {
	// KeyID names the key: "sha256:" and the first 12 hex digits of its
	// SHA-256 (which the key file holds anyway), or "auth-token" for the
	// key of svc serve --auth-token.
	KeyID string
	// Tenant is the tenant the key belongs to; "" is the default tenant,
	// the one of --auth-token and of data written before tenants.
	Tenant string
	// Scopes are what the key may do.
	Scopes []KeyScope
}

// Admin reports whether the principal holds ScopeAdmin.
func (p Principal) Admin() bool { return slices.Contains(p.Scopes, ScopeAdmin) }

// Has reports whether the principal may use a route that needs s: it
// holds s, or ScopeAdmin.
func (p Principal) Has(s KeyScope) bool { return p.Admin() || slices.Contains(p.Scopes, s) }

type principalKey struct{}

// WithPrincipal returns ctx carrying p, the authenticated caller of a
// request; the standalone server's key check sets it.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, &p)
}

// PrincipalFrom returns the principal in ctx, and false when there is
// none: a server without API keys (or an embedding host's router), where
// every caller sees everything.
func PrincipalFrom(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(*Principal)
	if !ok {
		return Principal{}, false
	}
	return *p, true
}

// TenantFrom returns the tenant of the principal in ctx: "" (the default
// tenant) when there is none. A run submitted in ctx belongs to it.
func TenantFrom(ctx context.Context) string {
	p, _ := PrincipalFrom(ctx)
	return p.Tenant
}

// Sees reports whether the principal may see data of tenant: an admin
// sees every tenant's, any other principal its own tenant's only.
func (p Principal) Sees(tenant string) bool { return p.Admin() || p.Tenant == tenant }

// KeyUse is the audit of one API key since the server started: shown to
// admin keys in GET /runtime/stats.
type KeyUse struct {
	KeyID  string `json:"key_id"`
	Tenant string `json:"tenant"`
	// Requests counts the requests the key authenticated, refused ones
	// (Denied) included.
	Requests int64 `json:"requests"`
	// Denied counts the key's requests refused for want of a scope, or
	// because it had expired.
	Denied int64 `json:"denied"`
	// LastUse is when the key was last presented; absent before its first
	// use.
	LastUse time.Time `json:"last_use,omitzero"`
}

// Package dashboard is the web page of svc: live runs, run trees, history,
// usage, tool latency, health and group topologies, drawn in the browser
// from the public HTTP API alone.
//
// The page is plain HTML, CSS and JavaScript modules embedded in the binary
// (no build step, no CDN, no external fonts), so `go build ./cmd/svc` is all
// it takes. It asks for the bearer token when the server answers 401, keeps
// it in the tab's sessionStorage and sends it only in the Authorization
// header, never in a URL: event streams are read with fetch, not
// EventSource, which cannot send headers.
//
// Handler serves the files; server.WithDashboard mounts them at
// /dashboard/ beside the API routes, which the page finds relative to its
// own address, so a router mounted under a prefix works too.
package dashboard

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

//go:embed static
var files embed.FS

// contentSecurityPolicy lets the page load only its own files and talk
// only to its own origin: no inline script, no third-party anything.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Handler serves the dashboard's files, relative to wherever it is mounted
// (GET /, /app.js, ...). Every answer carries a strict Content-Security-Policy
// and no-cache, so a new binary's page is never mixed with an old one's.
func Handler() http.Handler {
	sub, err := fs.Sub(files, "static")
	if err != nil {
		// The embedded tree is fixed at build time: this cannot fail.
		panic("dashboard: " + err.Error())
	}
	fileServer := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		if r.URL.Path != "/" && strings.HasSuffix(r.URL.Path, "/") {
			// No directory listings: the page is the only index.
			http.NotFound(w, r)
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		fileServer.ServeHTTP(w, r)
	})
}

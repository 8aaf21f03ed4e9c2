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
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
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
	return handlerFS(sub)
}

// Dir serves a customised copy of the dashboard from dir on disk instead
// of the embedded files (`svc serve --dashboard-dir`), with the same
// headers. Files are read at each request, so edits show on reload of the
// page. A dir that is missing, not a directory, or without index.html is
// an error: a page that cannot load is better refused at start.
func Dir(dir string) (http.Handler, error) {
	info, err := os.Stat(dir)
	switch {
	case err != nil:
		return nil, fmt.Errorf("dashboard directory %s: %w", dir, err)
	case !info.IsDir():
		return nil, fmt.Errorf("dashboard directory %s: not a directory", dir)
	}
	fsys := os.DirFS(dir)
	if st, err := fs.Stat(fsys, "index.html"); err != nil || st.IsDir() {
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			err = errors.New("no index.html (copy dashboard/static of the svc sources and edit it)")
		}
		return nil, fmt.Errorf("dashboard directory %s: %w", dir, err)
	}
	return handlerFS(fsys), nil
}

// handlerFS serves the dashboard's files from fsys.
func handlerFS(fsys fs.FS) http.Handler {
	fileServer := http.FileServerFS(fsys)
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

package dashboard_test

import (
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/svc-dev/svc/dashboard"
)

func get(t *testing.T, h http.Handler, method, path string) *http.Response {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	return rec.Result()
}

// TestHandler: the page and its files are served with their types, a
// strict Content-Security-Policy and no-cache; nothing else is.
func TestHandler(t *testing.T) {
	h := dashboard.Handler()
	for path, ctype := range map[string]string{
		"/":             "text/html",
		"/style.css":    "text/css",
		"/js/app.js":    "text/javascript",
		"/js/api.js":    "text/javascript",
		"/js/svg.js":    "text/javascript",
		"/index.html":   "", // redirects to ./
		"/js/":          "", // no listing
		"/nope.js":      "",
		"/../README.md": "",
	} {
		res := get(t, h, http.MethodGet, path)
		body, _ := io.ReadAll(res.Body)
		if ctype == "" {
			if res.StatusCode == http.StatusOK {
				t.Errorf("GET %s: 200 %.60q, want no file", path, body)
			}
			continue
		}
		if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), ctype) {
			t.Errorf("GET %s: %d %s, want 200 %s", path, res.StatusCode, res.Header.Get("Content-Type"), ctype)
		}
		csp := res.Header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "connect-src 'self'") || strings.Contains(csp, "unsafe") {
			t.Errorf("GET %s: Content-Security-Policy %q", path, csp)
		}
		if res.Header.Get("Cache-Control") != "no-cache" || res.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: headers %v", path, res.Header)
		}
	}
	if res := get(t, h, http.MethodPost, "/"); res.StatusCode != http.StatusMethodNotAllowed || res.Header.Get("Allow") != "GET, HEAD" {
		t.Errorf("POST /: %d, Allow %q", res.StatusCode, res.Header.Get("Allow"))
	}
}

// TestSelfContained: the page works with no network. It loads nothing from
// another host (no CDN, no web fonts), every file it names is embedded, it
// has no inline script, and the token never goes into a URL.
func TestSelfContained(t *testing.T) {
	root := os.DirFS("static")
	external := regexp.MustCompile(`(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}`)
	err := fs.WalkDir(root, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(root, path)
		if err != nil {
			return err
		}
		text := strings.ReplaceAll(string(data), "http://www.w3.org/2000/svg", "") // a namespace name, not a fetch
		for _, m := range external.FindAllString(text, -1) {
			t.Errorf("%s names another host: %s", path, m)
		}
		if strings.Contains(text, "EventSource") && !strings.Contains(text, "EventSource cannot") {
			t.Errorf("%s uses EventSource, which cannot send the Authorization header", path)
		}
		if regexp.MustCompile(`[?&]token=`).MatchString(text) {
			t.Errorf("%s puts a token in a URL", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	index, err := os.ReadFile(filepath.Join("static", "index.html"))
	if err != nil {
		t.Fatal(err)
	}
	if regexp.MustCompile(`<script(?:\s[^>]*)?>\s*[^<\s]`).Match(index) {
		t.Error("index.html has an inline script; the Content-Security-Policy refuses it")
	}
	h := dashboard.Handler()
	for _, m := range regexp.MustCompile(`(?:src|href)="([^"#:]+)"`).FindAllSubmatch(index, -1) {
		if res := get(t, h, http.MethodGet, "/"+string(m[1])); res.StatusCode != http.StatusOK {
			t.Errorf("index.html names %s, which is not served (%d)", m[1], res.StatusCode)
		}
	}
	for _, js := range []string{"js/app.js", "js/api.js"} {
		data, _ := os.ReadFile(filepath.Join("static", js))
		for _, m := range regexp.MustCompile(`from '\./([^']+)'`).FindAllSubmatch(data, -1) {
			if res := get(t, h, http.MethodGet, "/js/"+string(m[1])); res.StatusCode != http.StatusOK {
				t.Errorf("%s imports %s, which is not served", js, m[1])
			}
		}
	}
}

// TestOnlyPublicAPI: every request the page makes goes through api.js's
// call or stream, and each path it names is a route of the public HTTP
// API the clients use (issue 16 part 2); no other script fetches.
func TestOnlyPublicAPI(t *testing.T) {
	public := regexp.MustCompile(`^(runs|runs/X/(status|result|stream|cancel|resume|tree)|events|events/stream|usage|tools|runtime/stats|agents|groups|groups/X/topology)$`)
	app, err := os.ReadFile(filepath.Join("static", "js", "app.js"))
	if err != nil {
		t.Fatal(err)
	}
	var n int
	for _, loc := range regexp.MustCompile(`\b(?:call|stream)\(`).FindAllIndex(app, -1) {
		arg := firstArg(app[loc[1]:])
		path := regexp.MustCompile(`\$\{[^}]*\}`).ReplaceAllString(strings.Trim(arg, "`"), "X") // template holes
		path = regexp.MustCompile(`'\s*\+.*?\+\s*'`).ReplaceAllString(path, "X")                // 'a/' + x + '/b'
		path = regexp.MustCompile(`'\s*\+.*$`).ReplaceAllString(path, "")                       // 'a?b=' + x
		path = strings.Trim(path, "'")
		path, _, _ = strings.Cut(path, "?")
		if !public.MatchString(path) {
			t.Errorf("app.js calls %s (%s): not a route of the public API", path, arg)
		}
		n++
	}
	if n < 15 {
		t.Errorf("found %d calls in app.js: the pattern no longer reads them", n)
	}
	for _, js := range []string{"app.js", "svg.js"} {
		data, _ := os.ReadFile(filepath.Join("static", "js", js))
		if regexp.MustCompile(`\bfetch\(|XMLHttpRequest|WebSocket|sendBeacon`).Match(data) {
			t.Errorf("%s makes a request of its own, not through api.js", js)
		}
	}
}

// firstArg is the first argument of a call whose text starts at src (just
// after its open parenthesis): up to the first comma or close parenthesis
// outside parentheses and string literals.
func firstArg(src []byte) string {
	depth, quote := 0, byte(0)
	for i, c := range src {
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '`' || c == '"':
			quote = c
		case c == '(':
			depth++
		case c == ')' && depth == 0, c == ',' && depth == 0:
			return strings.TrimSpace(string(src[:i]))
		case c == ')':
			depth--
		}
	}
	return string(src)
}

// TestDir: a customised copy on disk is served with the page's headers,
// read at each request; a directory that is missing, a file, or without
// index.html is refused.
func TestDir(t *testing.T) {
	dir := t.TempDir()
	for _, bad := range []struct{ dir, want string }{
		{filepath.Join(dir, "missing"), "no such file"},
		{dir, "no index.html"},
	} {
		if _, err := dashboard.Dir(bad.dir); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("Dir(%s): %v, want an error saying %q", bad.dir, err, bad.want)
		}
	}
	index := filepath.Join(dir, "index.html")
	if err := os.WriteFile(index, []byte("<p>custom</p>"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := dashboard.Dir(index); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("Dir(a file): %v", err)
	}
	h, err := dashboard.Dir(dir)
	if err != nil {
		t.Fatal(err)
	}
	check := func(want string) {
		t.Helper()
		resp := get(t, h, http.MethodGet, "/")
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || string(body) != want || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'none'") {
			t.Errorf("GET /: %d %q CSP %q, want %q with the dashboard's CSP", resp.StatusCode, body, resp.Header.Get("Content-Security-Policy"), want)
		}
	}
	check("<p>custom</p>")
	if err := os.WriteFile(index, []byte("<p>edited</p>"), 0o644); err != nil {
		t.Fatal(err)
	}
	check("<p>edited</p>")
	if resp := get(t, h, http.MethodPost, "/"); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /: %d, want 405", resp.StatusCode)
	}
}

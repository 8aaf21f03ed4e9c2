package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
)

// TestServeDashboard: `svc serve` serves the dashboard at /dashboard/ from
// the binary, without a token even when the API needs one (the page asks
// for it), and --dashboard=false turns it off.
func TestServeDashboard(t *testing.T) {
	t.Parallel()
	s := startServe(t, []string{"SVC_AUTH_TOKEN=s3cret"}, "--specs", exampleSpecs)
	ctx := context.Background()
	resp, body := do(t, ctx, http.MethodGet, s.url+"/dashboard/", "", nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `<script type="module" src="js/app.js">`) ||
		resp.Header.Get("Content-Security-Policy") == "" {
		t.Errorf("GET /dashboard/ = %d %v %.200s", resp.StatusCode, resp.Header, body)
	}
	if resp, _ := do(t, ctx, http.MethodGet, s.url+"/dashboard/js/app.js", "", nil); resp.StatusCode != http.StatusOK {
		t.Errorf("GET /dashboard/js/app.js = %d", resp.StatusCode)
	}
	if resp, _ := do(t, ctx, http.MethodGet, s.url+"/agents", "", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /agents without the token = %d, want 401", resp.StatusCode)
	}

	off := startServe(t, nil, "--specs", exampleSpecs, "--dashboard=false")
	if resp, _ := do(t, ctx, http.MethodGet, off.url+"/dashboard/", "", nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("--dashboard=false: GET /dashboard/ = %d, want 404", resp.StatusCode)
	}
}

package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
)

// TestServeAllowedOrigins: `svc serve` refuses other sites' browser
// requests and non-JSON bodies, serves the origins --allowed-origins
// lists with CORS, and refuses a malformed origin as a usage error.
func TestServeAllowedOrigins(t *testing.T) {
	t.Parallel()
	s := startServe(t, nil, "--specs", exampleSpecs, "--allowed-origins", "https://app.example,http://localhost:3000")
	ctx := context.Background()
	run := s.url + "/agents/echo/run"
	if resp, body := do(t, ctx, http.MethodPost, run, `{"input":1}`, map[string]string{"Origin": "http://evil.example"}); resp.StatusCode != http.StatusForbidden ||
		!strings.Contains(string(body), "ForbiddenOriginError") {
		t.Errorf("evil origin = %d %s", resp.StatusCode, body)
	}
	resp, body := do(t, ctx, http.MethodPost, run, `{"input":1}`, map[string]string{"Origin": "https://app.example"})
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example" {
		t.Errorf("allowed origin = %d %v %s", resp.StatusCode, resp.Header, body)
	}
	if resp, body := do(t, ctx, http.MethodPost, run, `{"input":1}`, map[string]string{"Origin": s.url}); resp.StatusCode != http.StatusOK {
		t.Errorf("same origin = %d %s", resp.StatusCode, body)
	}
	if resp, body := do(t, ctx, http.MethodPost, run, `{"input":1}`, map[string]string{"Content-Type": "text/plain"}); resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Errorf("text/plain body = %d %s", resp.StatusCode, body)
	}

	r := svcExec(t, nil, "", "serve", "--specs", exampleSpecs, "--allowed-origins", "*", "--port", "0", "--data-dir", t.TempDir())
	if r.code != 2 || !strings.Contains(r.stderr, "--allowed-origins") {
		t.Errorf("--allowed-origins '*': exit %d, stderr %q; want 2 naming the flag", r.code, r.stderr)
	}
}

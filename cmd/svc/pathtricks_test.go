package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
)

// TestServePathTricks (issue 25 parts 3 and 4) against the real binary,
// with --auth-token, with the dashboard off and on: an encoded ".." no
// longer takes a request past the token to an agent's schema (which named
// every registered agent), a path with a dot segment, an escaped slash or
// a backslash is a 400 problem, the health checks answer HEAD without a
// token, a repeated query parameter and an empty request_id are 400s.
func TestServePathTricks(t *testing.T) {
	t.Parallel()
	for _, dashboard := range []string{"--dashboard=false", "--dashboard=true"} {
		t.Run(dashboard, func(t *testing.T) {
			t.Parallel()
			s := startServe(t, nil, "--specs", exampleSpecs, "--auth-token", "s3cret", dashboard)
			ctx := context.Background()
			bearer := map[string]string{"Authorization": "Bearer s3cret"}
			for _, tc := range []struct{ method, path string }{
				{"GET", "/agents/..%2F..%2Fdashboard%2Fx/schema"}, // the issue's
				{"POST", "/agents/..%2F..%2Fdashboard%2Fx/run"},
				{"POST", "/agents/..%2f..%2fdashboard%2fx/gather"},
				{"GET", "/groups/..%2F..%2Fdashboard%2Fx/topology"},
				{"POST", "/groups/..%2F..%2Fdashboard%2Fx/run"},
				{"GET", "/runs/..%2F..%2Fdashboard%2Fx/status"},
				{"GET", "/runs/..%2F..%2Fdashboard%2Fx/result"},
				{"GET", "/runs/..%2F..%2Fdashboard%2Fx/stream"},
				{"GET", "/runs/..%2F..%2Fdashboard%2Fx/tree"},
				{"POST", "/runs/..%2F..%2Fdashboard%2Fx/cancel"},
				{"GET", "/agents/%2e%2e/schema"},
				{"GET", "/dashboard/%2e%2e/agents"},
				{"GET", "/dashboard/../agents"},
				{"GET", "/dashboard/..%2F..%2Fagents"},
				{"GET", "/agents/..%5C..%5Cdashboard/schema"},
			} {
				for _, hdr := range []map[string]string{nil, bearer} {
					body := ""
					if tc.method == "POST" {
						body = `{"input":1}`
					}
					resp, b := do(t, ctx, tc.method, s.url+tc.path, body, hdr)
					p := decodeProblem(t, resp, b, http.StatusBadRequest)
					if p.Error != "SpecValidationError" || !strings.HasPrefix(p.Detail, "path ") ||
						strings.Contains(string(b), "billing_expert") {
						t.Errorf("%s %s (token %v): %s", tc.method, tc.path, hdr != nil, b)
					}
				}
			}
			// A plain path that is no dashboard file still needs the token.
			for _, path := range []string{"/Dashboard/x", "//dashboard/x", "/agents//schema", "/healthz/"} {
				resp, b := get(t, s.url+path, nil)
				decodeProblem(t, resp, b, http.StatusUnauthorized)
			}
			if dashboard == "--dashboard=true" {
				if resp, b := get(t, s.url+"/dashboard/", nil); resp.StatusCode != http.StatusOK {
					t.Errorf("GET /dashboard/ without a token: %d %.200s", resp.StatusCode, b)
				}
			}

			for _, path := range []string{"/healthz", "/health", "/readyz"} {
				resp, b := do(t, ctx, http.MethodHead, s.url+path, "", nil)
				if resp.StatusCode != http.StatusOK || len(b) != 0 || resp.Header.Get("Content-Type") != "application/json" {
					t.Errorf("HEAD %s: %d %v %q; want 200, GET's headers, no body", path, resp.StatusCode, resp.Header, b)
				}
			}

			resp, b := do(t, ctx, http.MethodGet, s.url+"/events?limit=1&limit=2", "", bearer)
			if p := decodeProblem(t, resp, b, http.StatusBadRequest); !strings.Contains(p.Detail, `query parameter "limit" is given 2 times`) {
				t.Errorf("repeated limit: %q", p.Detail)
			}
			req := map[string]string{"Authorization": "Bearer s3cret", "Content-Type": "application/x-ndjson"}
			resp, b = do(t, ctx, http.MethodPost, s.url+"/agents/echo/gather?max_concurrency=1&max_concurrency=500", "{\"input\":1}\n", req)
			if p := decodeProblem(t, resp, b, http.StatusBadRequest); !strings.Contains(p.Detail, `query parameter "max_concurrency" is given 2 times`) {
				t.Errorf("repeated max_concurrency: %q", p.Detail)
			}
			resp, b = do(t, ctx, http.MethodPost, s.url+"/agents/echo/run", `{"input":1,"request_id":""}`, bearer)
			if p := decodeProblem(t, resp, b, http.StatusBadRequest); !strings.HasPrefix(p.Detail, `request_id "": want 1 to 128`) {
				t.Errorf("empty request_id: %q", p.Detail)
			}
		})
	}
}

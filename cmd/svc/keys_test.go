package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/internal/testutil"
)

// TestKeysHash: svc keys hash prints the SHA-256 of the key given on
// standard input or with --key, and refuses no key; svc keys new prints a
// key and its hash, which svc keys hash agrees with.
func TestKeysHash(t *testing.T) {
	t.Parallel()
	const abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" // SHA-256("abc")
	if r := svcExec(t, nil, "abc\n", "keys", "hash"); r.code != 0 || r.stdout != abc+"\n" {
		t.Errorf("stdin: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := svcExec(t, nil, "", "keys", "hash", "--key", "abc"); r.code != 0 || r.stdout != abc+"\n" {
		t.Errorf("--key: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	for name, in := range map[string]string{"empty": "", "two words": "a b\n"} {
		if r := svcExec(t, nil, in, "keys", "hash"); r.code != 2 || r.stdout != "" {
			t.Errorf("%s: exit %d, stdout %q; want 2 and nothing", name, r.code, r.stdout)
		}
	}
	r := svcExec(t, nil, "", "keys", "new")
	m := regexp.MustCompile(`^key: (svc_[A-Za-z0-9_-]{43})\nsha256: ([0-9a-f]{64})\n$`).FindStringSubmatch(r.stdout)
	if r.code != 0 || m == nil {
		t.Fatalf("keys new: exit %d, stdout %q", r.code, r.stdout)
	}
	if h := svcExec(t, nil, m[1], "keys", "hash"); h.stdout != m[2]+"\n" {
		t.Errorf("keys hash of the new key = %q, keys new said %s", h.stdout, m[2])
	}
	if again := svcExec(t, nil, "", "keys", "new"); again.stdout == r.stdout {
		t.Error("two keys new printed the same key")
	}
}

// TestServeAPIKeys (issue 34, parts 1 and 4) against a real svc serve: keys
// of two tenants and an admin from --api-keys, and --auth-token as one
// more admin key. Missing, wrong and expired keys are 401, a key without
// the route's scope 403; admin sees each key's use in /runtime/stats; a
// changed file revokes and adds keys without a restart, a bad one is
// logged with file:line: field and the old keys stay; no key appears in
// the log.
func TestServeAPIKeys(t *testing.T) {
	t.Parallel()
	const (
		keyA     = "sk-team-a-0123456789"
		keyB     = "sk-team-b-9876543210"
		keyOld   = "sk-team-b-expired000"
		keyAdmin = "sk-ops-admin-55555555"
		keyNew   = "sk-team-c-new-7777777"
		token    = "tok-s3cret-123"
	)
	hash := func(k string) string { return svcExec(t, nil, k, "keys", "hash").stdout[:64] }
	entry := func(k, tenant, scopes, extra string) string {
		return "  - sha256: " + hash(k) + "\n    tenant: " + tenant + "\n    scopes: [" + scopes + "]\n" + extra
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "keys.yaml")
	first := "keys:\n" + entry(keyA, "team-a", "run, submit, read", "") + entry(keyB, "team-b", "read", "") +
		entry(keyOld, "team-b", "read", "    expires: 2020-01-01T00:00:00Z\n") + entry(keyAdmin, "ops", "admin", "")
	writeFile(t, file, first)
	s := startServe(t, nil, "--specs", exampleSpecs, "--api-keys", file, "--auth-token", token, "--log-format", "json")
	bearer := func(k string) map[string]string { return map[string]string{"Authorization": "Bearer " + k} }
	run := func(k string) (*http.Response, []byte) {
		return do(t, t.Context(), http.MethodPost, s.url+"/agents/echo/run", `{"input":"hi"}`, bearer(k))
	}

	for name, hdr := range map[string]map[string]string{"missing": nil, "wrong": bearer("sk-guess"), "expired": bearer(keyOld)} {
		resp, body := get(t, s.url+"/runs", hdr)
		p := decodeProblem(t, resp, body, http.StatusUnauthorized)
		if p.Error != string(svc.KindUnauthorized) || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s key: %+v, challenge %q", name, p, resp.Header.Get("WWW-Authenticate"))
		}
		if name == "expired" && !strings.Contains(p.Detail, "expired") {
			t.Errorf("expired key: detail %q, want it to say so", p.Detail)
		}
	}
	if resp, body := run(keyA); resp.StatusCode != http.StatusOK {
		t.Errorf("team-a runs: %d %s", resp.StatusCode, body)
	}
	resp, body := run(keyB)
	if p := decodeProblem(t, resp, body, http.StatusForbidden); p.Error != string(svc.KindForbidden) || !strings.Contains(p.Detail, "run scope") {
		t.Errorf("team-b (read) runs: %+v", p)
	}
	resp, body = do(t, t.Context(), http.MethodPost, s.url+"/submit", `{"target":"echo","task":{"input":1}}`, bearer(keyB))
	decodeProblem(t, resp, body, http.StatusForbidden)
	resp, body = do(t, t.Context(), http.MethodPost, s.url+"/runtime/budget/reset", "", bearer(keyA))
	decodeProblem(t, resp, body, http.StatusForbidden)
	if resp, body := get(t, s.url+"/runs", bearer(keyB)); resp.StatusCode != http.StatusOK {
		t.Errorf("team-b reads: %d %s", resp.StatusCode, body)
	}
	if resp, body := run(token); resp.StatusCode != http.StatusOK {
		t.Errorf("--auth-token runs: %d %s", resp.StatusCode, body)
	}
	if resp, body := get(t, s.url+"/healthz", nil); resp.StatusCode != http.StatusOK {
		t.Errorf("healthz without a key: %d %s", resp.StatusCode, body)
	}

	// Audit: admin sees each key's use; a read key does not.
	stats := func(k string) svc.RuntimeStats {
		t.Helper()
		resp, body := get(t, s.url+"/runtime/stats", bearer(k))
		var st svc.RuntimeStats
		if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &st) != nil {
			t.Fatalf("stats with %s: %d %s", k[:8], resp.StatusCode, body)
		}
		return st
	}
	// Every tenant's figures: a read key is refused.
	resp, body = get(t, s.url+"/runtime/stats", bearer(keyB))
	decodeProblem(t, resp, body, http.StatusForbidden)
	use := map[string]svc.KeyUse{}
	for _, u := range stats(keyAdmin).Keys {
		use[u.KeyID] = u
	}
	idOf := func(k string) string { return "sha256:" + hash(k)[:12] }
	if a := use[idOf(keyA)]; a.Tenant != "team-a" || a.Requests != 2 || a.Denied != 1 || a.LastUse.IsZero() {
		t.Errorf("team-a's use = %+v, want 2 requests, 1 denied", a)
	}
	if b := use[idOf(keyB)]; b.Requests != 4 || b.Denied != 2 {
		t.Errorf("team-b's use = %+v, want 4 requests, 2 denied", b)
	}
	if u := use["auth-token"]; u.Requests != 1 || u.Tenant != "" {
		t.Errorf("the auth token's use = %+v", u)
	}
	if len(use) != 5 {
		t.Errorf("%d keys in the stats, want 5: %+v", len(use), use)
	}
	s.waitLog(t, regexp.MustCompile(`request denied.*"key_id":"`+idOf(keyB)+`".*"route":"POST /agents/\{name\}/run","reason":"lacks the run scope"`), 5*time.Second)

	// Reload: team-b's key is revoked, team-c's added.
	writeFile(t, file, "keys:\n"+entry(keyA, "team-a", "run, submit, read", "")+entry(keyNew, "team-c", "read", "")+entry(keyAdmin, "ops", "admin", ""))
	testutil.Eventually(t, "the revoked key refused", func() bool {
		resp, _ := get(t, s.url+"/runs", bearer(keyB))
		return resp.StatusCode == http.StatusUnauthorized
	})
	if resp, body := get(t, s.url+"/runs", bearer(keyNew)); resp.StatusCode != http.StatusOK {
		t.Errorf("the added key: %d %s", resp.StatusCode, body)
	}
	// A bad file is logged with where and why; the keys stay.
	writeFile(t, file, "keys:\n"+entry(keyA, "team-a", "run, write", ""))
	s.waitLog(t, regexp.MustCompile(`api keys reload failed; still using the previous keys.*keys.yaml:4: keys\[0\]\.scopes: \\"write\\"`), 10*time.Second)
	if resp, body := get(t, s.url+"/runs", bearer(keyNew)); resp.StatusCode != http.StatusOK {
		t.Errorf("after a bad file, the keys in use: %d %s", resp.StatusCode, body)
	}
	if resp, body := run(token); resp.StatusCode != http.StatusOK {
		t.Errorf("after reloads, --auth-token: %d %s", resp.StatusCode, body)
	}
	log := s.stderr.String()
	for _, k := range []string{keyA, keyB, keyOld, keyAdmin, keyNew, token} {
		if strings.Contains(log, k) {
			t.Errorf("the log holds the key %s…", k[:8])
		}
	}
	if !bytes.Contains([]byte(log), []byte(`"api_keys":true`)) {
		t.Error("the start line does not say api keys are on")
	}
}

// TestServeAPIKeysBadFile: svc serve refuses to start on a key file that
// does not load, naming file:line: field.
func TestServeAPIKeysBadFile(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "keys.yaml")
	writeFile(t, file, "keys:\n  - sha256: not-a-hash\n    tenant: a\n    scopes: [read]\n")
	r := svcExec(t, nil, "", "serve", "--specs", exampleSpecs, "--port", "0", "--data-dir", t.TempDir(), "--api-keys", file)
	if r.code == 0 || !strings.Contains(r.stderr, file+":2: keys[0].sha256: want the key's SHA-256") {
		t.Errorf("exit %d, stderr %s", r.code, tail(r.stderr, 2000))
	}
}

// TestServeTenantIsolation (issue 34 part 2) against a real svc serve: the
// runs team-a submits carry its tenant; to team-b, which may read and
// submit too, each of team-a's run ids is answered on every run route
// exactly as an unknown id is (404), and its run list holds none of
// team-a's; the same Idempotency-Key makes a run of each tenant; admin
// sees every run and filters by tenant; the routes of every tenant's
// events refuse a tenant's key.
func TestServeTenantIsolation(t *testing.T) {
	t.Parallel()
	const (
		keyA     = "sk-iso-team-a-000000"
		keyB     = "sk-iso-team-b-111111"
		keyAdmin = "sk-iso-admin-2222222"
	)
	hash := func(k string) string { return svcExec(t, nil, k, "keys", "hash").stdout[:64] }
	file := filepath.Join(t.TempDir(), "keys.yaml")
	writeFile(t, file, "keys:\n"+
		"  - {sha256: "+hash(keyA)+", tenant: team-a, scopes: [run, submit, read]}\n"+
		"  - {sha256: "+hash(keyB)+", tenant: team-b, scopes: [run, submit, read]}\n"+
		"  - {sha256: "+hash(keyAdmin)+", tenant: ops, scopes: [admin]}\n")
	s := startServe(t, nil, "--specs", exampleSpecs, "--api-keys", file)
	bearer := func(k string) map[string]string { return map[string]string{"Authorization": "Bearer " + k} }
	submit := func(k, idem string) string {
		t.Helper()
		h := bearer(k)
		if idem != "" {
			h["Idempotency-Key"] = idem
		}
		resp, body := do(t, t.Context(), http.MethodPost, s.url+"/submit", `{"target":"echo","task":{"input":"x"}}`, h)
		var reply struct {
			RunID string `json:"run_id"`
		}
		if resp.StatusCode != http.StatusAccepted || json.Unmarshal(body, &reply) != nil || reply.RunID == "" {
			t.Fatalf("submit: %d %s", resp.StatusCode, body)
		}
		return reply.RunID
	}
	status := func(k, id string) svc.RunStatus {
		t.Helper()
		var st svc.RunStatus
		testutil.Eventually(t, "run "+id+" finished", func() bool {
			resp, body := get(t, s.url+"/runs/"+id+"/status", bearer(k))
			return resp.StatusCode == http.StatusOK && json.Unmarshal(body, &st) == nil && st.State.Terminal()
		})
		return st
	}
	runA, runB := submit(keyA, ""), submit(keyB, "")
	if st := status(keyA, runA); st.Tenant != "team-a" {
		t.Errorf("team-a's run: tenant %q", st.Tenant)
	}
	if st := status(keyB, runB); st.Tenant != "team-b" {
		t.Errorf("team-b's run: tenant %q", st.Tenant)
	}
	if st := status(keyAdmin, runA); st.Tenant != "team-a" {
		t.Errorf("admin reads team-a's run: tenant %q", st.Tenant)
	}

	// Every route of a run, with team-a's id and with an unknown one:
	// the same answer, a 404 naming the id.
	unknown := "01900000-0000-7000-8000-000000000000"
	for _, route := range []struct{ method, path, body string }{
		{http.MethodGet, "/runs/%s/status", ""},
		{http.MethodGet, "/runs/%s/result", ""},
		{http.MethodGet, "/runs/%s/stream", ""},
		{http.MethodPost, "/runs/%s/cancel", ""},
		{http.MethodPost, "/runs/%s/resume", `{"request_id":"r1","approve":true}`},
	} {
		var details [2]string
		for i, id := range []string{runA, unknown} {
			resp, body := do(t, t.Context(), route.method, s.url+strings.Replace(route.path, "%s", id, 1), route.body, bearer(keyB))
			p := decodeProblem(t, resp, body, http.StatusNotFound)
			details[i] = strings.Replace(p.Detail, id, "ID", 1)
			if p.Error != string(svc.KindRegistry) {
				t.Errorf("%s %s with team-a's id: %+v", route.method, route.path, p)
			}
		}
		if details[0] != details[1] {
			t.Errorf("%s %s: team-a's id is answered %q, an unknown one %q: want the same", route.method, route.path, details[0], details[1])
		}
	}
	// Team-a's run is still there, not cancelled by team-b's attempt.
	if resp, body := get(t, s.url+"/runs/"+runA+"/result", bearer(keyA)); resp.StatusCode != http.StatusOK {
		t.Errorf("team-a's result after team-b's tries: %d %s", resp.StatusCode, body)
	}

	list := func(k, query string) []string {
		t.Helper()
		resp, body := get(t, s.url+"/runs"+query, bearer(k))
		var page svc.RunPage
		if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &page) != nil {
			t.Fatalf("GET /runs%s: %d %s", query, resp.StatusCode, body)
		}
		var ids []string
		for _, r := range page.Runs {
			ids = append(ids, r.RunID)
		}
		return ids
	}
	if got := list(keyB, ""); len(got) != 1 || got[0] != runB {
		t.Errorf("team-b lists %q, want its own run %s alone", got, runB)
	}
	if got := list(keyB, "?state=completed"); len(got) != 1 || got[0] != runB {
		t.Errorf("team-b lists completed %q, want %s alone", got, runB)
	}
	resp, body := get(t, s.url+"/runs?tenant=team-a", bearer(keyB))
	decodeProblem(t, resp, body, http.StatusForbidden)
	if got := list(keyAdmin, "?type=submitted"); len(got) != 2 {
		t.Errorf("admin lists %q, want both runs", got)
	}
	if got := list(keyAdmin, "?tenant=team-a"); len(got) != 1 || got[0] != runA {
		t.Errorf("admin lists team-a's %q, want %s", got, runA)
	}
	if r := svcExec(t, nil, "", "runs", "--url", s.url, "--auth-token", keyAdmin, "--tenant", "team-b", "--json"); r.code != 0 ||
		!strings.Contains(r.stdout, runB) || strings.Contains(r.stdout, runA) {
		t.Errorf("svc runs --tenant team-b: exit %d, stdout %s, stderr %s; want team-b's run alone", r.code, r.stdout, r.stderr)
	}

	// One Idempotency-Key, two tenants: two runs; the same tenant again:
	// its first run.
	a1, b1 := submit(keyA, "same-key"), submit(keyB, "same-key")
	if a1 == b1 {
		t.Errorf("team-b's submit with team-a's Idempotency-Key got team-a's run %s", a1)
	}
	if again := submit(keyA, "same-key"); again != a1 {
		t.Errorf("team-a's second submit with its key: %s, want %s", again, a1)
	}

	// The routes of every tenant's events: a tenant's key is refused.
	for _, path := range []string{"/events", "/usage", "/tools?group_by=tool", "/runtime/stats", "/runs/" + runA + "/tree", "/events/stream"} {
		resp, body := get(t, s.url+path, bearer(keyA))
		if p := decodeProblem(t, resp, body, http.StatusForbidden); p.Error != string(svc.KindForbidden) {
			t.Errorf("GET %s with team-a's key: %+v", path, p)
		}
	}
	if resp, body := get(t, s.url+"/events", bearer(keyAdmin)); resp.StatusCode != http.StatusOK {
		t.Errorf("GET /events with the admin key: %d %s", resp.StatusCode, body)
	}

	// Every route the server documents (its own /openapi.json), each path
	// parameter filled with team-a's run id, trace id or agent: team-b's
	// key gets no answer that names team-a's run (but for the id it gave),
	// and a run or trace route is a 404 or a 403.
	traceA := status(keyA, runA).TraceID
	resp, body = get(t, s.url+"/openapi.json", bearer(keyB))
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &doc) != nil || len(doc.Paths) < 20 {
		t.Fatalf("GET /openapi.json: %d, %d paths", resp.StatusCode, len(doc.Paths))
	}
	walked := 0
	for path, methods := range doc.Paths {
		for method := range methods {
			method = strings.ToUpper(method)
			if method != http.MethodGet && method != http.MethodPost {
				continue
			}
			target := strings.NewReplacer("{id}", runA, "{trace_id}", traceA, "{name}", "echo").Replace(path)
			reqBody := ""
			if method == http.MethodPost {
				reqBody = `{"input":"b"}`
			}
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			resp, got := do(t, ctx, method, s.url+target, reqBody, bearer(keyB))
			cancel()
			walked++
			// An id the request gave may be echoed (unknown run "ID"); any
			// other mention of team-a's run is a leak.
			if !strings.Contains(target, runA) && bytes.Contains(got, []byte(runA)) ||
				!strings.Contains(target, traceA) && bytes.Contains(got, []byte(traceA)) {
				t.Errorf("%s %s with team-b's key names team-a's run: %d %s", method, target, resp.StatusCode, got)
			}
			if strings.Contains(path, "{id}") || strings.Contains(path, "{trace_id}") {
				if resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusForbidden {
					t.Errorf("%s %s with team-b's key: %d %s, want 404 or 403", method, target, resp.StatusCode, got)
				}
			}
		}
	}
	if walked < 25 {
		t.Errorf("walked %d routes of the document", walked)
	}
}

// TestServeTenantBatchesNeedAdmin: batches do not carry their tenant yet,
// so a tenant's key is refused on every batch route, before anything is
// stored, and an admin key is served.
func TestServeTenantBatchesNeedAdmin(t *testing.T) {
	t.Parallel()
	const keyA, keyAdmin = "sk-batch-team-a-0000", "sk-batch-admin-11111"
	hash := func(k string) string { return svcExec(t, nil, k, "keys", "hash").stdout[:64] }
	file := filepath.Join(t.TempDir(), "keys.yaml")
	writeFile(t, file, "keys:\n  - {sha256: "+hash(keyA)+", tenant: team-a, scopes: [run, submit, read]}\n"+
		"  - {sha256: "+hash(keyAdmin)+", tenant: ops, scopes: [admin]}\n")
	s := startServe(t, nil, "--specs", exampleSpecs, "--api-keys", file)
	bearer := func(k string) map[string]string { return map[string]string{"Authorization": "Bearer " + k} }
	body := `{"target":"echo","tasks":[{"input":1}]}`
	for _, route := range [][2]string{{http.MethodPost, "/batches"}, {http.MethodGet, "/batches"}, {http.MethodGet, "/batches/x"},
		{http.MethodGet, "/batches/x/results"}, {http.MethodPost, "/batches/x/cancel"}} {
		b := ""
		if route[1] == "/batches" && route[0] == http.MethodPost {
			b = body
		}
		resp, got := do(t, t.Context(), route[0], s.url+route[1], b, bearer(keyA))
		if p := decodeProblem(t, resp, got, http.StatusForbidden); p.Error != string(svc.KindForbidden) || !strings.Contains(p.Detail, "admin key") {
			t.Errorf("%s %s with team-a's key: %+v", route[0], route[1], p)
		}
	}
	resp, got := get(t, s.url+"/batches", bearer(keyAdmin))
	var page svc.BatchPage
	if resp.StatusCode != http.StatusOK || json.Unmarshal(got, &page) != nil || len(page.Batches) != 0 {
		t.Errorf("admin lists batches: %d %s; want none (team-a's submit stored nothing)", resp.StatusCode, got)
	}
	if resp, got := do(t, t.Context(), http.MethodPost, s.url+"/batches", body, bearer(keyAdmin)); resp.StatusCode != http.StatusAccepted {
		t.Errorf("admin submits a batch: %d %s", resp.StatusCode, got)
	}
}

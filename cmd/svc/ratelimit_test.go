package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/internal/svcproc"
)

// rate_limits in runtime.yaml and an agent's model_settings.rate_limit,
// through the real binary: runs draw from the limit, GET /runtime/stats
// reports it with its calls, a bad priority is a 400, and an agent naming
// a limit runtime.yaml does not declare stops the start naming both.
func TestServeRateLimits(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("runtime.yaml", "version: 1\nrate_limits:\n  shared:\n    requests_per_minute: 6000\n    max_concurrent: 4\n")
	write("agents/echo.yaml", "version: 1\nname: echo\nmodel: test:echo\nmodel_settings:\n  rate_limit: shared\n")
	s := startServe(t, nil, "--specs", dir)
	ctx := context.Background()
	for range 3 {
		if resp, b := do(t, ctx, "POST", s.url+"/agents/echo/run", `{"input":"hi","priority":"high"}`, nil); resp.StatusCode != http.StatusOK {
			t.Fatalf("run: %d %s", resp.StatusCode, b)
		}
	}
	if resp, b := do(t, ctx, "POST", s.url+"/agents/echo/run", `{"input":"hi","priority":"urgent"}`, nil); resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "priority") {
		t.Errorf("priority urgent: %d %s, want a 400 naming priority", resp.StatusCode, b)
	}
	resp, b := do(t, ctx, "GET", s.url+"/runtime/stats", "", nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("stats: %d %s", resp.StatusCode, b)
	}
	var st svc.RuntimeStats
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	if len(st.RateLimits) != 1 || st.RateLimits[0].Name != "shared" || st.RateLimits[0].Calls != 3 ||
		st.RateLimits[0].CallsPerMinute != 3 || st.RateLimits[0].Limit.MaxConcurrent != 4 {
		t.Errorf("rate_limits %+v; want the shared limit with its 3 calls", st.RateLimits)
	}

	bad := t.TempDir()
	if err := os.MkdirAll(filepath.Join(bad, "agents"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bad, "agents", "echo.yaml"), []byte("version: 1\nname: echo\nmodel: test:echo\nmodel_settings:\n  rate_limit: nope\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(svcBin, "serve", "--host", "127.0.0.1", "--port", "0", "--data-dir", t.TempDir(), "--specs", bad)
	cmd.Env = svcproc.Env()
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), `no limit \"nope\"`) && !strings.Contains(string(out), `no limit "nope"`) || !strings.Contains(string(out), "echo") {
		t.Errorf("serve with an undeclared limit: %v\n%s\nwant it refused, naming the agent and the limit", err, out)
	}
}

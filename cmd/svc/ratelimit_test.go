package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/internal/svcproc"
	"github.com/svc-dev/svc/llmsim"
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

// A serve node and two `svc worker start` processes with the same
// runtime.yaml, one declared limit of 1,200 calls a minute that their
// agent draws from, and llmsim enforcing that limit on the key over one
// second, over the embedded NATS broker and over a real redis-server: the
// workers draw from one bucket in the broker, so together they stay
// within the limit. Two workers each spending the whole limit send twice
// what llmsim allows until the 429s teach them better: with the workers'
// limits their own, 12 and 15 of the 120 calls were refused (the tasks
// failed: the agent has no SDK retries) in 4.8-5.0 s. The bound of 5 %
// leaves room for a loaded machine bunching a few calls. Paced: the 120
// calls take at least the 5.5 s the limit allows after its first half
// second's worth.
func TestFleetSharesRateLimit(t *testing.T) {
	for _, fb := range fleetBrokers {
		t.Run(fb.name, func(t *testing.T) {
			t.Parallel()
			const (
				perMinute = 1200
				tasks     = 120
				key       = "sk-fleet/gpt-4o-mini"
			)
			sim := llmsim.New(llmsim.Config{RPM: perMinute, Window: time.Second})
			if err := sim.Start("127.0.0.1:0"); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = sim.Close() })
			dir := t.TempDir()
			if err := os.MkdirAll(filepath.Join(dir, "agents"), 0o755); err != nil {
				t.Fatal(err)
			}
			rt := fmt.Sprintf("version: 1\nrate_limits:\n  fleet:\n    requests_per_minute: %d\n", perMinute)
			agent := fmt.Sprintf("version: 1\nname: sim\nmodel: openai:gpt-4o-mini\nmodel_settings:\n"+
				"  base_url: %s/v1\n  api_key: sk-fleet\n  max_retries: 0\n  rate_limit: fleet\n", sim.URL())
			if err := os.WriteFile(filepath.Join(dir, "runtime.yaml"), []byte(rt), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "agents", "sim.yaml"), []byte(agent), 0o644); err != nil {
				t.Fatal(err)
			}
			b := fb.setup(t)
			// The default ack wait (startFleetServe's 2 s is for the tests
			// of redelivery): a task waits for its turn at the limit.
			srv := startFleetServe(t, "serve", dir, t.TempDir(), b, "--ack-wait", "30s")
			for i := range 2 {
				w := startFleetProc(t, fmt.Sprintf("worker %d", i), "worker", "start", "--broker", b.workerURL, "--specs", dir,
					"--log-format", "json")
				w.waitLog(t, regexp.MustCompile(`"msg":"worker_started"`))
			}

			var body strings.Builder
			body.WriteString(`{"max_concurrency":` + strconv.Itoa(tasks) + `,"tasks":[`)
			for i := range tasks {
				if i > 0 {
					body.WriteByte(',')
				}
				fmt.Fprintf(&body, `{"input":"task %d"}`, i)
			}
			body.WriteString("]}")
			c := newFleetClient(t, srv.url)
			start := time.Now()
			code, out := c.must(http.MethodPost, "/agents/sim/gather", body.String())
			took := time.Since(start)
			if code != http.StatusOK {
				t.Fatalf("gather: %d %s", code, out)
			}
			var results []svc.AgentResult
			if err := json.Unmarshal(out, &results); err != nil {
				t.Fatal(err)
			}
			failed, first := 0, ""
			for _, r := range results {
				if !r.Success || r.Metadata.Backend != "broker:"+map[string]string{"embedded": "nats", "redis": "redis"}[fb.name] {
					failed++
					if first == "" {
						first = fmt.Sprintf("%+v, backend %q", r.Error, r.Metadata.Backend)
					}
				}
			}
			calls, refused := sim.Stats()[key], sim.Throttled()[key]
			t.Logf("%s: %d tasks in %v through 2 workers (%.0f a minute; limit %d): %d calls at llmsim, %d refused (429)",
				fb.name, tasks, took.Round(10*time.Millisecond), float64(calls-refused)/took.Minutes(), perMinute, calls, refused)
			if len(results) != tasks || failed > 0 {
				t.Errorf("%d results, %d failed or not run by a worker (the first: %s): want %d, all run by the workers", len(results), failed, first, tasks)
			}
			if float64(refused) >= 0.05*float64(calls) {
				t.Errorf("llmsim refused %d of %d calls with a 429: the workers do not share the limit (want under 5 %%)", refused, calls)
			}
			if least := time.Duration(float64(tasks-perMinute/60/2) / perMinute * float64(time.Minute)); took < least {
				t.Errorf("%d calls in %v: faster than the limit allows (at least %v)", tasks, took, least)
			}
		})
	}
}

package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/svc-dev/svc"
)

// slowSpecs has an agent echo, an agent slow that takes 20 s, and the
// groups pair (echo → echo) and slowpair (echo → slow).
func slowSpecs(t *testing.T) string {
	t.Helper()
	return writeSpecs(t, map[string]string{
		"agents/echo.yaml":     "version: 1\nname: echo\nmodel: test:echo\n",
		"agents/broken.yaml":   "version: 1\nname: broken\nmodel: test:fail\n",
		"agents/slow.yaml":     "version: 1\nname: slow\nmodel: test:echo\nmodel_settings: {latency_ms: 20000}\n",
		"groups/pair.yaml":     "version: 1\nname: pair\nnodes:\n  a: {agent: echo}\n  b: {agent: echo}\nedges:\n  - {from: a, to: b}\n",
		"groups/slowpair.yaml": "version: 1\nname: slowpair\nnodes:\n  a: {agent: echo}\n  b: {agent: slow}\nedges:\n  - {from: a, to: b}\n",
	})
}

func tempFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// mustExec runs svc and fails the test unless it exits with want.
func mustExec(t *testing.T, want int, env []string, args ...string) result {
	t.Helper()
	r := svcExec(t, env, "", args...)
	if r.code != want {
		t.Fatalf("svc %s: exit %d, want %d; stdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, want, r.stdout, r.stderr)
	}
	return r
}

func decodeStatus(t *testing.T, stdout string) svc.RunStatus {
	t.Helper()
	var st svc.RunStatus
	if err := json.Unmarshal([]byte(stdout), &st); err != nil {
		t.Fatalf("not a RunStatus: %v\n%s", err, stdout)
	}
	return st
}

// waitRunState polls svc runs show until the run is in state want.
func waitRunState(t *testing.T, base, id string, want svc.RunState, extra ...string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := mustExec(t, 0, nil, append([]string{"runs", "show", id, "--url", base}, extra...)...)
		st := decodeStatus(t, r.stdout)
		if st.State == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s is %s after 30s, want %s", id, st.State, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestCLIOnServer drives every client command against a real svc serve.
func TestCLIOnServer(t *testing.T) {
	t.Parallel()
	s := startServe(t, nil, "--specs", slowSpecs(t))
	u := []string{"--url", s.url}

	t.Run("run agent and group", func(t *testing.T) {
		r := mustExec(t, 0, nil, append([]string{"run", "echo", "--input", `{"a":1}`}, u...)...)
		if res := decodeResult(t, r.stdout); !res.Success || compactJSON(t, res.Output) != `{"a":1}` {
			t.Errorf("agent result %+v", res)
		}
		r = mustExec(t, 0, nil, append([]string{"run", "pair", "--input", `"x"`}, u...)...)
		if res := decodeResult(t, r.stdout); !res.Success || compactJSON(t, res.Output) != `"x"` {
			t.Errorf("group result %+v", res)
		}
		r = mustExec(t, 1, nil, append([]string{"run", "nope", "--input", "1"}, u...)...)
		if !strings.Contains(r.stderr, `unknown agent or group "nope"`) || r.stdout != "" {
			t.Errorf("unknown target: stdout %q stderr %q", r.stdout, r.stderr)
		}
	})

	t.Run("gather", func(t *testing.T) {
		in := tempFile(t, "in.jsonl", "1\n{\"input\":2}\n\n  \"three\"  \n[4]")
		r := mustExec(t, 0, nil, append([]string{"gather", "echo", "--inputs", in, "--max-concurrency", "2"}, u...)...)
		lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
		want := []string{`1`, `{"input":2}`, `"three"`, `[4]`}
		if len(lines) != len(want) {
			t.Fatalf("%d result lines, want %d:\n%s", len(lines), len(want), r.stdout)
		}
		// One line per result as it finishes, with its input's index.
		seen := map[int]bool{}
		for i, l := range lines {
			var sl svc.StreamLine
			if err := json.Unmarshal([]byte(l), &sl); err != nil || sl.Index == nil || sl.Result == nil {
				t.Fatalf("line %d %q: %v", i+1, l, err)
			}
			n := *sl.Index
			if n < 0 || n >= len(want) || seen[n] {
				t.Fatalf("line %d: index %d", i+1, n)
			}
			seen[n] = true
			if res := sl.Result; !res.Success || compactJSON(t, res.Output) != want[n] {
				t.Errorf("line %d: %+v, want output %s", i+1, res, want[n])
			}
		}
		// One failed task: every result printed, exit 1.
		r = mustExec(t, 1, nil, append([]string{"gather", "broken", "--inputs", in}, u...)...)
		if strings.Count(r.stdout, "\n") != 4 || !strings.Contains(r.stderr, "4 of 4 tasks failed") {
			t.Errorf("failed gather: stdout %q stderr %q", r.stdout, r.stderr)
		}
	})

	t.Run("submit, list, show, result, follow", func(t *testing.T) {
		r := mustExec(t, 0, nil, append([]string{"submit", "pair", "--input", `"s"`}, u...)...)
		id := strings.TrimSpace(r.stdout)
		if id == "" || strings.ContainsAny(id, " \n{") {
			t.Fatalf("submit printed %q, want the run id", r.stdout)
		}
		waitRunState(t, s.url, id, svc.RunCompleted)
		st := decodeStatus(t, mustExec(t, 0, nil, "runs", "show", id, "--url", s.url).stdout)
		if st.RunID != id || st.Progress == nil || st.Progress.Completed != 2 {
			t.Errorf("show: %+v", st)
		}
		res := decodeResult(t, mustExec(t, 0, nil, "runs", "result", id, "--url", s.url).stdout)
		if !res.Success || compactJSON(t, res.Output) != `"s"` {
			t.Errorf("result %+v", res)
		}
		r = mustExec(t, 0, nil, "runs", "--url", s.url)
		if !regexp.MustCompile(`(?m)^` + id + ` +completed +pair +group +2/0/0 of 2 `).MatchString(r.stdout) {
			t.Errorf("list has no line for %s:\n%s", id, r.stdout)
		}
		r = mustExec(t, 0, nil, "runs", "--url", s.url, "--state", "completed", "--json")
		var page svc.RunPage
		if err := json.Unmarshal([]byte(r.stdout), &page); err != nil || len(page.Runs) == 0 {
			t.Fatalf("--json: %v\n%s", err, r.stdout)
		}
		for _, run := range page.Runs {
			if run.State != svc.RunCompleted {
				t.Errorf("--state completed listed a %s run", run.State)
			}
		}
		r = mustExec(t, 0, nil, "runs", "follow", id, "--url", s.url)
		var last svc.RunEvent
		for _, l := range strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n") {
			if err := json.Unmarshal([]byte(l), &last); err != nil {
				t.Fatalf("follow line %q: %v", l, err)
			}
		}
		if last.Type != svc.RunGroupCompleted || last.RunID != id {
			t.Errorf("follow ended with %+v, want group_completed of %s", last, id)
		}
	})

	t.Run("paging", func(t *testing.T) {
		for range 3 {
			mustExec(t, 0, nil, append([]string{"submit", "echo", "--input", "1"}, u...)...)
		}
		r := mustExec(t, 0, nil, "runs", "--url", s.url, "--limit", "1")
		m := regexp.MustCompile(`svc runs --cursor (\S+)`).FindStringSubmatch(r.stderr)
		if m == nil || strings.Count(r.stdout, "\n") != 2 {
			t.Fatalf("--limit 1: stdout %q, stderr %q; want one run and the next cursor", r.stdout, r.stderr)
		}
		r2 := mustExec(t, 0, nil, "runs", "--url", s.url, "--limit", "1", "--cursor", m[1])
		if strings.Count(r2.stdout, "\n") != 2 || strings.Split(r.stdout, "\n")[1] == strings.Split(r2.stdout, "\n")[1] {
			t.Errorf("the next page repeats or lacks a run:\n%s\n%s", r.stdout, r2.stdout)
		}
	})

	t.Run("submit --idempotency-key", func(t *testing.T) {
		args := append([]string{"submit", "echo", "--input", "7", "--idempotency-key", "k-1"}, u...)
		first := mustExec(t, 0, nil, args...).stdout
		if again := mustExec(t, 0, nil, args...).stdout; again != first {
			t.Errorf("a retried submit made run %q, want the first one %q", again, first)
		}
		r := mustExec(t, 1, nil, append([]string{"submit", "echo", "--input", "8", "--idempotency-key", "k-1"}, u...)...)
		if !strings.Contains(r.stderr, "Idempotency-Key") {
			t.Errorf("another request with the key: stderr %q", r.stderr)
		}
	})

	t.Run("submit --wait", func(t *testing.T) {
		r := mustExec(t, 0, nil, append([]string{"submit", "pair", "--input", `"w"`, "--wait", "--progress", "always"}, u...)...)
		if res := decodeResult(t, r.stdout); !res.Success || compactJSON(t, res.Output) != `"w"` {
			t.Errorf("result %+v", res)
		}
		if !strings.Contains(r.stderr, "submitted run ") || !strings.Contains(r.stderr, "\r\x1b[K") {
			t.Errorf("stderr %q lacks the run id or the progress line", r.stderr)
		}
		// Not a terminal: no progress line unless asked.
		r = mustExec(t, 0, nil, append([]string{"submit", "pair", "--input", `"w"`, "--wait"}, u...)...)
		if strings.Contains(r.stderr, "\x1b[K") {
			t.Errorf("a progress line on a stderr that is not a terminal: %q", r.stderr)
		}
	})

	t.Run("cancel", func(t *testing.T) {
		id := strings.TrimSpace(mustExec(t, 0, nil, append([]string{"submit", "slowpair", "--input", "1"}, u...)...).stdout)
		waitRunState(t, s.url, id, svc.RunRunning)
		if out := mustExec(t, 0, nil, "runs", "cancel", id, "--url", s.url).stdout; out != "run "+id+" cancelled\n" {
			t.Errorf("cancel of a running run says %q", out)
		}
		waitRunState(t, s.url, id, svc.RunCancelled)
		if out := mustExec(t, 0, nil, "runs", "cancel", id, "--url", s.url).stdout; out != "run "+id+" already ended (status cancelled)\n" {
			t.Errorf("cancel of a cancelled run says %q", out)
		}
		r := mustExec(t, 1, nil, "runs", "result", id, "--url", s.url)
		if !strings.Contains(r.stderr, "cancelled") || r.stdout != "" {
			t.Errorf("result of a cancelled run: stdout %q stderr %q", r.stdout, r.stderr)
		}
		r = mustExec(t, 1, nil, "runs", "follow", id, "--url", s.url)
		if !strings.Contains(r.stdout, `"type":"run_cancelled"`) {
			t.Errorf("follow of a cancelled run:\n%s", r.stdout)
		}
	})

	t.Run("refused", func(t *testing.T) {
		for _, cmd := range []string{"show", "result", "cancel", "follow"} {
			r := mustExec(t, 1, nil, "runs", cmd, "no-such-run", "--url", s.url)
			if !strings.Contains(r.stderr, "no-such-run") {
				t.Errorf("runs %s of an unknown run: stderr %q", cmd, r.stderr)
			}
		}
	})

	t.Run("Ctrl-C cancels a waited run", func(t *testing.T) {
		p := startProc(t, "svc submit", nil, append([]string{"submit", "slowpair", "--input", "1", "--wait"}, u...)...)
		sp := &serveProc{proc: p}
		sp.waitLog(t, regexp.MustCompile(`submitted run (\S+)`), 20*time.Second)
		id := regexp.MustCompile(`submitted run (\S+)`).FindStringSubmatch(p.stderr.String())[1]
		waitRunState(t, s.url, id, svc.RunRunning)
		sp.signal(t, syscall.SIGINT)
		if code := sp.wait(t, 30*time.Second); code != 1 {
			t.Errorf("exit %d after Ctrl-C, want 1", code)
		}
		if st := decodeStatus(t, mustExec(t, 0, nil, "runs", "show", id, "--url", s.url).stdout); st.State != svc.RunCancelled {
			t.Errorf("the run is %s after Ctrl-C, want cancelled", st.State)
		}
		if !strings.Contains(p.stderr.String(), "was cancelled") {
			t.Errorf("stderr does not say the run was cancelled:\n%s", p.stderr.String())
		}
	})
}

// TestCLIInProcess runs run, gather and submit without a server.
func TestCLIInProcess(t *testing.T) {
	t.Parallel()
	specs := slowSpecs(t)
	in := tempFile(t, "in.jsonl", "1\n2\n")
	r := mustExec(t, 0, nil, "gather", "echo", "--inputs", in, "--specs", specs)
	if strings.Count(r.stdout, "\n") != 2 || !strings.Contains(r.stdout, `"output":2`) {
		t.Errorf("gather: %s", r.stdout)
	}
	r = svcExec(t, nil, "1\n\"two\"\n", "gather", "echo", "--inputs", "-", "--specs", specs)
	if r.code != 0 || !strings.Contains(r.stdout, `"output":"two"`) {
		t.Errorf("gather from stdin: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	// On standard input a line that is not JSON fails its task only.
	r = svcExec(t, nil, "1\nnot json\n3\n", "gather", "echo", "--inputs", "-", "--specs", specs)
	if r.code != 1 || strings.Count(r.stdout, "\n") != 3 || !strings.Contains(r.stdout, `{"index":1,"result":`) ||
		!strings.Contains(r.stdout, `stdin:2: not a JSON value`) || !strings.Contains(r.stderr, "1 of 3 tasks failed") {
		t.Errorf("gather from stdin with a bad line: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	r = mustExec(t, 0, nil, "run", "pair", "--input", `"g"`, "--specs", specs, "--progress", "always")
	if res := decodeResult(t, r.stdout); !res.Success || compactJSON(t, res.Output) != `"g"` {
		t.Errorf("run group: %+v", res)
	}
	if !strings.Contains(r.stderr, "group pair: running") {
		t.Errorf("no progress line with --progress always: %q", r.stderr)
	}
	r = mustExec(t, 0, nil, "submit", "pair", "--input", `"s"`, "--specs", specs)
	if res := decodeResult(t, r.stdout); !res.Success || compactJSON(t, res.Output) != `"s"` {
		t.Errorf("submit in process: %+v", res)
	}

	p := &serveProc{proc: startProc(t, "svc run", nil, "run", "slowpair", "--input", "1", "--specs", specs, "--log-level", "info")}
	p.waitLog(t, spawned, 20*time.Second)
	p.signal(t, syscall.SIGINT)
	if code := p.wait(t, 30*time.Second); code != 1 {
		t.Errorf("exit %d after Ctrl-C, want 1", code)
	}
	if !strings.Contains(p.stderr.String(), "cancelling the run") || !strings.Contains(p.stderr.String(), "cancelled") {
		t.Errorf("stderr does not tell of the cancel:\n%s", p.stderr.String())
	}
}

func TestCLIBadInput(t *testing.T) {
	t.Parallel()
	specs := slowSpecs(t)
	bad := tempFile(t, "bad.jsonl", "1\n\n{\"a\":\n3\n")
	empty := tempFile(t, "empty.jsonl", "\n \n")
	good := tempFile(t, "good.jsonl", "1\n")
	missing := filepath.Join(t.TempDir(), "missing.jsonl")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"bad JSON line", []string{"gather", "echo", "--inputs", bad, "--specs", specs}, bad + ":3: not a JSON value"},
		{"no inputs", []string{"gather", "echo", "--inputs", empty, "--specs", specs}, empty + ": no inputs"},
		{"missing inputs file", []string{"gather", "echo", "--inputs", missing, "--specs", specs}, missing},
		{"no --inputs", []string{"gather", "echo", "--specs", specs}, `"inputs"`},
		{"bad concurrency", []string{"gather", "echo", "--inputs", bad, "--specs", specs, "--max-concurrency", "0"}, "--max-concurrency"},
		{"gather with specs and url", []string{"gather", "echo", "--inputs", good, "--specs", specs, "--url", "http://127.0.0.1:1"}, "not both"},
		{"bad state", []string{"runs", "--state", "done", "--url", "http://127.0.0.1:1"}, `--state "done"`},
		{"bad limit", []string{"runs", "--limit", "0", "--url", "http://127.0.0.1:1"}, "--limit 0"},
		{"bad url", []string{"runs", "--url", "127.0.0.1:8420"}, "--url"},
		{"show without id", []string{"runs", "show"}, "arg"},
		{"bad progress", []string{"run", "echo", "--input", "1", "--specs", specs, "--progress", "sometimes"}, "--progress"},
		{"bad kind", []string{"submit", "echo", "--input", "1", "--specs", specs, "--kind", "team"}, "--kind"},
		{"token without url", []string{"run", "echo", "--input", "1", "--specs", specs, "--auth-token", "x"}, "need --url"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := mustExec(t, 2, nil, tt.args...)
			if !strings.Contains(r.stderr, tt.want) || r.stdout != "" {
				t.Errorf("stdout %q, stderr %q; want no output and an error containing %q", r.stdout, r.stderr, tt.want)
			}
		})
	}
}

func TestAuthTokenFlags(t *testing.T) {
	t.Parallel()
	specs := slowSpecs(t)
	tokFile := tempFile(t, "token", "s3cret\n")
	emptyFile := tempFile(t, "empty", " \n")
	missing := filepath.Join(t.TempDir(), "none")

	refused := []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"whitespace --auth-token", nil, []string{"--auth-token", "  \t"}, "--auth-token is only whitespace"},
		{"whitespace SVC_AUTH_TOKEN", []string{"SVC_AUTH_TOKEN= "}, nil, "$SVC_AUTH_TOKEN is only whitespace"},
		{"padded --auth-token", nil, []string{"--auth-token", " tok"}, "leading or trailing whitespace"},
		{"missing file", nil, []string{"--auth-token-file", missing}, missing},
		{"empty file", nil, []string{"--auth-token-file", emptyFile}, "is empty"},
		{"both", nil, []string{"--auth-token", "a", "--auth-token-file", tokFile}, "not both"},
	}
	for _, tt := range refused {
		t.Run("serve "+tt.name, func(t *testing.T) {
			t.Parallel()
			r := mustExec(t, 2, tt.env, append([]string{"serve", "--specs", specs, "--port", "0", "--data-dir", t.TempDir()}, tt.args...)...)
			if !strings.Contains(r.stderr, tt.want) {
				t.Errorf("stderr %q does not say %q", r.stderr, tt.want)
			}
		})
		for _, cmd := range [][]string{{"runs"}, {"status", "--no-reconnect"}, {"run", "echo", "--input", "1"}} {
			t.Run(cmd[0]+" "+tt.name, func(t *testing.T) {
				t.Parallel()
				// Nothing listens on port 1: the token is refused before
				// any connection.
				r := mustExec(t, 2, tt.env, append(append(cmd, "--url", "http://127.0.0.1:1"), tt.args...)...)
				if !strings.Contains(r.stderr, tt.want) {
					t.Errorf("stderr %q does not say %q", r.stderr, tt.want)
				}
			})
		}
	}

	t.Run("token file", func(t *testing.T) {
		t.Parallel()
		s := startServe(t, nil, "--specs", specs, "--auth-token-file", tokFile)
		if resp, body := get(t, s.url+"/agents", map[string]string{"Authorization": "Bearer s3cret"}); resp.StatusCode != 200 {
			t.Errorf("the file's token (newline dropped): status %d: %s", resp.StatusCode, body)
		}
		mustExec(t, 0, nil, "runs", "--url", s.url, "--auth-token-file", tokFile)
		mustExec(t, 0, []string{"SVC_AUTH_TOKEN=s3cret"}, "runs", "--url", s.url)
		mustExec(t, 0, nil, "run", "echo", "--input", "1", "--url", s.url, "--auth-token-file", tokFile)
		r := mustExec(t, 1, nil, "runs", "--url", s.url)
		if !strings.Contains(r.stderr, "bearer token") {
			t.Errorf("no token: stderr %q", r.stderr)
		}
		if strings.Contains(s.stderr.String(), "s3cret") {
			t.Errorf("the server log contains the token:\n%s", s.stderr.String())
		}
	})
}

// A run that does not end when cancelled (a stuck server, say): the first
// Ctrl-C asks for the cancel and keeps following, the second exits at
// once with status 130.
func TestFollowSecondInterruptExits(t *testing.T) {
	t.Parallel()
	cancels := make(chan struct{}, 10)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /runs/r1/status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"run_id":"r1","state":"running","progress":{"total":2,"completed":1,"failed":0,"running":1}}`)
	})
	mux.HandleFunc("POST /runs/r1/cancel", func(w http.ResponseWriter, _ *http.Request) {
		cancels <- struct{}{}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /runs/r1/stream", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "id: 1\nevent: agent_started\ndata: {\"seq\":1,\"type\":\"agent_started\",\"run_id\":\"r1\",\"agent\":\"a\",\"task_id\":\"t\",\"error\":null,\"timestamp\":\"2026-01-01T00:00:00Z\"}\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done() // the run never ends
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	defer srv.CloseClientConnections()

	p := &serveProc{proc: startProc(t, "svc runs follow", nil, "runs", "follow", "r1", "--url", srv.URL, "--progress", "always")}
	p.waitLog(t, regexp.MustCompile(`run r1: running`), 20*time.Second)
	p.signal(t, syscall.SIGINT)
	select {
	case <-cancels:
	case <-time.After(20 * time.Second):
		t.Fatal("no POST /runs/r1/cancel after the first interrupt")
	}
	p.waitLog(t, regexp.MustCompile(`cancelling run r1`), 20*time.Second)
	select {
	case <-p.done:
		t.Fatalf("exited (%d) after the first interrupt, before the run ended", p.code)
	case <-time.After(200 * time.Millisecond):
	}
	p.signal(t, syscall.SIGINT)
	if code := p.wait(t, 20*time.Second); code != 130 {
		t.Errorf("exit %d after the second interrupt, want 130", code)
	}
}

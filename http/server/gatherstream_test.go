package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/http/server"
	"github.com/svc-dev/svc/internal/testutil"
	"github.com/svc-dev/svc/supervisor"
)

// streamRuntime serves a real runtime with an echo agent, a slow one and
// one that takes integers only.
func streamRuntime(t *testing.T, opts ...server.Option) (*httptest.Server, *supervisor.Runtime) {
	t.Helper()
	rt, err := supervisor.New(supervisor.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rt.Shutdown(ctx)
	})
	err = rt.Register(svc.Agent{Name: "echo", Model: "test:echo"},
		svc.Agent{Name: "slow", Model: "test:echo", ModelSettings: map[string]any{"latency_ms": 60000}},
		svc.Agent{Name: "int", Model: "test:echo", InputType: json.RawMessage(`{"type":"integer"}`)})
	if err != nil {
		t.Fatal(err)
	}
	h, err := server.NewRouter(rt, append([]server.Option{server.WithLogger(zap.NewNop())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, h), rt
}

// streamLines parses an NDJSON answer: the results by index, and the
// summary, which must be the last line.
func streamLines(t *testing.T, body []byte) (map[int]svc.AgentResult, svc.GatherSummary) {
	t.Helper()
	results := map[int]svc.AgentResult{}
	var sum *svc.GatherSummary
	for i, line := range strings.Split(strings.TrimSuffix(string(body), "\n"), "\n") {
		if sum != nil {
			t.Fatalf("line %d after the summary: %s", i+1, line)
		}
		var l svc.StreamLine
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("line %d %q: %v", i+1, line, err)
		}
		switch {
		case l.Summary != nil:
			sum = l.Summary
		case l.Index != nil && l.Result != nil:
			if _, dup := results[*l.Index]; dup {
				t.Fatalf("index %d twice", *l.Index)
			}
			results[*l.Index] = *l.Result
		default:
			t.Fatalf("line %d is neither a result nor the summary: %s", i+1, line)
		}
	}
	if sum == nil {
		t.Fatalf("no summary line in %s", body)
	}
	return results, *sum
}

// A JSON body with Accept: application/x-ndjson is answered a line per
// result, then the summary.
func TestGatherStreamNDJSONAnswer(t *testing.T) {
	srv, _ := streamRuntime(t)
	var tasks []string
	for i := range 50 {
		tasks = append(tasks, fmt.Sprintf(`{"input":%d}`, i))
	}
	body := `{"tasks":[` + strings.Join(tasks, ",") + `],"max_concurrency":4}`
	r := do(t, srv, "POST", "/agents/echo/gather", body, "Accept", svc.MediaNDJSON)
	if r.status != 200 || r.header.Get("Content-Type") != svc.MediaNDJSON || r.header.Get("X-Request-Id") == "" {
		t.Fatalf("%d %v %s", r.status, r.header, r.body)
	}
	results, sum := streamLines(t, r.body)
	if len(results) != 50 {
		t.Fatalf("%d results", len(results))
	}
	var tokens int64
	for i, res := range results {
		if !res.Success || string(res.Output) != fmt.Sprint(i) {
			t.Errorf("result %d = %+v", i, res)
		}
		tokens += res.Metadata.TokensUsed
	}
	if sum.TaskCount != 50 || sum.SuccessCount != 50 || sum.FailureCount != 0 || sum.TokensUsed != tokens || tokens == 0 || sum.DurationMS <= 0 || sum.Error != nil {
		t.Errorf("summary = %+v (tokens %d)", sum, tokens)
	}
	// The plain JSON answer is as it was.
	r = do(t, srv, "POST", "/agents/echo/gather", body)
	var list []svc.AgentResult
	if err := json.Unmarshal(r.body, &list); r.status != 200 || err != nil || len(list) != 50 || string(list[7].Output) != "7" {
		t.Fatalf("plain gather: %d %v %s", r.status, err, r.body)
	}
}

func TestGatherStreamSSEAnswer(t *testing.T) {
	srv, _ := streamRuntime(t)
	r := do(t, srv, "POST", "/agents/echo/gather", `{"tasks":[{"input":1},{"input":2}]}`, "Accept", "text/event-stream")
	if r.status != 200 || r.header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("%d %v %s", r.status, r.header, r.body)
	}
	frames := strings.Split(strings.TrimSuffix(string(r.body), "\n\n"), "\n\n")
	if len(frames) != 3 || !strings.HasPrefix(frames[2], "event: summary\ndata: {\"summary\":") {
		t.Fatalf("frames = %q", frames)
	}
	for _, f := range frames[:2] {
		if !strings.HasPrefix(f, "event: result\nid: ") || !strings.Contains(f, "\ndata: {\"index\":") {
			t.Errorf("frame %q", f)
		}
	}
}

// An NDJSON body: one task a line, blank lines skipped, a bad line fails
// its task only, naming the task and the line; the body as a whole may
// exceed the body limit, a line may not.
func TestGatherStreamNDJSONBody(t *testing.T) {
	const limit = 256
	srv, _ := streamRuntime(t, server.WithMaxBodyBytes(limit))
	var b strings.Builder
	b.WriteString(`{"input":0}` + "\n")
	b.WriteString("\n")                                                // line 2: blank
	b.WriteString(`{"input":1` + "\n")                                 // line 3: task 1, malformed
	b.WriteString(`{"id":"t2"}` + "\n")                                // line 4: task 2, no input
	b.WriteString(`{"input":"` + strings.Repeat("x", limit) + "\"}\n") // line 5: task 3, too long
	b.WriteString(`{"input":"four"}` + "\n")                           // line 6: task 4, refused by the agent's input_type
	for i := 5; i < 100; i++ {
		fmt.Fprintf(&b, `{"input":%d,"id":"task-%d"}`+"\n", i, i)
	}
	b.WriteString(`{"input":100}`) // no final newline
	if b.Len() <= limit {
		t.Fatal("the body must exceed the limit")
	}
	r := do(t, srv, "POST", "/agents/int/gather?max_concurrency=3", b.String(), "Content-Type", svc.MediaNDJSON)
	if r.status != 200 || r.header.Get("Content-Type") != svc.MediaNDJSON {
		t.Fatalf("%d %v %s", r.status, r.header, r.body)
	}
	results, sum := streamLines(t, r.body)
	if len(results) != 101 || sum.TaskCount != 101 || sum.FailureCount != 4 || sum.SuccessCount != 97 {
		t.Fatalf("%d results, summary %+v", len(results), sum)
	}
	for i, want := range map[int]string{1: "task 1 (line 3): malformed JSON", 2: "task 2 (line 4): input is required",
		3: fmt.Sprintf("task 3 (line 5): longer than %d bytes", limit), 4: "tasks[4]"} {
		res := results[i]
		if res.Success || res.Error == nil || !strings.Contains(res.Error.Message, want) {
			t.Errorf("task %d: %+v, want an error containing %q", i, res.Error, want)
		}
	}
	if results[2].TaskID != "t2" || results[50].TaskID != "task-50" || string(results[100].Output) != "100" {
		t.Errorf("ids or outputs: %+v %+v %+v", results[2], results[50], results[100])
	}
	// max_concurrency in the query is checked like in the body.
	p := problem(t, do(t, srv, "POST", "/agents/int/gather?max_concurrency=0", "{\"input\":1}\n", "Content-Type", svc.MediaNDJSON), 400)
	if !strings.Contains(p.Detail, "max_concurrency 0") {
		t.Errorf("max_concurrency=0: %q", p.Detail)
	}
	problem(t, do(t, srv, "POST", "/agents/nope/gather", "{\"input\":1}\n", "Content-Type", svc.MediaNDJSON), 404)
}

// The tasks are read as the batch goes and each result is sent as it
// finishes: the client sees the answer to its first line before it has
// sent the second.
func TestGatherStreamInterleaved(t *testing.T) {
	srv, _ := streamRuntime(t)
	pr, pw := io.Pipe()
	req, err := http.NewRequestWithContext(t.Context(), "POST", srv.URL+"/agents/echo/gather", pr)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", svc.MediaNDJSON)
	go func() { _, _ = io.WriteString(pw, "{\"input\":\"first\"}\n") }()
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	for i, input := range []string{"first", "second", "third"} {
		if i > 0 {
			if _, err := io.WriteString(pw, fmt.Sprintf("{\"input\":%q}\n", input)); err != nil {
				t.Fatal(err)
			}
		}
		if !lines.Scan() {
			t.Fatalf("no line for task %d: %v", i, lines.Err())
		}
		var l svc.StreamLine
		if err := json.Unmarshal(lines.Bytes(), &l); err != nil || l.Index == nil || *l.Index != i || string(l.Result.Output) != fmt.Sprintf("%q", input) {
			t.Fatalf("line %s (%v), want task %d", lines.Bytes(), err, i)
		}
	}
	pw.Close()
	if !lines.Scan() || !strings.HasPrefix(lines.Text(), `{"summary":{"task_count":3,"success_count":3,`) {
		t.Fatalf("summary line %q", lines.Text())
	}
}

// A client that goes away cancels what remains: nothing keeps running.
func TestGatherStreamClientGone(t *testing.T) {
	srv, rt := streamRuntime(t, server.WithHeartbeat(20*time.Millisecond))
	pr, pw := io.Pipe()
	defer pw.Close()
	ctx, cancel := context.WithCancel(t.Context())
	req, err := http.NewRequestWithContext(ctx, "POST", srv.URL+"/agents/slow/gather?max_concurrency=5", pr)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", svc.MediaNDJSON)
	go func() {
		for i := 0; ; i++ {
			if _, err := fmt.Fprintf(pw, "{\"input\":%d}\n", i); err != nil {
				return
			}
		}
	}()
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := srv.Client().Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	testutil.Eventually(t, "the gather to start", func() bool { return rt.InFlight() == 1 })
	cancel()
	<-done
	testutil.Eventually(t, "the gather to stop", func() bool { return rt.InFlight() == 0 })
}

// A client that stops reading the answer is cut off after the write
// timeout, and its gather stops: the results do not pile up. One that
// also sends without end is not read for ever: the drain of its body ends
// after ten write timeouts (2 s here; unbounded, this took over 40 s).
func TestGatherStreamSlowClient(t *testing.T) {
	srv, rt := streamRuntime(t, server.WithStreamWriteTimeout(200*time.Millisecond))
	pr, pw := io.Pipe()
	defer pw.Close()
	req, err := http.NewRequestWithContext(t.Context(), "POST", srv.URL+"/agents/echo/gather?max_concurrency=50", pr)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", svc.MediaNDJSON)
	pad := strings.Repeat("x", 8000) // fills the socket buffers sooner
	go func() {
		for i := 0; ; i++ {
			if _, err := fmt.Fprintf(pw, "{\"input\":\"%d %s\"}\n", i, pad); err != nil {
				return
			}
		}
	}()
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// Read nothing: the server's writes block once the buffers are full.
	testutil.Within(t, 30*time.Second, "the gather of a client that does not read to stop", func() bool {
		return rt.InFlight() == 0
	})
	pw.Close()
}

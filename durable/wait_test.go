package durable

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/svcproc"
	"github.com/svc-dev/svc/llmsim"
)

// Human in the loop (issue 31 part 7), with real processes: a run waits
// for the approval of its tool call, the process holding it dies, and the
// approval goes to another process (the restarted one, or another serve
// node on a shared Redis store), which finishes the run: the tool is
// called exactly once, and the model call before the wait is not paid
// again.

// waitWorld is a world whose agent "approver" (on llmsim's model m-appr)
// calls http_get on a counting HTTP server, a call that needs approval,
// then answers with what the tool returned.
func waitWorld(t *testing.T, store string) (*world, *atomic.Int64) {
	t.Helper()
	hits := new(atomic.Int64)
	tool := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		_, _ = w.Write([]byte("TOOL-9 was written"))
	}))
	t.Cleanup(tool.Close)
	sc := &llmsim.Scenario{Rules: []llmsim.Rule{
		{Match: llmsim.Match{Model: "m-appr", Prompt: "TOOL-9"}, Reply: llmsim.Reply{Text: "done: TOOL-9"}},
		{Match: llmsim.Match{Model: "m-appr"}, Reply: llmsim.Reply{ToolCalls: []llmsim.ToolCall{
			{Name: "http_get", Arguments: `{"url":"` + tool.URL + `/write"}`}}}},
	}}
	w := newWorld(t, store, sc, map[string]string{
		"agents/approver.yaml": agentSpec("approver", "m-appr", "tools: [http_get]\ntrust_level: medium\napproval: [http_get]\n"),
	})
	return w, hits
}

// waitStatus is the part of a waiting run's status the tests read.
type waitStatus struct {
	State   string `json:"state"`
	Resumed int    `json:"resumed"`
	Waiting []struct {
		ID   string `json:"id"`
		Kind string `json:"kind"`
		Tool string `json:"tool"`
	} `json:"waiting"`
}

// waitFor polls the run's status on url until it is waiting.
func (w *world) waitFor(url, id string) waitStatus {
	w.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, b := w.do(http.MethodGet, url+"/runs/"+id+"/status", nil)
		var st waitStatus
		if code != http.StatusOK || json.Unmarshal(b, &st) != nil {
			w.t.Fatalf("status of %s: %d %s", id, code, b)
		}
		if st.State == "waiting" {
			return st
		}
		if st.State != "pending" && st.State != "running" || time.Now().After(deadline) {
			w.t.Fatalf("run %s is %s, want waiting: %s", id, st.State, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// serveIn starts another serve node on the world's specs and store, with
// the data directory dir.
func (w *world) serveIn(dir string) *svcproc.Server {
	w.t.Helper()
	return svcproc.Serve(w.t, svcBin, append([]string{"--host", "127.0.0.1", "--port", "0", "--specs", w.specs,
		"--data-dir", dir, "--store", w.store}, w.flags...)...)
}

// approve posts the approval of req to url.
func (w *world) approve(url, id, req string) {
	w.t.Helper()
	code, b := w.do(http.MethodPost, url+"/runs/"+id+"/resume", map[string]any{"request_id": req, "approve": true})
	if code != http.StatusAccepted {
		w.t.Fatalf("resume %s on %s: %d %s", id, url, code, b)
	}
}

// checkApproved checks the end of an approved run: completed with the
// tool's answer, the tool called once, the model twice (once before the
// wait, once after: the first call is replayed, not paid again).
func checkApproved(t *testing.T, w *world, url, id string, hits *atomic.Int64) {
	t.Helper()
	st := w.waitDone(url, id)
	if st.State != "completed" {
		t.Fatalf("approved run ended %s: %s", st.State, st.raw)
	}
	if res := w.result(url, id); !strings.Contains(string(res.Output), "TOOL-9") {
		t.Errorf("result %s, want the tool's answer", res.raw)
	}
	if n := hits.Load(); n != 1 {
		t.Errorf("the tool was called %d times, want once", n)
	}
	if n := w.calls()["m-appr"]; n != 2 {
		t.Errorf("the model was called %d times, want 2: the call before the wait is replayed", n)
	}
	frames := w.history(url, id)
	checkSeqs(t, "history", frames)
	c := counts(frames)
	if c["run_waiting/approver"] != 1 || c["run_resumed/"] < 1 || c["agent_failed/approver"] != 0 {
		t.Errorf("history %v: want one run_waiting, a run_resumed, no agent_failed", frames)
	}
}

// SIGKILL while the run waits: the restarted process finds it waiting
// (not failed, not resumed on its own), takes the approval and finishes it.
func TestWaitingRunSurvivesKill(t *testing.T) {
	t.Parallel()
	w, hits := waitWorld(t, "sqlite")
	s1 := w.serve()
	id := w.submit(s1.URL, "approver", "agent", "write it")
	st := w.waitFor(s1.URL, id)
	if len(st.Waiting) != 1 || st.Waiting[0].Kind != "approval" || st.Waiting[0].Tool != "http_get" {
		t.Fatalf("waiting %+v, want the approval of http_get", st.Waiting)
	}
	if hits.Load() != 0 {
		t.Fatal("the tool was called before its approval")
	}
	s1.Kill(t)

	s2 := w.serve()
	defer s2.Stop(t)
	again := w.waitFor(s2.URL, id)
	if again.Resumed != 0 || len(again.Waiting) != 1 || again.Waiting[0].ID != st.Waiting[0].ID {
		t.Fatalf("after the restart: %+v, want the same request, the run not resumed", again)
	}
	w.approve(s2.URL, id, st.Waiting[0].ID)
	checkApproved(t, w, s2.URL, id, hits)
}

// Two serve nodes on one Redis store: the run waits on node A, A dies,
// the approval goes to node B, which finishes the run.
func TestWaitingRunApprovedOnAnotherNode(t *testing.T) {
	t.Parallel()
	w, hits := waitWorld(t, "redis")
	a := w.serve()
	b := w.serveIn(t.TempDir()) // a node of its own: its own data directory
	defer b.Stop(t)
	id := w.submit(a.URL, "approver", "agent", "write it")
	st := w.waitFor(a.URL, id)
	a.Kill(t)
	// B's sweeps of dead nodes' runs leave a waiting run alone.
	time.Sleep(3 * time.Second) // past A's 2 s lease
	if again := w.waitFor(b.URL, id); len(again.Waiting) != 1 {
		t.Fatalf("on node B: %+v", again)
	}
	w.approve(b.URL, id, st.Waiting[0].ID)
	checkApproved(t, w, b.URL, id, hits)
}

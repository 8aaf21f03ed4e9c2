package server_test

import (
	"encoding/json"
	"net/http"
	"testing"

	svc "github.com/svc-dev/svc"
)

// A run the store's Interrupt failed (its process died) reads the same on
// every route: /status with the reason and nothing running, /result with
// its failed AgentResult, /stream ending with the run_failed frame.
func TestInterruptedRun(t *testing.T) {
	srv, f := newRunRouter(t, "")
	ctx := t.Context()
	const id = "r-interrupted"
	st := f.Store
	if err := st.Create(ctx, svc.RunRecord{RunID: id, Target: "echo", Kind: svc.TargetAgent}); err != nil {
		t.Fatal(err)
	}
	if err := st.SetState(ctx, id, svc.RunRunning, "", nil); err != nil {
		t.Fatal(err)
	}
	f.SetProgress(t, id, svc.RunProgress{Total: 1, Running: 1})
	if _, err := st.Append(ctx, id, svc.RunEvent{Type: svc.RunAgentStarted, Agent: "echo", TaskID: "t1"}); err != nil {
		t.Fatal(err)
	}
	if n, err := st.Interrupt(ctx); err != nil || n != 1 {
		t.Fatalf("Interrupt = %d, %v; want 1", n, err)
	}

	r := do(t, srv, http.MethodGet, "/runs/"+id+"/status", "")
	var status map[string]json.RawMessage
	if r.status != http.StatusOK || json.Unmarshal(r.body, &status) != nil {
		t.Fatalf("status = %d %s", r.status, r.body)
	}
	var prog svc.RunProgress
	if string(status["state"]) != `"failed"` || string(status["reason"]) != `"interrupted"` ||
		json.Unmarshal(status["progress"], &prog) != nil || prog != (svc.RunProgress{Total: 1, Failed: 1}) {
		t.Errorf("status %s: want failed, reason interrupted, progress {1 0 1 0}", r.body)
	}

	r = do(t, srv, http.MethodGet, "/runs/"+id+"/result", "")
	var res svc.AgentResult
	if r.status != http.StatusOK || json.Unmarshal(r.body, &res) != nil {
		t.Fatalf("result = %d %s", r.status, r.body)
	}
	if res.Success || res.AgentName != "echo" || res.Error == nil || res.Error.Type != string(svc.KindRuntime) ||
		res.Error.Reason != svc.ReasonInterrupted {
		t.Errorf("result %s: want a failed AgentResult of echo (AgentRuntimeError, interrupted)", r.body)
	}

	frames := readAll(t, openStream(t, ctx, srv, "/runs/"+id+"/stream"))
	if len(frames) != 2 || frames[0].event != "agent_started" || frames[1].event != "run_failed" || frames[1].id != "2" {
		t.Fatalf("stream frames %+v, want agent_started then run_failed (id 2)", frames)
	}
	var ev svc.RunEvent
	if err := json.Unmarshal([]byte(frames[1].data), &ev); err != nil || ev.Error != svc.ReasonInterrupted || ev.Agent != "" {
		t.Errorf("run_failed frame %s: want a run-level event with error interrupted (%v)", frames[1].data, err)
	}
}

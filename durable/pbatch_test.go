package durable

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/llmsim"
)

// A batch of mode provider through `svc serve` and llmsim's OpenAI Batch
// API: the server submits the tasks as one provider batch and stores its
// id; killed by SIGKILL while the provider batch runs, and started again
// on the same SQLite store, it polls that provider batch (llmsim sees one
// batch made in all) and, once the provider has answered, stores every
// task's result, at the batch price. An agent with tools is refused at
// submit with a 400 saying why.
func TestProviderBatchResumedAfterKill(t *testing.T) {
	t.Parallel()
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	w := newWorldSim(t, "sqlite", llmsim.Config{Now: func() time.Time { return time.Unix(0, now.Load()) }, BatchDelay: time.Hour},
		map[string]string{
			"agents/classify.yaml": agentSpec("classify", "gpt-4o-mini", ""),
			"agents/tooled.yaml":   agentSpec("tooled", "gpt-4o-mini", "tools: [current_time]\n"),
		})
	w.flags = append(w.flags, "--provider-batch-poll", "100ms")
	const n = 20
	var body bytes.Buffer
	for i := range n {
		fmt.Fprintf(&body, `{"id": "t-%d", "input": "text %d"}`+"\n", i, i)
	}
	s1 := w.serve()

	resp, err := w.c.Post(s1.URL+"/batches?target=tooled&mode=provider", svc.MediaNDJSON, bytes.NewReader(body.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	var prob struct {
		Error, Message string
	}
	_ = json.NewDecoder(resp.Body).Decode(&prob)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Content-Type") != "application/problem+json" ||
		prob.Error != string(svc.KindSpecValidation) || !strings.Contains(prob.Message, "tools (current_time)") {
		t.Fatalf("an agent with tools in mode provider: %d %s %+v", resp.StatusCode, resp.Header.Get("Content-Type"), prob)
	}

	resp, err = w.c.Post(s1.URL+"/batches?target=classify&mode=provider", svc.MediaNDJSON, &body)
	if err != nil {
		t.Fatal(err)
	}
	var acc svc.BatchAccepted
	if err := json.NewDecoder(resp.Body).Decode(&acc); err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST /batches mode=provider: %d %v", resp.StatusCode, err)
	}
	resp.Body.Close()
	polled := func() int { return w.sim.BatchStats().Polled["openai"] }
	deadline := time.Now().Add(60 * time.Second)
	for polled() < 2 { // polled: its id is stored
		if time.Now().After(deadline) {
			t.Fatalf("the provider batch was not polled: %+v %s", w.sim.BatchStats(), w.batchStatus(s1.URL, acc.BatchID).raw)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st := w.batchStatus(s1.URL, acc.BatchID); st.State != "running" || st.Counts.Running != n || !strings.Contains(st.raw, `"mode":"provider"`) {
		t.Fatalf("before the kill: %s", st.raw)
	}
	s1.Kill(t)

	before := polled()
	s2 := w.serve()
	deadline = time.Now().Add(60 * time.Second)
	for polled() == before {
		if time.Now().After(deadline) {
			t.Fatal("the restarted server does not poll the provider batch")
		}
		time.Sleep(20 * time.Millisecond)
	}
	now.Add(int64(time.Hour)) // the provider answers
	var end batchStatus
	for {
		end = w.batchStatus(s2.URL, acc.BatchID)
		if end.State != "running" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the resumed batch did not end: %s", end.raw)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if end.State != "completed" || end.Counts.Succeeded != n || end.Resumed != 1 {
		t.Fatalf("ended %s", end.raw)
	}
	if made := w.sim.BatchStats().Created["openai"]; made != 1 {
		t.Fatalf("llmsim saw %d provider batches made; want 1: the restarted server polls the stored one", made)
	}
	if calls := w.calls()["gpt-4o-mini"]; calls != n {
		t.Fatalf("llmsim answered %d calls; want %d", calls, n)
	}

	resp, err = w.c.Get(s2.URL + "/batches/" + acc.BatchID + "/results")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	i := 0
	for sc.Scan() {
		var line struct {
			Index  int             `json:"index"`
			Result svc.AgentResult `json:"result"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatal(err)
		}
		r := line.Result
		if line.Index != i || r.TaskID != fmt.Sprintf("t-%d", i) || !r.Success || string(r.Output) != fmt.Sprintf(`"text %d"`, i) ||
			r.Metadata.Backend != "provider_batch" || r.Metadata.CostUSD <= 0 {
			t.Fatalf("line %d: %s", i, sc.Bytes())
		}
		i++
	}
	if i != n {
		t.Fatalf("%d results; want %d", i, n)
	}
}

package durable

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/llmsim"
	"github.com/svc-dev/svc/stores/pebblestore"
	"github.com/svc-dev/svc/stores/redisstore"
	"github.com/svc-dev/svc/stores/sqlitestore"
)

// batchStatus is GET /batches/{id}.
type batchStatus struct {
	State  string `json:"state"`
	Counts struct {
		Total, Succeeded, Failed, Running int64
	} `json:"counts"`
	TokensUsed int64 `json:"tokens_used"`
	Resumed    int   `json:"resumed"`
	raw        string
}

func (w *world) batchStatus(url, id string) batchStatus {
	w.t.Helper()
	code, b := w.do(http.MethodGet, url+"/batches/"+id, nil)
	var st batchStatus
	if code != http.StatusOK || json.Unmarshal(b, &st) != nil {
		w.t.Fatalf("status of batch %s: %d %s", id, code, b)
	}
	st.raw = string(b)
	return st
}

// submitBatch posts n tasks as NDJSON, task i with id t-i.
func (w *world) submitBatch(url, target string, n, conc int) string {
	w.t.Helper()
	var body bytes.Buffer
	for i := range n {
		fmt.Fprintf(&body, `{"id": "t-%d", "input": "task %d"}`+"\n", i, i)
	}
	// The answer waits for every task to be stored: on a loaded machine
	// longer than the world's client waits for a call.
	c := &http.Client{Timeout: 2 * time.Minute}
	defer c.CloseIdleConnections()
	resp, err := c.Post(fmt.Sprintf("%s/batches?target=%s&max_concurrency=%d", url, target, conc), svc.MediaNDJSON, &body)
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	var acc svc.BatchAccepted
	if err := json.NewDecoder(resp.Body).Decode(&acc); err != nil || resp.StatusCode != http.StatusAccepted || acc.Total != int64(n) {
		w.t.Fatalf("POST /batches: %d %+v %v", resp.StatusCode, acc, err)
	}
	return acc.BatchID
}

// openBatchStore opens the world's run store beside (or after) its
// servers, to read what they left.
func (w *world) openBatchStore() (svc.BatchStore, func()) {
	w.t.Helper()
	var s svc.RunStore
	var err error
	switch {
	case strings.HasPrefix(w.store, "sqlite:"):
		s, err = sqlitestore.Open(strings.TrimPrefix(w.store, "sqlite:"))
	case strings.HasPrefix(w.store, "pebble:"):
		s, err = pebblestore.Open(strings.TrimPrefix(w.store, "pebble:"))
	default:
		s, err = redisstore.Open(redisstore.Options{URL: w.store, NodeID: "durable-test-reader"})
	}
	if err != nil {
		w.t.Fatal(err)
	}
	return s.(svc.BatchStore), func() {
		if err := s.Close(); err != nil {
			w.t.Error(err)
		}
	}
}

// A batch of 1,200 tasks on an llmsim model (30 ms a call), `svc serve`
// killed by SIGKILL once half of its results are stored, and started
// again on the same store (on Redis, as a new node that takes the batch
// over once the dead node's lease expires): the batch goes on by itself
// and ends with every task's result once, having called the model exactly
// once for each task whose result was not stored at the kill (none of the
// stored ones again).
func TestBatchResumedAfterKill(t *testing.T) {
	t.Parallel()
	for _, store := range []string{"sqlite", "pebble", "redis"} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			checkBatchResumed(t, store)
		})
	}
}

func checkBatchResumed(t *testing.T, store string) {
	sc := &llmsim.Scenario{Rules: []llmsim.Rule{{Match: llmsim.Match{Model: "m-batch"}, Reply: llmsim.Reply{Text: "done"}, DelayMs: 30}}}
	w := newWorld(t, store, sc, map[string]string{"agents/worker.yaml": agentSpec("worker", "m-batch", "")})
	const n = 1200
	s1 := w.serve()
	id := w.submitBatch(s1.URL, "worker", n, 8)
	deadline := time.Now().Add(90 * time.Second)
	for {
		st := w.batchStatus(s1.URL, id)
		if st.Counts.Succeeded >= n/2 {
			break
		}
		if time.Now().After(deadline) || st.State != "running" && st.State != "queued" {
			t.Fatalf("batch did not reach half-way: %s", st.raw)
		}
		time.Sleep(20 * time.Millisecond)
	}
	s1.Kill(t)
	calls1 := w.calls()["m-batch"]

	// What the killed process left stored.
	st, closeStore := w.openBatchStore()
	rec, err := st.GetBatch(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	stored := rec.Counts.Succeeded + rec.Counts.Failed
	closeStore()
	if rec.State != svc.BatchRunning || stored < n/2 || stored >= n || calls1 < int(stored) {
		t.Fatalf("at the kill: %+v; llmsim calls %d", rec, calls1)
	}
	t.Logf("killed with %d of %d results stored, %d calls made", stored, n, calls1)

	s2 := w.serve()
	deadline = time.Now().Add(90 * time.Second)
	var end batchStatus
	for {
		end = w.batchStatus(s2.URL, id)
		if end.State != "running" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("resumed batch did not end: %s", end.raw)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if end.State != "completed" || end.Counts.Succeeded != n || end.Counts.Failed != 0 || end.Resumed != 1 {
		t.Fatalf("resumed batch ended %s", end.raw)
	}
	if calls2 := w.calls()["m-batch"] - calls1; calls2 != n-int(stored) {
		t.Fatalf("the resumed process called the model %d times; want %d, once for each task without a stored result", calls2, n-int(stored))
	}

	// Every result once, in index order, each its own task's.
	resp, err := w.c.Get(s2.URL + "/batches/" + id + "/results")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc2 := bufio.NewScanner(resp.Body)
	sc2.Buffer(nil, 1<<20)
	i := 0
	for sc2.Scan() {
		var line struct {
			Index  int             `json:"index"`
			Result svc.AgentResult `json:"result"`
		}
		if err := json.Unmarshal(sc2.Bytes(), &line); err != nil {
			t.Fatalf("line %d: %v: %s", i, err, sc2.Bytes())
		}
		if line.Index != i || line.Result.TaskID != fmt.Sprintf("t-%d", i) || !line.Result.Success {
			t.Fatalf("line %d: %s", i, sc2.Bytes())
		}
		i++
	}
	if i != n {
		t.Fatalf("%d results; want %d", i, n)
	}
}

// Two live serve nodes on one Redis store: the batch stays with the node
// that took it (the other does not claim it while the owner's lease is
// renewed), either node answers its status, and a cancel made on the
// other node stops it on its owner.
func TestBatchOwnedByOneNode(t *testing.T) {
	t.Parallel()
	sc := &llmsim.Scenario{Rules: []llmsim.Rule{{Match: llmsim.Match{Model: "m-own"}, Reply: llmsim.Reply{Text: "done"}, DelayMs: 50}}}
	w := newWorld(t, "redis", sc, map[string]string{"agents/worker.yaml": agentSpec("worker", "m-own", "")})
	a := w.serve()
	w.dataDir = t.TempDir() // a node's own, as each host has
	b := w.serve()
	const n = 20_000 // more than the test's time runs at 4 × 50 ms
	id := w.submitBatch(a.URL, "worker", n, 4)
	// Past two leases (2 s each): B would have claimed a batch whose
	// owner's lease lapsed.
	time.Sleep(5 * time.Second)
	st := w.batchStatus(b.URL, id)
	if st.State != "running" || st.Resumed != 0 || st.Counts.Succeeded == 0 {
		t.Fatalf("batch seen from node B while node A runs it: %s", st.raw)
	}
	if code, body := w.do(http.MethodPost, b.URL+"/batches/"+id+"/cancel", nil); code != http.StatusNoContent {
		t.Fatalf("cancel on node B: %d %s", code, body)
	}
	// Node A sees the cancel in the store and stops calling the model.
	var before int
	deadline := time.Now().Add(30 * time.Second)
	for {
		time.Sleep(2 * time.Second)
		now := w.calls()["m-own"]
		if now == before {
			break
		}
		before = now
		if time.Now().After(deadline) {
			t.Fatalf("node A still calls the model 30 s after the cancel (%d calls)", now)
		}
	}
	if st := w.batchStatus(a.URL, id); st.State != "cancelled" || st.Counts.Succeeded >= n || st.Counts.Running != 0 {
		t.Fatalf("after the cancel, node A says %s", st.raw)
	}
}

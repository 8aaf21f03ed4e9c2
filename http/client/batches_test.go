package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"iter"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/batch"
	"github.com/svc-dev/svc/http/server"
	"github.com/svc-dev/svc/stores/memstore"
	"github.com/svc-dev/svc/supervisor"
)

// batchServer serves a real runtime and batch manager (memstore) on a
// loopback socket.
func batchServer(t *testing.T, settings map[string]any, opts ...server.Option) string {
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
	if err := rt.Register(svc.Agent{Name: "echo", Model: "test:echo", ModelSettings: settings}); err != nil {
		t.Fatal(err)
	}
	m, err := batch.New(batch.Config{Store: memstore.New(), Runner: rt, Poll: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	h, err := server.NewRouter(rt, append([]server.Option{server.WithBatches(m)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, h).URL
}

func inputs(n int, bad int) iter.Seq[svc.TaskSpec] {
	return func(yield func(svc.TaskSpec) bool) {
		for i := range n {
			t := svc.TaskSpec{ID: "t" + strconv.Itoa(i), Input: json.RawMessage(strconv.Itoa(i))}
			if i == bad {
				t.Invalid = svc.Errorf(svc.KindSpecValidation, "bad")
			}
			if !yield(t) {
				return
			}
		}
	}
}

// Through HTTP both ways: submit as NDJSON, follow the results in index
// order to the end, status, list, and a bad line failing its task only.
func TestBatchOverHTTP(t *testing.T) {
	c := newClient(t, batchServer(t, nil))
	ctx := t.Context()
	const n = 3000
	acc, err := c.SubmitBatch(ctx, "echo", inputs(n, 5), svc.BatchOptions{MaxConcurrency: 50})
	if err != nil || acc.Total != n {
		t.Fatalf("SubmitBatch = %+v, %v", acc, err)
	}
	next := int64(0)
	for r, err := range c.BatchResults(ctx, acc.BatchID, svc.BatchByIndex, -1, true) {
		if err != nil {
			t.Fatal(err)
		}
		var res svc.AgentResult
		if r.Index != next || json.Unmarshal(r.Result, &res) != nil {
			t.Fatalf("result %d after %d: %s", r.Index, next-1, r.Result)
		}
		if (r.Index == 5) == res.Success || (r.Index != 5 && string(res.Output) != strconv.FormatInt(r.Index, 10)) {
			t.Fatalf("result %d: %s", r.Index, r.Result)
		}
		next++
	}
	if next != n {
		t.Fatalf("followed %d results", next)
	}
	st, err := c.BatchStatus(ctx, acc.BatchID)
	for err == nil && st.State == svc.BatchRunning {
		time.Sleep(10 * time.Millisecond)
		st, err = c.BatchStatus(ctx, acc.BatchID)
	}
	if err != nil || st.State != svc.BatchCompleted || st.Counts.Succeeded != n-1 || st.Counts.Failed != 1 {
		t.Fatalf("status %+v, %v", st, err)
	}
	// By finish, after the 2,990th: the last ten.
	k := 0
	for r, err := range c.BatchResults(ctx, acc.BatchID, svc.BatchByFinish, 2990, false) {
		if err != nil || r.Seq != int64(2991+k) {
			t.Fatalf("by finish: %+v %v", r, err)
		}
		k++
	}
	if k != 10 {
		t.Fatalf("%d results by finish after 2990", k)
	}
	page, err := c.ListBatches(ctx, "", 10)
	if err != nil || len(page.Batches) != 1 || page.Batches[0].BatchID != acc.BatchID {
		t.Fatalf("list %+v %v", page, err)
	}
}

// Refusals are problems that name the cause, and change nothing.
func TestBatchRefusalsOverHTTP(t *testing.T) {
	url := batchServer(t, nil)
	c := newClient(t, url)
	ctx := t.Context()
	if _, err := c.SubmitBatch(ctx, "nope", inputs(2, -1), svc.BatchOptions{MaxConcurrency: 1}); svc.KindOf(err) != svc.KindRegistry {
		t.Fatalf("unknown target: %v", err)
	}
	if _, err := c.SubmitBatch(ctx, "echo", inputs(2, -1), svc.BatchOptions{Mode: svc.BatchProvider}); svc.KindOf(err) != svc.KindSpecValidation ||
		!strings.Contains(err.Error(), "no batch API") {
		t.Fatalf("mode provider on a model without a batch API: %v", err)
	}
	for _, tc := range []struct {
		method, path, ctype, body string
		status                    int
		detail                    string
	}{
		{"POST", "/batches", "application/json", `{"target": "echo", "tasks": []}`, 400, "task"},
		{"POST", "/batches", "application/json", `{"tasks": [{"input": 1}]}`, 400, "target"},
		{"POST", "/batches", "application/json", `{"target": "echo", "tasks": [{"input": 1}], "max_concurrency": 0}`, 400, "max_concurrency"},
		{"POST", "/batches", "application/json", `{"target": "echo", "tasks": [{"input": 1}], "bogus": 1}`, 400, "bogus"},
		{"POST", "/batches", svc.MediaNDJSON, `{"input": 1}`, 400, "target"},
		{"POST", "/batches?target=echo&max_concurrency=x", svc.MediaNDJSON, `{"input": 1}`, 400, "max_concurrency"},
		// Mode provider needs a model with a batch API: test's has none.
		{"POST", "/batches", "application/json", `{"target": "echo", "tasks": [{"input": 1}], "mode": "provider"}`, 400, "no batch API"},
		{"POST", "/batches", "application/json", `{"target": "echo", "tasks": [{"input": 1}], "mode": "fast"}`, 400, "mode"},
		{"POST", "/batches?target=echo&mode=provider", svc.MediaNDJSON, `{"input": 1}`, 400, "one model call"},
		{"POST", "/batches?target=echo&mode=fast", svc.MediaNDJSON, `{"input": 1}`, 400, "mode"},
		{"GET", "/batches/nope", "", "", 404, "nope"},
		{"GET", "/batches/nope/results", "", "", 404, "nope"},
		{"POST", "/batches/nope/cancel", "", "", 404, "nope"},
		{"GET", "/batches?limit=0", "", "", 400, "limit"},
	} {
		req, _ := http.NewRequest(tc.method, url+tc.path, strings.NewReader(tc.body))
		if tc.ctype != "" {
			req.Header.Set("Content-Type", tc.ctype)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || resp.Header.Get("Content-Type") != "application/problem+json" || !bytes.Contains(b, []byte(tc.detail)) {
			t.Errorf("%s %s %s: %d %s; want %d naming %q", tc.method, tc.path, tc.body, resp.StatusCode, b, tc.status, tc.detail)
		}
	}
	if page, err := c.ListBatches(ctx, "", 0); err != nil || len(page.Batches) != 0 {
		t.Fatalf("refused batches listed: %+v %v", page, err)
	}
	// A JSON body works too.
	resp, err := http.Post(url+"/batches", "application/json", strings.NewReader(`{"target": "echo", "tasks": [{"input": 1}, {"input": 2}]}`))
	if err != nil {
		t.Fatal(err)
	}
	var acc svc.BatchAccepted
	_ = json.NewDecoder(resp.Body).Decode(&acc)
	resp.Body.Close()
	if resp.StatusCode != 202 || acc.Total != 2 || !strings.HasSuffix(resp.Header.Get("Location"), "/batches/"+acc.BatchID) {
		t.Fatalf("JSON body: %d %+v %s", resp.StatusCode, acc, resp.Header.Get("Location"))
	}
}

// Cancel over HTTP stops a slow batch; a follower ends with the batch.
func TestBatchCancelOverHTTP(t *testing.T) {
	c := newClient(t, batchServer(t, map[string]any{"latency_ms": 20}))
	ctx := t.Context()
	acc, err := c.SubmitBatch(ctx, "echo", inputs(5000, -1), svc.BatchOptions{MaxConcurrency: 4})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan int)
	go func() {
		n := 0
		for _, err := range c.BatchResults(ctx, acc.BatchID, svc.BatchByFinish, 0, true) {
			if err != nil {
				break
			}
			n++
		}
		done <- n
	}()
	time.Sleep(100 * time.Millisecond)
	if err := c.CancelBatch(ctx, acc.BatchID); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-done:
		if n >= 5000 {
			t.Fatalf("follower saw %d results of a cancelled batch", n)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the follower of a cancelled batch did not end")
	}
	if st, _ := c.BatchStatus(ctx, acc.BatchID); st.State != svc.BatchCancelled {
		t.Fatalf("state %s", st.State)
	}
}

// A follow that waits sends an empty line every heartbeat, which the
// client skips.
func TestBatchFollowHeartbeat(t *testing.T) {
	url := batchServer(t, map[string]any{"latency_ms": 400}, server.WithHeartbeat(50*time.Millisecond))
	c := newClient(t, url)
	acc, err := c.SubmitBatch(t.Context(), "echo", inputs(2, -1), svc.BatchOptions{MaxConcurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(url + "/batches/" + acc.BatchID + "/results?follow=true")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	blank, results := 0, 0
	for _, l := range strings.Split(string(body), "\n") {
		if l == "" {
			blank++
		} else {
			results++
		}
	}
	if results != 2 || blank < 3 {
		t.Fatalf("%d results, %d blank lines; want 2 and keep-alives while waiting:\n%s", results, blank, body)
	}
	n := 0
	for _, err := range c.BatchResults(t.Context(), acc.BatchID, svc.BatchByIndex, -1, true) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 2 {
		t.Fatalf("the client read %d results", n)
	}
}

package storetest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/internal/testutil"
)

// The Batches subtests check svc.BatchStore: chunks kept byte-exact,
// results counted once per index and served in both orders with their
// cursors, the state machine, paging newest first, and claims.

func batchStore(t *testing.T, s svc.RunStore) svc.BatchStore {
	t.Helper()
	b, ok := s.(svc.BatchStore)
	if !ok {
		t.Fatalf("%T is not a svc.BatchStore", s)
	}
	return b
}

// batchID returns ids that sort in creation order, as UUIDv7s do.
func batchID(i int) string { return fmt.Sprintf("0192f000-0000-7000-8000-%012d", i) }

func newBatch(t *testing.T, b svc.BatchStore, id string, tasks int) svc.BatchRecord {
	t.Helper()
	ctx := t.Context()
	for n := 0; n*svc.BatchChunkSize < tasks; n++ {
		var chunk []json.RawMessage
		for i := n * svc.BatchChunkSize; i < min(tasks, (n+1)*svc.BatchChunkSize); i++ {
			chunk = append(chunk, json.RawMessage(fmt.Sprintf(`{"input": {"i": %d, "s": "é"}}`, i)))
		}
		mustOK(t, "PutBatchChunk", b.PutBatchChunk(ctx, id, n, chunk))
	}
	rec := svc.BatchRecord{BatchStatus: svc.BatchStatus{BatchID: id, Target: "echo", State: svc.BatchQueued,
		MaxConcurrency: 7, Counts: svc.BatchCounts{Total: int64(tasks)}, CreatedAt: ts(1)}, Owner: "node-a/1"}
	mustOK(t, "CreateBatch", b.CreateBatch(ctx, rec))
	got, err := b.GetBatch(ctx, id)
	mustOK(t, "GetBatch", err)
	return got
}

func result(i int64, ok bool, tokens int64) svc.BatchResult {
	return svc.BatchResult{Index: i, Result: json.RawMessage(fmt.Sprintf(`{"task_id": "t%d", "success": %v}`, i, ok)),
		Success: ok, Tokens: tokens, Cost: 0.25}
}

func indexes(rs []svc.BatchResult) []int64 {
	out := []int64{}
	for _, r := range rs {
		out = append(out, r.Index)
	}
	return out
}

func testBatches(t *testing.T, s svc.RunStore) {
	b := batchStore(t, s)
	ctx := t.Context()
	const total = 2*svc.BatchChunkSize + 3
	rec := newBatch(t, b, batchID(1), total)
	if rec.State != svc.BatchQueued || rec.Counts.Total != total || rec.MaxConcurrency != 7 || rec.Target != "echo" ||
		rec.Owner != "node-a/1" || !rec.CreatedAt.Equal(ts(1)) {
		t.Fatalf("GetBatch after CreateBatch = %+v", rec)
	}
	// Chunks byte-exact.
	c, err := b.BatchChunk(ctx, rec.BatchID, 2)
	mustOK(t, "BatchChunk", err)
	if len(c) != 3 || string(c[1]) != fmt.Sprintf(`{"input": {"i": %d, "s": "é"}}`, 2*svc.BatchChunkSize+1) {
		t.Fatalf("chunk 2 = %d tasks, [1] %s", len(c), c[1])
	}
	if c, err := b.BatchChunk(ctx, rec.BatchID, 0); err != nil || len(c) != svc.BatchChunkSize {
		t.Fatalf("chunk 0 = %d tasks, %v", len(c), err)
	}
	mustOK(t, "SetBatchState running", b.SetBatchState(ctx, rec.BatchID, svc.BatchRunning, ""))

	// Results in finish order 5, 0, 300, 2; 0 again is skipped.
	n, err := b.AddBatchResults(ctx, rec.BatchID, 4, []svc.BatchResult{result(5, true, 10), result(0, false, 1)})
	if err != nil || n != 2 {
		t.Fatalf("AddBatchResults = %d, %v; want 2", n, err)
	}
	n, err = b.AddBatchResults(ctx, rec.BatchID, 3, []svc.BatchResult{result(300, true, 100), result(0, true, 1000), result(2, true, 0)})
	if err != nil || n != 2 {
		t.Fatalf("AddBatchResults with a repeated index = %d, %v; want 2", n, err)
	}
	got, err := b.GetBatch(ctx, rec.BatchID)
	mustOK(t, "GetBatch", err)
	want := svc.BatchCounts{Total: total, Succeeded: 3, Failed: 1, Running: 3}
	if got.Counts != want || got.TokensUsed != 111 || got.CostUSD != 1.0 || got.State != svc.BatchRunning {
		t.Fatalf("after results: %+v tokens %d cost %v; want %+v, 111, 1", got.Counts, got.TokensUsed, got.CostUSD, want)
	}
	byIndex, err := b.BatchResults(ctx, rec.BatchID, svc.BatchByIndex, -1, 100)
	mustOK(t, "BatchResults", err)
	if !slices.Equal(indexes(byIndex), []int64{0, 2, 5, 300}) {
		t.Fatalf("by index = %v", indexes(byIndex))
	}
	if string(byIndex[0].Result) != `{"task_id": "t0", "success": false}` || byIndex[0].Seq != 2 {
		t.Fatalf("result 0 = seq %d %s; want the first one stored, seq 2", byIndex[0].Seq, byIndex[0].Result)
	}
	if r, _ := b.BatchResults(ctx, rec.BatchID, svc.BatchByIndex, 2, 2); !slices.Equal(indexes(r), []int64{5, 300}) {
		t.Fatalf("by index after 2, limit 2 = %v", indexes(r))
	}
	byFinish, err := b.BatchResults(ctx, rec.BatchID, svc.BatchByFinish, 0, 100)
	mustOK(t, "BatchResults", err)
	if !slices.Equal(indexes(byFinish), []int64{5, 0, 300, 2}) {
		t.Fatalf("by finish = %v", indexes(byFinish))
	}
	for i, r := range byFinish {
		if r.Seq != int64(i+1) {
			t.Fatalf("by finish [%d] seq %d", i, r.Seq)
		}
	}
	if r, _ := b.BatchResults(ctx, rec.BatchID, svc.BatchByFinish, 2, 1); !slices.Equal(indexes(r), []int64{300}) {
		t.Fatalf("by finish after 2, limit 1 = %v", indexes(r))
	}
	if _, err := b.BatchResults(ctx, rec.BatchID, "sideways", 0, 1); svc.KindOf(err) != svc.KindSpecValidation {
		t.Fatalf("unknown order: %v", err)
	}

	// Terminal is final.
	mustOK(t, "SetBatchState completed", b.SetBatchState(ctx, rec.BatchID, svc.BatchCompleted, ""))
	if _, err := b.AddBatchResults(ctx, rec.BatchID, 0, []svc.BatchResult{result(7, true, 1)}); svc.KindOf(err) != svc.KindRunState {
		t.Fatalf("AddBatchResults on a completed batch: %v; want RunStateError", err)
	}
	if err := b.SetBatchState(ctx, rec.BatchID, svc.BatchCancelled, ""); svc.KindOf(err) != svc.KindRunState {
		t.Fatalf("cancel a completed batch: %v; want RunStateError", err)
	}
	got, _ = b.GetBatch(ctx, rec.BatchID)
	if got.State != svc.BatchCompleted || got.Counts.Running != 0 || got.Counts.Succeeded != 3 {
		t.Fatalf("after a refused change: %+v", got)
	}
	if err := b.CreateBatch(ctx, rec); svc.KindOf(err) != svc.KindRunState {
		t.Fatalf("duplicate CreateBatch: %v; want RunStateError", err)
	}
	for what, err := range map[string]error{
		"GetBatch": func() error { _, err := b.GetBatch(ctx, "nope"); return err }(),
		"AddBatchResults": func() error {
			_, err := b.AddBatchResults(ctx, "nope", 0, []svc.BatchResult{result(1, true, 1)})
			return err
		}(),
		"SetBatchState": b.SetBatchState(ctx, "nope", svc.BatchCancelled, ""),
		"BatchResults":  func() error { _, err := b.BatchResults(ctx, "nope", svc.BatchByIndex, 0, 1); return err }(),
	} {
		if svc.KindOf(err) != svc.KindRegistry {
			t.Errorf("%s of an unknown batch: %v; want RegistryError", what, err)
		}
	}
}

func testBatchStates(t *testing.T, s svc.RunStore) {
	b := batchStore(t, s)
	ctx := t.Context()
	rec := newBatch(t, b, batchID(1), 1)
	if err := b.SetBatchState(ctx, rec.BatchID, svc.BatchCompleted, ""); svc.KindOf(err) != svc.KindRunState {
		t.Fatalf("queued → completed: %v; want RunStateError", err)
	}
	mustOK(t, "queued → cancelled", b.SetBatchState(ctx, rec.BatchID, svc.BatchCancelled, "user"))
	got, _ := b.GetBatch(ctx, rec.BatchID)
	if got.State != svc.BatchCancelled || got.Reason != "user" {
		t.Fatalf("after cancel: %s %q", got.State, got.Reason)
	}
	rec = newBatch(t, b, batchID(2), 1)
	mustOK(t, "running", b.SetBatchState(ctx, rec.BatchID, svc.BatchRunning, ""))
	mustOK(t, "failed", b.SetBatchState(ctx, rec.BatchID, svc.BatchFailed, "unknown agent"))
	got, _ = b.GetBatch(ctx, rec.BatchID)
	if got.State != svc.BatchFailed || got.Reason != "unknown agent" {
		t.Fatalf("after fail: %s %q", got.State, got.Reason)
	}
}

func testBatchList(t *testing.T, s svc.RunStore) {
	b := batchStore(t, s)
	ctx := t.Context()
	if p, err := b.ListBatches(ctx, "", 0); err != nil || len(p.Batches) != 0 || p.NextCursor != "" || p.Batches == nil {
		t.Fatalf("empty list = %+v, %v", p, err)
	}
	for i := range 5 {
		newBatch(t, b, batchID(i), 1)
	}
	// A batch whose chunks are stored but not its record is not listed.
	mustOK(t, "PutBatchChunk", b.PutBatchChunk(ctx, batchID(9), 0, []json.RawMessage{json.RawMessage(`{}`)}))
	var ids []string
	cursor := ""
	for pages := 0; ; pages++ {
		p, err := b.ListBatches(ctx, cursor, 2)
		mustOK(t, "ListBatches", err)
		for _, st := range p.Batches {
			ids = append(ids, st.BatchID)
		}
		if p.NextCursor == "" {
			if pages != 2 {
				t.Fatalf("%d pages; want 3", pages+1)
			}
			break
		}
		cursor = p.NextCursor
	}
	if !slices.Equal(ids, []string{batchID(4), batchID(3), batchID(2), batchID(1), batchID(0)}) {
		t.Fatalf("listed %v; want newest first", ids)
	}
	if _, err := b.ListBatches(ctx, "", svc.MaxBatchPage+1); svc.KindOf(err) != svc.KindSpecValidation {
		t.Fatalf("limit too big: %v", err)
	}
	mustOK(t, "DeleteBatch", b.DeleteBatch(ctx, batchID(2)))
	if _, err := b.GetBatch(ctx, batchID(2)); svc.KindOf(err) != svc.KindRegistry {
		t.Fatalf("deleted batch: %v", err)
	}
	if _, err := b.BatchChunk(ctx, batchID(2), 0); err == nil {
		t.Fatal("a deleted batch's chunk is still there")
	}
}

// testBatchClaim: a file or memory store's ClaimBatches takes every
// unfinished batch of another owner, once; a shared store's takes those
// of owners without a live lease, which "node-a/1" (never opened) is not
// either.
func testBatchClaim(t *testing.T, s svc.RunStore) {
	b := batchStore(t, s)
	ctx := t.Context()
	newBatch(t, b, batchID(1), 1)
	newBatch(t, b, batchID(2), 1)
	done := newBatch(t, b, batchID(3), 1)
	mustOK(t, "cancel", b.SetBatchState(ctx, done.BatchID, svc.BatchCancelled, ""))
	claimed, err := b.ClaimBatches(ctx, "node-b/1")
	mustOK(t, "ClaimBatches", err)
	var ids []string
	for _, r := range claimed {
		ids = append(ids, r.BatchID)
		if r.Owner != "node-b/1" || r.Resumed != 1 {
			t.Errorf("claimed %s: owner %q resumed %d", r.BatchID, r.Owner, r.Resumed)
		}
	}
	if !slices.Equal(ids, []string{batchID(1), batchID(2)}) {
		t.Fatalf("claimed %v", ids)
	}
	if got, _ := b.GetBatch(ctx, batchID(1)); got.Owner != "node-b/1" || got.Resumed != 1 {
		t.Fatalf("stored after claim: owner %q resumed %d", got.Owner, got.Resumed)
	}
	if again, err := b.ClaimBatches(ctx, "node-b/1"); err != nil || len(again) != 0 {
		t.Fatalf("second claim by the owner = %d, %v; want none", len(again), err)
	}
}

// testBatchConcurrent: results written at once by many callers are each
// counted once.
func testBatchConcurrent(t *testing.T, s svc.RunStore) {
	b := batchStore(t, s)
	ctx := t.Context()
	const total = 400
	rec := newBatch(t, b, batchID(1), total)
	mustOK(t, "running", b.SetBatchState(ctx, rec.BatchID, svc.BatchRunning, ""))
	var wg sync.WaitGroup
	var mu sync.Mutex
	added := 0
	for w := range 8 {
		wg.Go(func() {
			for i := 0; i < total; i += 10 {
				var rs []svc.BatchResult
				for j := i; j < i+10; j++ {
					rs = append(rs, result(int64(j), (j+w)%2 == 0, 1))
				}
				n, err := b.AddBatchResults(ctx, rec.BatchID, 1, rs)
				if err != nil {
					t.Errorf("AddBatchResults: %v", err)
					return
				}
				mu.Lock()
				added += n
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	got, _ := b.GetBatch(ctx, rec.BatchID)
	if added != total || got.Counts.Succeeded+got.Counts.Failed != total || got.TokensUsed != total {
		t.Fatalf("added %d, counts %+v, tokens %d; want %d each", added, got.Counts, got.TokensUsed, total)
	}
	all, _ := b.BatchResults(ctx, rec.BatchID, svc.BatchByFinish, 0, 1000)
	if len(all) != total {
		t.Fatalf("%d results by finish", len(all))
	}
}

// batchReopen is RunReopen's part for batches.
func batchReopen(t *testing.T, open func(t *testing.T, dir string) svc.RunStore) {
	t.Helper()
	dir := t.TempDir()
	s := open(t, dir)
	t.Cleanup(func() { _ = s.Close() })
	b := batchStore(t, s)
	ctx := t.Context()
	rec := newBatch(t, b, batchID(1), svc.BatchChunkSize+1)
	mustOK(t, "running", b.SetBatchState(ctx, rec.BatchID, svc.BatchRunning, ""))
	if _, err := b.AddBatchResults(ctx, rec.BatchID, 2, []svc.BatchResult{result(3, true, 5), result(1, false, 1)}); err != nil {
		t.Fatal(err)
	}
	before, _ := b.GetBatch(ctx, rec.BatchID)
	mustOK(t, "Close", s.Close())
	s = open(t, dir)
	t.Cleanup(func() { _ = s.Close() })
	b = batchStore(t, s)
	after, err := b.GetBatch(ctx, rec.BatchID)
	mustOK(t, "GetBatch after reopen", err)
	if after.Counts != before.Counts || after.TokensUsed != before.TokensUsed || after.State != svc.BatchRunning || after.Owner != before.Owner ||
		!after.CreatedAt.Equal(before.CreatedAt) {
		t.Fatalf("after reopen %+v; before %+v", after, before)
	}
	if c, err := b.BatchChunk(ctx, rec.BatchID, 1); err != nil || len(c) != 1 {
		t.Fatalf("chunk 1 after reopen: %d, %v", len(c), err)
	}
	if r, _ := b.BatchResults(ctx, rec.BatchID, svc.BatchByFinish, 0, 10); !slices.Equal(indexes(r), []int64{3, 1}) {
		t.Fatalf("results after reopen %v", indexes(r))
	}
	claimed, err := b.ClaimBatches(ctx, "node-new/1")
	if err != nil || len(claimed) != 1 || claimed[0].Resumed != 1 {
		t.Fatalf("claim after reopen: %+v, %v", claimed, err)
	}
}

// testSharedBatchClaim: of nodes sharing a store, none claims a batch
// whose owner's node is alive; once that node is killed (its lease lapses)
// exactly one of two nodes claiming at once gets it; a node restarted with
// its id (another token) claims its own batch of the life before.
func testSharedBatchClaim(t *testing.T, open Opener) {
	a, kill := open(t, "node-a", SharedLease)
	ba := batchStore(t, a)
	mustOK(t, "PutBatchChunk", ba.PutBatchChunk(t.Context(), batchID(1), 0, []json.RawMessage{json.RawMessage(`{}`)}))
	mustOK(t, "CreateBatch", ba.CreateBatch(t.Context(), svc.BatchRecord{BatchStatus: svc.BatchStatus{BatchID: batchID(1), Target: "echo",
		State: svc.BatchRunning, MaxConcurrency: 1, Counts: svc.BatchCounts{Total: 1}}, Owner: "node-a/life-1"}))
	b, _ := open(t, "node-b", SharedLease)
	c, _ := open(t, "node-c", SharedLease)
	bb, bc := batchStore(t, b), batchStore(t, c)
	if got, err := bb.ClaimBatches(t.Context(), "node-b/1"); err != nil || len(got) != 0 {
		t.Fatalf("claim of a live node's batch: %d, %v; want none", len(got), err)
	}
	// Node A in a new life (same id, another token) takes it back.
	if got, err := ba.ClaimBatches(t.Context(), "node-a/life-2"); err != nil || len(got) != 1 || got[0].Owner != "node-a/life-2" {
		t.Fatalf("claim by the node's next life: %+v, %v", got, err)
	}
	kill()
	var mu sync.Mutex
	claimed := map[string]int{}
	testutil.Within(t, 20*time.Second, "a claim of node A's batch after its lease lapsed", func() bool {
		var wg sync.WaitGroup
		for _, x := range []struct {
			s     svc.BatchStore
			owner string
		}{{bb, "node-b/1"}, {bc, "node-c/1"}} {
			wg.Go(func() {
				got, err := x.s.ClaimBatches(t.Context(), x.owner)
				if err != nil {
					t.Errorf("ClaimBatches: %v", err)
				}
				mu.Lock()
				claimed[x.owner] += len(got)
				mu.Unlock()
			})
		}
		wg.Wait()
		return claimed["node-b/1"]+claimed["node-c/1"] > 0
	})
	if claimed["node-b/1"]+claimed["node-c/1"] != 1 {
		t.Fatalf("claims %v; want exactly one", claimed)
	}
	rec, _ := bb.GetBatch(t.Context(), batchID(1))
	if rec.Resumed != 2 || (rec.Owner != "node-b/1" && rec.Owner != "node-c/1") {
		t.Fatalf("after the claims: owner %q resumed %d", rec.Owner, rec.Resumed)
	}
}

// A batch of mode provider keeps its mode, and the provider value its
// runner writes (the same JSON value; a store may compact it), through a
// claim (what the process that
// resumes it reads); a terminal batch takes no provider value.
func testBatchProvider(t *testing.T, s svc.RunStore) {
	b := batchStore(t, s)
	ctx := t.Context()
	id := batchID(40)
	mustOK(t, "PutBatchChunk", b.PutBatchChunk(ctx, id, 0, []json.RawMessage{json.RawMessage(`{"input": 1}`)}))
	rec := svc.BatchRecord{BatchStatus: svc.BatchStatus{BatchID: id, Target: "echo", State: svc.BatchQueued, MaxConcurrency: 1,
		Mode: svc.BatchProvider, Counts: svc.BatchCounts{Total: 1}}, Owner: "node-a/1"}
	mustOK(t, "CreateBatch", b.CreateBatch(ctx, rec))
	got, err := b.GetBatch(ctx, id)
	mustOK(t, "GetBatch", err)
	if got.Mode != svc.BatchProvider || len(got.Provider) != 0 {
		t.Fatalf("a new provider batch: mode %q, provider %s", got.Mode, got.Provider)
	}
	const v = `{"parts":[{"id":"batch_1","first":0,"n":1}],"é":true}`
	mustOK(t, "SetBatchProvider", b.SetBatchProvider(ctx, id, json.RawMessage(`{"parts": [{"id": "batch_1", "first": 0, "n": 1}], "é": true}`)))
	compact := func(raw json.RawMessage) string {
		var buf bytes.Buffer
		if json.Compact(&buf, raw) != nil {
			return string(raw)
		}
		return buf.String()
	}
	if got, err = b.GetBatch(ctx, id); err != nil || compact(got.Provider) != v {
		t.Fatalf("GetBatch after SetBatchProvider: %s, %v", got.Provider, err)
	}
	claimed, err := b.ClaimBatches(ctx, "node-b/1")
	mustOK(t, "ClaimBatches", err)
	if len(claimed) != 1 || claimed[0].Mode != svc.BatchProvider || compact(claimed[0].Provider) != v {
		t.Fatalf("claimed %+v", claimed)
	}
	page, err := b.ListBatches(ctx, "", 10)
	mustOK(t, "ListBatches", err)
	if len(page.Batches) != 1 || page.Batches[0].Mode != svc.BatchProvider {
		t.Fatalf("listed %+v", page.Batches)
	}
	if err := b.SetBatchProvider(ctx, id, json.RawMessage(`{"half`)); svc.KindOf(err) != svc.KindSpecValidation {
		t.Fatalf("a provider value that is not JSON: %v", err)
	}
	if err := b.SetBatchProvider(ctx, "nope", json.RawMessage(`{}`)); svc.KindOf(err) != svc.KindRegistry {
		t.Fatalf("an unknown batch: %v", err)
	}
	mustOK(t, "SetBatchState", b.SetBatchState(ctx, id, svc.BatchCancelled, "cancelled"))
	if err := b.SetBatchProvider(ctx, id, json.RawMessage(`{}`)); svc.KindOf(err) != svc.KindRunState {
		t.Fatalf("a terminal batch: %v", err)
	}
	if got, _ = b.GetBatch(ctx, id); compact(got.Provider) != v {
		t.Fatalf("a refused write changed the value: %s", got.Provider)
	}
	bad := rec
	bad.BatchID, bad.Mode = batchID(41), "fast"
	if err := b.CreateBatch(ctx, bad); svc.KindOf(err) != svc.KindSpecValidation {
		t.Fatalf("an unknown mode: %v", err)
	}
}

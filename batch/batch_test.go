package batch_test

import (
	"context"
	"encoding/json"
	"iter"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/batch"
	"github.com/svc-dev/svc/stores/memstore"
	"github.com/svc-dev/svc/stores/sqlitestore"
	"github.com/svc-dev/svc/supervisor"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newRuntime(t *testing.T, agents ...svc.Agent) *supervisor.Runtime {
	t.Helper()
	rt, err := supervisor.New(supervisor.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := rt.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	if err := rt.Register(agents...); err != nil {
		t.Fatal(err)
	}
	return rt
}

func echo(settings map[string]any) svc.Agent {
	return svc.Agent{Name: "echo", Model: "test:echo", ModelSettings: settings}
}

func newManager(t *testing.T, st svc.BatchStore, r batch.Runner) *batch.Manager {
	t.Helper()
	m, err := batch.New(batch.Config{Store: st, Runner: r, Poll: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// numbered yields n tasks whose input is their index; bad lists the
// indexes yielded as unreadable lines.
func numbered(n int, bad ...int) iter.Seq[svc.TaskSpec] {
	return func(yield func(svc.TaskSpec) bool) {
		for i := range n {
			t := svc.TaskSpec{Input: json.RawMessage(strconv.Itoa(i))}
			for _, b := range bad {
				if b == i {
					t = svc.TaskSpec{ID: "bad", Invalid: svc.Errorf(svc.KindSpecValidation, "task %d (line %d): not JSON", i, i+1)}
				}
			}
			if !yield(t) {
				return
			}
		}
	}
}

func waitState(t *testing.T, m *batch.Manager, id string, want svc.BatchState) svc.BatchStatus {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := m.BatchStatus(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if st.State == want {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("batch %s is %s (%+v); want %s", id, st.State, st.Counts, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A batch runs every task once, a bad line fails only its own task, and
// following the results by index yields them all, in order, as they come.
func TestBatchRunsEveryTask(t *testing.T) {
	rt := newRuntime(t, echo(nil))
	m := newManager(t, memstore.New(), rt)
	const n = 1000
	acc, err := m.SubmitBatch(t.Context(), "echo", numbered(n, 17), svc.BatchOptions{MaxConcurrency: 13})
	if err != nil {
		t.Fatal(err)
	}
	if acc.Total != n || acc.BatchID == "" {
		t.Fatalf("accepted %+v", acc)
	}
	next := int64(0)
	for r, err := range m.BatchResults(t.Context(), acc.BatchID, svc.BatchByIndex, -1, true) {
		if err != nil {
			t.Fatal(err)
		}
		if r.Index != next {
			t.Fatalf("result %d after %d", r.Index, next-1)
		}
		next++
		var res svc.AgentResult
		if err := json.Unmarshal(r.Result, &res); err != nil {
			t.Fatal(err)
		}
		if r.Index == 17 {
			if res.Success || res.Error == nil || res.Error.Type != string(svc.KindSpecValidation) || res.TaskID != "bad" {
				t.Fatalf("bad line's result %+v", res)
			}
			continue
		}
		if !res.Success || string(res.Output) != strconv.FormatInt(r.Index, 10) || res.Metadata.TraceID != acc.BatchID {
			t.Fatalf("result %d = %s", r.Index, r.Result)
		}
	}
	if next != n {
		t.Fatalf("followed %d results; want %d", next, n)
	}
	st := waitState(t, m, acc.BatchID, svc.BatchCompleted)
	if st.Counts != (svc.BatchCounts{Total: n, Succeeded: n - 1, Failed: 1}) || st.TokensUsed <= 0 || st.MaxConcurrency != 13 {
		t.Fatalf("status %+v", st)
	}
	// By finish, resumed after the 990th.
	k := 0
	for r, err := range m.BatchResults(t.Context(), acc.BatchID, svc.BatchByFinish, 990, false) {
		if err != nil || r.Seq != int64(991+k) {
			t.Fatalf("by finish: %+v, %v", r, err)
		}
		k++
	}
	if k != 10 {
		t.Fatalf("%d results after seq 990; want 10", k)
	}
	page, err := m.ListBatches(t.Context(), "", 0)
	if err != nil || len(page.Batches) != 1 || page.Batches[0].BatchID != acc.BatchID {
		t.Fatalf("list = %+v, %v", page, err)
	}
}

// Refusals store nothing.
func TestBatchRefused(t *testing.T) {
	rt := newRuntime(t, echo(nil))
	st := memstore.New()
	m := newManager(t, st, rt)
	for _, tc := range []struct {
		target string
		conc   int
		tasks  iter.Seq[svc.TaskSpec]
		kind   svc.Kind
	}{
		{"nope", 1, numbered(3), svc.KindRegistry},
		{"", 1, numbered(3), svc.KindSpecValidation},
		{"echo", -1, numbered(3), svc.KindSpecValidation},
		{"echo", 1, numbered(0), svc.KindSpecValidation},
	} {
		if _, err := m.SubmitBatch(t.Context(), tc.target, tc.tasks, svc.BatchOptions{MaxConcurrency: tc.conc}); svc.KindOf(err) != tc.kind {
			t.Errorf("submit %q conc %d: %v; want %s", tc.target, tc.conc, err, tc.kind)
		}
	}
	if page, _ := st.ListBatches(t.Context(), "", 0); len(page.Batches) != 0 {
		t.Fatalf("refused batches stored: %+v", page)
	}
	if _, err := m.BatchStatus(t.Context(), "nope"); svc.KindOf(err) != svc.KindRegistry {
		t.Fatalf("status of an unknown batch: %v", err)
	}
	if err := m.CancelBatch(t.Context(), "nope"); svc.KindOf(err) != svc.KindRegistry {
		t.Fatalf("cancel of an unknown batch: %v", err)
	}
}

// Cancel stops the batch: state cancelled, no runner left, no result
// stored after it.
func TestBatchCancel(t *testing.T) {
	rt := newRuntime(t, echo(map[string]any{"latency_ms": 50}))
	m := newManager(t, memstore.New(), rt)
	acc, err := m.SubmitBatch(t.Context(), "echo", numbered(10_000), svc.BatchOptions{MaxConcurrency: 4})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if err := m.CancelBatch(t.Context(), acc.BatchID); err != nil {
		t.Fatal(err)
	}
	if err := m.CancelBatch(t.Context(), acc.BatchID); err != nil {
		t.Fatalf("second cancel: %v", err)
	}
	st := waitState(t, m, acc.BatchID, svc.BatchCancelled)
	deadline := time.Now().Add(10 * time.Second)
	for m.Running() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if m.Running() != 0 {
		t.Fatal("the runner of a cancelled batch still runs")
	}
	after, _ := m.BatchStatus(t.Context(), acc.BatchID)
	if after.Counts.Succeeded != st.Counts.Succeeded || after.Counts.Succeeded >= 10_000 || after.Counts.Running != 0 {
		t.Fatalf("counts moved after cancel: %+v then %+v", st.Counts, after.Counts)
	}
}

// countingRunner counts, by input, the tasks handed to the runtime.
type countingRunner struct {
	batch.Runner
	mu   sync.Mutex
	seen map[string]int
}

func (c *countingRunner) GatherStream(ctx context.Context, agent string, tasks iter.Seq[svc.TaskSpec], conc int) iter.Seq2[svc.GatherItem, error] {
	counted := func(yield func(svc.TaskSpec) bool) {
		for t := range tasks {
			c.mu.Lock()
			c.seen[string(t.Input)]++
			c.mu.Unlock()
			if !yield(t) {
				return
			}
		}
	}
	return c.Runner.GatherStream(ctx, agent, counted, conc)
}

// A batch stopped half-way (the manager closed, as at a shutdown) is
// resumed by the next manager on the same SQLite file: it runs only the
// tasks without a stored result, and ends with every result stored once.
func TestBatchResumeSQLite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "runs.db")
	st, err := sqlitestore.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	rt := newRuntime(t, echo(map[string]any{"latency_ms": 5}))
	m1, err := batch.New(batch.Config{Store: st, Runner: rt, Poll: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	const n = 600
	acc, err := m1.SubmitBatch(t.Context(), "echo", numbered(n), svc.BatchOptions{MaxConcurrency: 8})
	if err != nil {
		t.Fatal(err)
	}
	for {
		s, _ := m1.BatchStatus(t.Context(), acc.BatchID)
		if s.Counts.Succeeded >= n/3 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	_ = m1.Close()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st, err = sqlitestore.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	stopped := map[string]bool{}
	for r, err := range resultsOf(t, st, acc.BatchID) {
		if err != nil {
			t.Fatal(err)
		}
		stopped[strconv.FormatInt(r.Index, 10)] = true
	}
	if len(stopped) == 0 || len(stopped) == n {
		t.Fatalf("%d results stored at the stop; want some, not all", len(stopped))
	}
	cr := &countingRunner{Runner: rt, seen: map[string]int{}}
	m2 := newManager(t, st, cr)
	s := waitState(t, m2, acc.BatchID, svc.BatchCompleted)
	if s.Counts.Succeeded != n || s.Resumed != 1 {
		t.Fatalf("resumed batch: %+v", s)
	}
	cr.mu.Lock()
	defer cr.mu.Unlock()
	for in, k := range cr.seen {
		if stopped[in] {
			t.Errorf("task %s ran again after its result was stored", in)
		}
		if k != 1 {
			t.Errorf("task %s handed over %d times in the resumed life", in, k)
		}
	}
	if len(cr.seen) != n-len(stopped) {
		t.Fatalf("resumed life ran %d tasks; want the %d without a result", len(cr.seen), n-len(stopped))
	}
}

func resultsOf(t *testing.T, st svc.BatchStore, id string) iter.Seq2[svc.BatchResult, error] {
	return func(yield func(svc.BatchResult, error) bool) {
		after := int64(-1)
		for {
			page, err := st.BatchResults(t.Context(), id, svc.BatchByIndex, after, 100)
			if err != nil {
				yield(svc.BatchResult{}, err)
				return
			}
			if len(page) == 0 {
				return
			}
			for _, r := range page {
				if !yield(r, nil) {
					return
				}
				after = r.Index
			}
		}
	}
}

package supervisor_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/zap"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/emitters/emittertest"
	"github.com/svc-dev/svc/eventstore"
	"github.com/svc-dev/svc/eventstore/memevents"
	"github.com/svc-dev/svc/http/client"
	"github.com/svc-dev/svc/http/server"
)

// budgetEvents records budget_exceeded events and, for each, whether an
// error had already been returned to the caller when it was emitted.
type budgetEvents struct {
	emittertest.Recorder
	returned atomic.Bool
	mu       sync.Mutex
	late     int // budget_exceeded events emitted after the error was returned
}

func (b *budgetEvents) Emit(ev svc.RuntimeEvent) {
	if ev.EventType == svc.EventBudgetExceeded && b.returned.Load() {
		b.mu.Lock()
		b.late++
		b.mu.Unlock()
	}
	b.Recorder.Emit(ev)
}

// scopes returns the scope of each budget_exceeded event, in order.
func (b *budgetEvents) scopes() []string {
	var out []string
	for _, ev := range b.OfType(svc.EventBudgetExceeded) {
		s, _ := ev.Payload["scope"].(string)
		out = append(out, s)
	}
	return out
}

// The runtime's token_budget is one budget shared by every run: runs spend
// it together; the run that overdraws it keeps its result (its tokens are
// spent either way) and its budget_exceeded says by how much; every later
// run (and submission) is refused up front; a reset admits runs again.
func TestRuntimeBudgetSharedByRuns(t *testing.T) {
	rec := &budgetEvents{}
	rt := newRuntime(t, opts(func(o *svc.Options) { o.TokenBudget = 25 }), rec, nil, echo("spender", map[string]any{"tokens": 10}))
	ctx := context.Background()
	run := func(id string) error {
		_, err := rt.Run(ctx, "spender", svc.TaskSpec{ID: id, Input: json.RawMessage(`1`)})
		return err
	}
	for _, id := range []string{"r1", "r2"} {
		if err := run(id); err != nil {
			t.Fatalf("run %s within the budget: %v", id, err)
		}
	}
	if st, err := rt.TokenBudget(ctx); err != nil || st != (svc.BudgetStatus{Limit: 25, Used: 20, Remaining: 5}) {
		t.Fatalf("budget after two runs = %+v, %v", st, err)
	}
	// The third run fits at its pre-check (5 left) and overdraws at its
	// post-charge: it succeeds with its answer.
	res, err := rt.Run(ctx, "spender", svc.TaskSpec{ID: "r3", Input: json.RawMessage(`3`)})
	if err != nil || !res.Success || string(res.Output) != "3" || res.Metadata.TokensUsed != 10 {
		t.Fatalf("run overdrawing the runtime budget: %+v, %v", res, err)
	}
	// Spent: new runs, gathers and submissions are refused before they
	// start, each after its budget_exceeded.
	if err := run("r4"); !errors.Is(err, svc.ErrBudgetExceeded) || !strings.Contains(err.Error(), "runtime") {
		t.Fatalf("run after the budget was spent: %v", err)
	}
	if _, err := rt.Gather(ctx, "spender", []svc.TaskSpec{{Input: json.RawMessage(`1`)}}, 1); !errors.Is(err, svc.ErrBudgetExceeded) {
		t.Fatalf("gather after the budget was spent: %v", err)
	}
	if _, err := rt.Submit(ctx, svc.SubmitRequest{Target: "spender", Task: svc.TaskSpec{Input: json.RawMessage(`1`)}}); !errors.Is(err, svc.ErrBudgetExceeded) {
		t.Fatalf("submit after the budget was spent: %v", err)
	}
	rec.returned.Store(true)
	if got := rec.scopes(); strings.Join(got, ",") != "runtime,runtime,runtime,runtime" {
		t.Fatalf("budget_exceeded scopes = %q", got)
	}
	evs := rec.OfType(svc.EventBudgetExceeded)
	if evs[0].TaskID != "r3" || evs[0].Payload["used"] != int64(30) || evs[0].Payload["limit"] != int64(25) ||
		evs[0].Payload["overshoot"] != int64(5) {
		t.Fatalf("post-charge event = %+v", evs[0])
	}
	if evs[1].TaskID != "r4" || evs[1].AgentName != "spender" || evs[1].Payload["used"] != int64(30) {
		t.Fatalf("refusal event = %+v", evs[1])
	}
	for _, ev := range evs[1:] {
		if _, ok := ev.Payload["overshoot"]; ok {
			t.Fatalf("a refusal up front has an overshoot: %+v", ev)
		}
	}
	for _, ev := range evs {
		emittertest.CheckPayload(t, ev)
	}
	// An operator's reset admits runs again.
	if st, err := rt.ResetTokenBudget(ctx); err != nil || st != (svc.BudgetStatus{Limit: 25, Remaining: 25}) {
		t.Fatalf("reset = %+v, %v", st, err)
	}
	if err := run("r5"); err != nil {
		t.Fatalf("run after the reset: %v", err)
	}
	if st, _ := rt.TokenBudget(ctx); st.Used != 10 {
		t.Fatalf("after the reset and one run: %+v", st)
	}
}

// budget_exceeded is emitted before the error reaches the caller, for
// both scopes.
func TestBudgetEventBeforeError(t *testing.T) {
	for _, tc := range []struct {
		name  string
		o     func(*svc.Options)
		scope string
	}{
		{"runtime", func(o *svc.Options) { o.TokenBudget = 5 }, "runtime"},
		{"run", func(o *svc.Options) { o.MaxTokensPerRun = 5 }, "run"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &budgetEvents{}
			rt := newRuntime(t, opts(tc.o), rec, nil, echo("hungry", map[string]any{"tokens": 10}))
			if tc.scope == "runtime" {
				// The run that overdraws the runtime's budget keeps its
				// result; the next is refused.
				if _, err := rt.Run(context.Background(), "hungry", svc.TaskSpec{Input: json.RawMessage(`1`)}); err != nil {
					t.Fatalf("the run overdrawing the budget: %v", err)
				}
				rec.Reset()
			}
			_, err := rt.Run(context.Background(), "hungry", svc.TaskSpec{Input: json.RawMessage(`1`)})
			rec.returned.Store(true)
			if !errors.Is(err, svc.ErrBudgetExceeded) {
				t.Fatalf("err = %v", err)
			}
			if got := rec.scopes(); len(got) != 1 || got[0] != tc.scope {
				t.Fatalf("scopes = %q, want [%s]", got, tc.scope)
			}
			if rec.late != 0 {
				t.Fatal("budget_exceeded was emitted after the error was returned")
			}
		})
	}
}

// The per-run cap: max_tokens_per_run by default, a task's own
// token_budget instead when it has one; in a gather each task has its own;
// a negative token_budget is a bad request.
func TestRunCap(t *testing.T) {
	rec := &budgetEvents{}
	rt := newRuntime(t, opts(func(o *svc.Options) { o.MaxTokensPerRun = 15 }), rec, nil, echo("spender", map[string]any{"tokens": 10}))
	ctx := context.Background()
	// Runs do not share a cap: each of these stays under its 15.
	for range 3 {
		if _, err := rt.Run(ctx, "spender", svc.TaskSpec{Input: json.RawMessage(`1`)}); err != nil {
			t.Fatalf("run under its cap: %v", err)
		}
	}
	if _, err := rt.TokenBudget(ctx); !errors.Is(err, svc.ErrRegistry) {
		t.Fatalf("a runtime without token_budget: %v", err)
	}
	if _, err := rt.ResetTokenBudget(ctx); !errors.Is(err, svc.ErrRegistry) {
		t.Fatalf("reset of a runtime without token_budget: %v", err)
	}
	_, err := rt.Run(ctx, "spender", svc.TaskSpec{Input: json.RawMessage(`1`), TokenBudget: 5})
	if !errors.Is(err, svc.ErrBudgetExceeded) || !strings.Contains(err.Error(), "run") {
		t.Fatalf("task token_budget 5: %v", err)
	}
	if evs := rec.OfType(svc.EventBudgetExceeded); len(evs) != 1 || evs[0].Payload["limit"] != int64(5) || evs[0].Payload["scope"] != "run" {
		t.Fatalf("events = %+v", evs)
	}
	out, err := rt.Gather(ctx, "spender", []svc.TaskSpec{
		{Input: json.RawMessage(`1`)}, {Input: json.RawMessage(`2`), TokenBudget: 5}, {Input: json.RawMessage(`3`)},
	}, 3)
	if err != nil {
		t.Fatal(err)
	}
	if !out[0].Success || out[1].Success || !out[2].Success || out[1].Error.Type != string(svc.KindBudgetExceeded) {
		t.Fatalf("gather with a task's own cap: %+v", out)
	}
	if _, err := rt.Run(ctx, "spender", svc.TaskSpec{Input: json.RawMessage(`1`), TokenBudget: -1}); !errors.Is(err, svc.ErrSpecValidation) ||
		!strings.Contains(err.Error(), "token_budget") {
		t.Fatalf("negative token_budget: %v", err)
	}
	if _, err := rt.Gather(ctx, "spender", []svc.TaskSpec{{Input: json.RawMessage(`1`)}, {Input: json.RawMessage(`1`), TokenBudget: -1}}, 1); !errors.Is(err, svc.ErrSpecValidation) ||
		!strings.Contains(err.Error(), "tasks[1]") {
		t.Fatalf("negative token_budget in a gather: %v", err)
	}
}

// Many concurrent runs against a small runtime budget: the pre-check
// reserves, so they cannot all pass it; what they charge together stays
// within the limit plus one run's charge, and most are refused.
func TestRuntimeBudgetConcurrentRuns(t *testing.T) {
	const limit, charge, runs = 100, 10, 200
	rec := &budgetEvents{}
	rt := newRuntime(t, opts(func(o *svc.Options) { o.TokenBudget = limit }), rec, nil,
		echo("spender", map[string]any{"tokens": charge, "max_tokens": charge, "latency_ms": 20}))
	var wg sync.WaitGroup
	var ok, refused, other atomic.Int64
	var used atomic.Int64
	for range runs {
		wg.Go(func() {
			res, err := rt.Run(context.Background(), "spender", svc.TaskSpec{Input: json.RawMessage(`1`)})
			switch {
			case err == nil && res.Success:
				ok.Add(1)
				used.Add(res.Metadata.TokensUsed)
			case errors.Is(err, svc.ErrBudgetExceeded):
				refused.Add(1)
			default:
				other.Add(1)
				t.Errorf("run: %+v, %v", res, err)
			}
		})
	}
	wg.Wait()
	st, _ := rt.TokenBudget(context.Background())
	if st.Used > limit+charge || st.Reserved != 0 {
		t.Fatalf("%d runs passed and charged %d tokens against a budget of %d (status %+v)", ok.Load(), st.Used, limit, st)
	}
	if ok.Load() > limit/charge+1 || refused.Load() < runs-limit/charge-1 {
		t.Fatalf("%d runs succeeded, %d refused, with room for %d", ok.Load(), refused.Load(), limit/charge)
	}
	if ok.Load() == 0 {
		t.Fatal("no run succeeded")
	}
}

// Over HTTP: a spent runtime budget is a 429 problem+json of kind
// BudgetExceededError for every run; GET /runtime/stats shows the budget;
// the reset is behind the bearer token, and admits runs again.
func TestRuntimeBudgetOverHTTP(t *testing.T) {
	rt := newRuntime(t, opts(func(o *svc.Options) { o.TokenBudget = 15 }), nil, nil, echo("spender", map[string]any{"tokens": 10}))
	events := memevents.New(eventstore.Retention{})
	t.Cleanup(func() { _ = events.Close() })
	h, err := server.NewStandalone(rt, server.StandaloneConfig{AuthToken: "s3cret", Events: events, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	call := func(method, path, body, token string) (int, http.Header, []byte) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, b
	}
	run := func() (int, http.Header, []byte) {
		return call(http.MethodPost, "/agents/spender/run", `{"input":1}`, "s3cret")
	}
	if code, _, body := run(); code != http.StatusOK {
		t.Fatalf("first run: %d %s", code, body)
	}
	// The one that overdraws keeps its result, then one is refused up
	// front.
	if code, _, body := run(); code != http.StatusOK || !strings.Contains(string(body), `"success":true`) {
		t.Fatalf("run 2, overdrawing the budget: %d %s", code, body)
	}
	code, hdr, body := run()
	var p server.Problem
	if err := json.Unmarshal(body, &p); err != nil || code != http.StatusTooManyRequests ||
		hdr.Get("Content-Type") != "application/problem+json" || p.Error != string(svc.KindBudgetExceeded) {
		t.Fatalf("run 3 over the budget: %d %s", code, body)
	}
	code, _, body = call(http.MethodGet, "/runtime/stats", "", "s3cret")
	var st svc.RuntimeStats
	if err := json.Unmarshal(body, &st); err != nil || code != http.StatusOK {
		t.Fatalf("stats: %d %s", code, body)
	}
	if st.TokenBudget == nil || *st.TokenBudget != (svc.BudgetStatus{Limit: 15, Used: 20, Remaining: 0}) {
		t.Fatalf("stats token_budget = %s", body)
	}
	if code, _, _ := call(http.MethodPost, "/runtime/budget/reset", "", ""); code != http.StatusUnauthorized {
		t.Fatalf("reset without the token: %d", code)
	}
	c, err := client.New(srv.URL, client.WithAuthToken("s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if b, err := c.ResetTokenBudget(t.Context()); err != nil || b != (svc.BudgetStatus{Limit: 15, Remaining: 15}) {
		t.Fatalf("reset: %+v, %v", b, err)
	}
	if res, err := c.Run(t.Context(), "spender", svc.TaskSpec{Input: json.RawMessage(`1`)}); err != nil || !res.Success {
		t.Fatalf("run after the reset: %+v, %v", res, err)
	}
	if b, err := c.TokenBudget(t.Context()); err != nil || b.Used != 10 {
		t.Fatalf("budget after the reset and a run: %+v, %v", b, err)
	}
}

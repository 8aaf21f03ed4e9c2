package actors

import (
	"errors"
	"maps"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/agent"
)

func TestBudgetPreCheckAndPostCharge(t *testing.T) {
	if NewBudget(0, ScopeRun, svc.NopEmitter{}) != nil {
		t.Fatal("a zero limit is no budget")
	}
	if Budgets(nil, nil, nil) != nil {
		t.Fatal("no budgets, no agent.Budget")
	}
	var mu sync.Mutex
	var evs []svc.RuntimeEvent
	b := NewBudget(10, ScopeRun, svc.EmitterFunc(func(ev svc.RuntimeEvent) { mu.Lock(); evs = append(evs, ev); mu.Unlock() }))
	inv := &agent.Invocation{Agent: &agent.Compiled{Def: svc.Agent{Name: "a"}}, TaskID: "t", TraceID: "tr", SpanID: "s1"}
	ib := Budgets(b, nil, inv)
	if err := ib.Reserve(4); err != nil {
		t.Fatal(err)
	}
	if err := ib.Charge(10); err != nil {
		t.Fatalf("charging exactly the limit: %v", err)
	}
	// Spent: the pre-check refuses the next call and says so first.
	if err := ib.Reserve(1); !errors.Is(err, svc.ErrBudgetExceeded) {
		t.Fatalf("reserve after spending the budget: %v", err)
	}
	if len(evs) != 1 || evs[0].EventType != svc.EventBudgetExceeded || evs[0].Payload["used"] != int64(10) ||
		evs[0].Payload["limit"] != int64(10) || evs[0].Payload["scope"] != "run" || evs[0].SpanID != "s1" {
		t.Fatalf("events = %+v", evs)
	}
	// The post-charge catches a call that overshot: past a run's cap the
	// call fails; past the runtime's budget it keeps its result, and the
	// budget is spent. Both events say by how much.
	evs = nil
	b2 := NewBudget(5, ScopeRuntime, svc.EmitterFunc(func(ev svc.RuntimeEvent) { mu.Lock(); evs = append(evs, ev); mu.Unlock() }))
	ib2 := Budgets(nil, b2, inv)
	if err := ib2.Reserve(1); err != nil {
		t.Fatal(err)
	}
	if err := ib2.Charge(7); err != nil || b2.Used() != 7 || !b2.Spent() {
		t.Fatalf("overshooting the runtime's budget: %v, used %d, spent %v", err, b2.Used(), b2.Spent())
	}
	if st := b2.Status(); st != (svc.BudgetStatus{Limit: 5, Used: 7, Reserved: 0, Remaining: 0}) {
		t.Fatalf("status = %+v", st)
	}
	if err := ib2.Reserve(1); !errors.Is(err, svc.ErrBudgetExceeded) {
		t.Fatalf("reserve after the runtime's budget was overshot: %v", err)
	}
	b3 := NewBudget(5, ScopeRun, svc.EmitterFunc(func(ev svc.RuntimeEvent) { mu.Lock(); evs = append(evs, ev); mu.Unlock() }))
	ib3 := Budgets(b3, nil, inv)
	if err := ib3.Reserve(1); err != nil {
		t.Fatal(err)
	}
	if err := ib3.Charge(8); !errors.Is(err, svc.ErrBudgetExceeded) {
		t.Fatalf("overshooting a run's cap: %v", err)
	}
	if len(evs) != 3 {
		t.Fatalf("events = %+v", evs)
	}
	for i, want := range []svc.Payload{
		{"limit": int64(5), "used": int64(7), "scope": "runtime", "overshoot": int64(2)}, // the post-charge
		{"limit": int64(5), "used": int64(7), "scope": "runtime"},                        // the next pre-check
		{"limit": int64(5), "used": int64(8), "scope": "run", "overshoot": int64(3)},
	} {
		if !maps.Equal(evs[i].Payload, want) {
			t.Errorf("event %d payload = %v, want %v", i, evs[i].Payload, want)
		}
	}
}

// The pre-check reserves: a call whose estimate does not fit in what the
// others left is refused while they are in flight; alone, it may take the
// rest; a failed call's Charge(0) gives its reservation back.
func TestBudgetReserves(t *testing.T) {
	b := NewBudget(100, ScopeRuntime, svc.NopEmitter{})
	inv := &agent.Invocation{Agent: &agent.Compiled{Def: svc.Agent{Name: "a"}}}
	a, c := Budgets(nil, b, inv), Budgets(nil, b, inv)
	if err := a.Reserve(70); err != nil {
		t.Fatal(err)
	}
	if st := b.Status(); st.Reserved != 70 || st.Remaining != 30 || st.Used != 0 {
		t.Fatalf("after reserving 70: %+v", st)
	}
	if err := c.Reserve(40); !errors.Is(err, svc.ErrBudgetExceeded) {
		t.Fatalf("40 more with 30 left and a call in flight: %v", err)
	}
	if err := a.Charge(0); err != nil { // the call failed
		t.Fatal(err)
	}
	if st := b.Status(); st.Reserved != 0 || st.Remaining != 100 {
		t.Fatalf("after releasing: %+v", st)
	}
	if err := a.Reserve(90); err != nil {
		t.Fatal(err)
	}
	if err := a.Charge(90); err != nil {
		t.Fatal(err)
	}
	// 10 left and nothing in flight: a call estimated at 40 may take them.
	if err := c.Reserve(40); err != nil {
		t.Fatalf("the last call, alone: %v", err)
	}
	if st := b.Status(); st.Reserved != 10 || st.Remaining != 0 {
		t.Fatalf("after the last reservation: %+v", st)
	}
	if err := a.Reserve(1); !errors.Is(err, svc.ErrBudgetExceeded) {
		t.Fatalf("nothing left: %v", err)
	}
}

// Many concurrent calls cannot all pass the pre-check on the same
// remaining tokens: with estimates that cover the calls, at most one call
// (the last, taking the rest) overshoots, by less than its own charge.
func TestBudgetConcurrentReservations(t *testing.T) {
	const limit, charge, calls = 100, 10, 200
	for _, est := range []int64{charge, charge + 3} {
		b := NewBudget(limit, ScopeRuntime, svc.NopEmitter{})
		inv := &agent.Invocation{Agent: &agent.Compiled{Def: svc.Agent{Name: "a"}}}
		var wg sync.WaitGroup
		var mu sync.Mutex
		passed, inFlight, maxInFlight := 0, 0, 0
		start := make(chan struct{})
		for range calls {
			wg.Go(func() {
				ib := Budgets(nil, b, inv)
				<-start
				if ib.Reserve(est) != nil {
					return
				}
				mu.Lock()
				passed++
				inFlight++
				maxInFlight = max(maxInFlight, inFlight)
				mu.Unlock()
				runtime.Gosched()
				mu.Lock()
				inFlight--
				mu.Unlock()
				_ = ib.Charge(charge)
			})
		}
		close(start)
		wg.Wait()
		if used := b.Used(); used > limit+charge {
			t.Fatalf("estimate %d: %d calls charged %d tokens against a limit of %d", est, passed, used, limit)
		}
		if passed > limit/charge+1 {
			t.Fatalf("estimate %d: %d of %d calls passed a budget of %d calls", est, passed, calls, limit/charge)
		}
		// The reservations bound the calls in flight at once.
		if maxInFlight > int(limit/est)+1 {
			t.Fatalf("estimate %d: %d calls in flight at once on a budget of %d", est, maxInFlight, limit)
		}
		if st := b.Status(); st.Reserved != 0 {
			t.Fatalf("reservations left behind: %+v", st)
		}
	}
}

// A refusal of the runtime's budget gives back what the run's cap had
// reserved for the call.
func TestBudgetsBoth(t *testing.T) {
	var evs []svc.RuntimeEvent
	em := svc.EmitterFunc(func(ev svc.RuntimeEvent) { evs = append(evs, ev) })
	run, rtb := NewBudget(50, ScopeRun, em), NewBudget(5, ScopeRuntime, em)
	inv := &agent.Invocation{Agent: &agent.Compiled{Def: svc.Agent{Name: "a"}}}
	ib := Budgets(run, rtb, inv)
	if err := ib.Reserve(5); err != nil {
		t.Fatal(err)
	}
	if err := ib.Charge(5); err != nil {
		t.Fatal(err)
	}
	if err := ib.Reserve(5); !errors.Is(err, svc.ErrBudgetExceeded) || !strings.Contains(err.Error(), "runtime") {
		t.Fatalf("runtime budget spent: %v", err)
	}
	if st := run.Status(); st.Used != 5 || st.Reserved != 0 {
		t.Fatalf("run cap after the runtime's refusal: %+v", st)
	}
	if len(evs) != 1 || evs[0].Payload["scope"] != "runtime" {
		t.Fatalf("events = %+v", evs)
	}
	if st := rtb.Reset(); st.Used != 0 || st.Remaining != 5 {
		t.Fatalf("after reset: %+v", st)
	}
	if err := ib.Reserve(5); err != nil {
		t.Fatalf("after the reset: %v", err)
	}
}

func TestProgress(t *testing.T) {
	var nilP *Progress
	nilP.Add(1, 1, 1, 1) // a run nobody watches: no-op, no panic
	if NewProgress(nil) != nil {
		t.Fatal("no func, no tracker")
	}
	var got []svc.RunProgress
	p := NewProgress(func(rp svc.RunProgress) { got = append(got, rp) })
	p.Add(2, 0, 0, 0)
	p.Add(0, 1, 0, 0)
	p.Add(0, -1, 1, 0)
	if p.Snapshot() != (svc.RunProgress{Total: 2, Completed: 1}) || len(got) != 3 || got[1].Running != 1 {
		t.Fatalf("progress %+v, reports %+v", p.Snapshot(), got)
	}
}

// BenchmarkBudgetReserveCharge is one model call's pre-check and
// post-charge against a run cap and the runtime's budget, from many
// goroutines at once (the runtime's budget is shared by all of them).
func BenchmarkBudgetReserveCharge(b *testing.B) {
	rtb := NewBudget(1<<62, ScopeRuntime, svc.NopEmitter{})
	inv := &agent.Invocation{Agent: &agent.Compiled{Def: svc.Agent{Name: "a"}}}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		ib := Budgets(NewBudget(1<<62, ScopeRun, svc.NopEmitter{}), rtb, inv)
		for pb.Next() {
			if err := ib.Reserve(600); err != nil {
				b.Fatal(err)
			}
			if err := ib.Charge(500); err != nil {
				b.Fatal(err)
			}
		}
	})
}

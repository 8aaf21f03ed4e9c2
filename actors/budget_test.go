package actors

import (
	"errors"
	"sync"
	"testing"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/agent"
)

func TestBudgetPreCheckAndPostCharge(t *testing.T) {
	if NewBudget(0, svc.NopEmitter{}) != nil {
		t.Fatal("a zero limit is no budget")
	}
	var mu sync.Mutex
	var evs []svc.RuntimeEvent
	b := NewBudget(10, svc.EmitterFunc(func(ev svc.RuntimeEvent) { mu.Lock(); evs = append(evs, ev); mu.Unlock() }))
	inv := &agent.Invocation{Agent: &agent.Compiled{Def: svc.Agent{Name: "a"}}, TaskID: "t", TraceID: "tr", SpanID: "s1"}
	ib := b.For(inv)
	if err := ib.Reserve(); err != nil {
		t.Fatal(err)
	}
	if err := ib.Charge(10); err != nil {
		t.Fatalf("charging exactly the limit: %v", err)
	}
	// Spent: the pre-check refuses the next call and says so first.
	if err := ib.Reserve(); !errors.Is(err, svc.ErrBudgetExceeded) {
		t.Fatalf("reserve after spending the budget: %v", err)
	}
	if len(evs) != 1 || evs[0].EventType != svc.EventBudgetExceeded || evs[0].Payload["used"] != int64(10) || evs[0].Payload["limit"] != int64(10) || evs[0].SpanID != "s1" {
		t.Fatalf("events = %+v", evs)
	}
	// The post-charge catches a call that overshot.
	b2 := NewBudget(5, svc.NopEmitter{})
	if err := b2.For(inv).Charge(7); !errors.Is(err, svc.ErrBudgetExceeded) || b2.Used() != 7 {
		t.Fatalf("overshoot: %v, used %d", err, b2.Used())
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

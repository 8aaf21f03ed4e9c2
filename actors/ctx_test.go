package actors

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/svc-dev/svc"
)

type ctxKey struct{}

// newTestInv is an invocation's state as far as its context goes.
func newTestInv() *invState {
	base := context.WithValue(context.Background(), ctxKey{}, "v")
	return &invState{run: &StartRun{detached: context.WithoutCancel(base)}, task: &Task{}}
}

// An invocation's state stays in its size class: a million parked runs
// hold a million of them.
func TestInvStateSize(t *testing.T) {
	if n := unsafe.Sizeof(invState{}); n > 416 {
		t.Errorf("invState is %d bytes, want at most 416 (the size class it was cut to)", n)
	}
}

// The invocation's context behaves as a context.WithCancelCause would:
// Err, Done, Value, and context.Cause of it and of contexts derived from
// it before and after the cancel.
func TestInvocationContext(t *testing.T) {
	for _, cause := range []error{nil, context.Canceled, context.DeadlineExceeded, svc.ErrShuttingDown} {
		st := newTestInv()
		ref, refCancel := context.WithCancelCause(context.WithoutCancel(context.WithValue(context.Background(), ctxKey{}, "v")))
		if st.Err() != nil || context.Cause(st) != nil {
			t.Fatalf("live context: Err %v, Cause %v", st.Err(), context.Cause(st))
		}
		if st.Value(ctxKey{}) != "v" {
			t.Fatalf("Value = %v", st.Value(ctxKey{}))
		}
		if _, ok := st.Deadline(); ok {
			t.Fatal("a deadline")
		}
		before, stopBefore := context.WithCancel(st)
		defer stopBefore()
		valued := context.WithValue(st, ctxKey{}, "w")
		fired := make(chan struct{})
		context.AfterFunc(st, func() { close(fired) })
		done := st.Done()
		select {
		case <-done:
			t.Fatal("Done closed before the cancel")
		default:
		}

		st.cancel(cause)
		refCancel(cause)
		st.cancel(errors.New("second cancel: ignored"))

		<-done
		<-fired
		<-before.Done()
		if st.Done() != done {
			t.Error("Done changed")
		}
		after, stopAfter := context.WithTimeout(st, time.Hour)
		defer stopAfter()
		<-after.Done()
		for name, ctx := range map[string]context.Context{"itself": st, "derived before": before, "value": valued, "derived after": after} {
			var want context.Context = ref
			if ctx.Err() != want.Err() || context.Cause(ctx) != context.Cause(want) {
				t.Errorf("cause %v: %s: Err %v, Cause %v; want %v, %v", cause, name, ctx.Err(), context.Cause(ctx), want.Err(), context.Cause(want))
			}
		}
		if st.Value(ctxKey{}) != "v" || valued.Value(ctxKey{}) != "w" {
			t.Errorf("values after the cancel: %v, %v", st.Value(ctxKey{}), valued.Value(ctxKey{}))
		}
	}
}

// Contexts derived while the invocation is cancelled, from other
// goroutines, all end with its cause (run with -race).
func TestInvocationContextConcurrentDerive(t *testing.T) {
	for range 50 {
		st := newTestInv()
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithCancel(st)
				defer cancel()
				<-ctx.Done()
				if c := context.Cause(ctx); c != svc.ErrShuttingDown {
					t.Errorf("Cause %v", c)
				}
				if st.Err() == nil {
					t.Error("derived context ended before its parent")
				}
			}()
		}
		st.cancel(svc.ErrShuttingDown)
		wg.Wait()
	}
}

// A context derived from an invocation's holds no more than one derived
// from a standard cancel context (whose children map the invocation's
// AfterFunc list replaces): HTTP clients derive one per call.
func TestInvocationContextDerivedCost(t *testing.T) {
	measure := func(parent func() context.Context) float64 {
		var ps []context.Context
		var keep []context.CancelFunc
		for range 1000 {
			ps = append(ps, parent())
		}
		var a, b runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&a)
		for _, p := range ps {
			_, c := context.WithCancel(p)
			keep = append(keep, c)
		}
		runtime.GC()
		runtime.ReadMemStats(&b)
		runtime.KeepAlive(keep)
		return float64(b.HeapAlloc-a.HeapAlloc) / 1000
	}
	std := measure(func() context.Context {
		c, cancel := context.WithCancelCause(context.Background())
		t.Cleanup(func() { cancel(nil) })
		return c
	})
	inv := measure(func() context.Context { return newTestInv() })
	t.Logf("derived context held: under a standard cancel context %.0f B, under an invocation %.0f B", std, inv)
	if inv > std+16 {
		t.Errorf("a context derived from an invocation's holds %.0f B, from a standard cancel context %.0f B", inv, std)
	}
}

package lean

import (
	"context"
	"testing"
	"time"
	"unsafe"
)

// owned is a context as an owner makes one of a Ctx: the Ctx embedded,
// Value and Deadline from its base.
type owned struct {
	Ctx
	base context.Context
}

func newOwned() *owned { return &owned{base: context.Background()} }

func (o *owned) Deadline() (time.Time, bool) { return o.base.Deadline() }
func (o *owned) Value(key any) any           { return o.ValueIn(o.base, key) }
func (o *owned) cancel(cause error)          { o.Cancel(o.base, cause) }

// A Ctx stays 24 bytes: the invocation's state embeds it and is cut to a
// size class.
func TestCtxSize(t *testing.T) {
	if n := unsafe.Sizeof(Ctx{}); n > 24 {
		t.Errorf("Ctx is %d bytes, want at most 24", n)
	}
}

// AfterFunc's stop: true before the cancel, false after it or a second
// time; a stopped function is not called; the list drops the stopped.
func TestCtxAfterFuncStop(t *testing.T) {
	st := newOwned()
	called := make(chan int, 10)
	stop1 := st.AfterFunc(func() { called <- 1 })
	for range 5 {
		_, cancel := context.WithCancel(st)
		cancel()
	}
	stop2 := st.AfterFunc(func() { called <- 2 })
	if !stop1() || stop1() {
		t.Error("stop before the cancel: want true, then false")
	}
	n := 0
	for a := st.extra.Load().afters; a != nil; a = a.next {
		n++
	}
	if n > 2 {
		t.Errorf("%d registrations kept, want at most 2", n)
	}
	st.cancel(nil)
	if got := <-called; got != 2 {
		t.Errorf("called %d", got)
	}
	if stop2() {
		t.Error("stop after the cancel: true")
	}
	st.AfterFunc(func() { called <- 3 })
	if got := <-called; got != 3 {
		t.Errorf("after the cancel: called %d", got)
	}
	select {
	case got := <-called:
		t.Errorf("called %d too", got)
	case <-time.After(20 * time.Millisecond):
	}
}

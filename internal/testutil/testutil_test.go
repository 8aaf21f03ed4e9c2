package testutil

import (
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func TestEventuallyReturnsOnceTrue(t *testing.T) {
	var n atomic.Int32
	go func() {
		for range 3 {
			n.Add(1)
			time.Sleep(time.Millisecond)
		}
	}()
	Eventually(t, "three increments", func() bool { return n.Load() == 3 })
}

// fakeT records a failure instead of ending the test.
type fakeT struct {
	testing.TB
	msg string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.msg = format
	for _, a := range args {
		f.msg += " " + toString(a)
	}
	panic(f) // Fatalf does not return
}

func toString(a any) string {
	switch v := a.(type) {
	case string:
		return v
	case time.Duration:
		return v.String()
	}
	return "?"
}

// The limit is measured on the bubble's clock: a condition that never
// holds fails after exactly the limit, without a real wait.
func TestWithinFailsAtTheLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeT{TB: t}
		start := time.Now()
		func() {
			defer func() {
				if r := recover(); r != f {
					panic(r)
				}
			}()
			Within(f, time.Minute, "the impossible", func() bool { return false })
		}()
		if waited := time.Since(start); waited < time.Minute || waited > time.Minute+time.Second {
			t.Errorf("failed after %v, want about a minute", waited)
		}
		if !strings.Contains(f.msg, "the impossible") || !strings.Contains(f.msg, "1m0s") {
			t.Errorf("failure %q does not say what it waited for and how long", f.msg)
		}
	})
}

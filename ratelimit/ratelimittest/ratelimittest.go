// Package ratelimittest is the conformance suite of ratelimit.Shared
// stores, run by each store's tests against a real server, and Memory, a
// store in this process for the tests of what uses one.
package ratelimittest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/svc-dev/svc/ratelimit"
)

// Store is what Run tests: Open returns a new client of the one store
// (each as another process of the fleet would have); Kill stops the
// store's server, after which Take must fail promptly (Run calls it in
// its last subtest).
type Store struct {
	Open func(t *testing.T) ratelimit.Shared
	Kill func(t *testing.T)
}

// Run runs the suite.
func Run(t *testing.T, s Store) {
	ctx := context.Background()
	key := func(t *testing.T) string { return "suite:" + t.Name() }

	t.Run("ConcurrentTakersStayWithinTheLimit", func(t *testing.T) {
		const perMinute, burst = 1200.0, 10.0 // 20 a second
		k := key(t)
		var granted atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		stop := start.Add(1500 * time.Millisecond)
		for c := range 4 {
			st := s.Open(t)
			for g := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					node := fmt.Sprintf("node-%d", c)
					for time.Now().Before(stop) {
						gr, err := st.Take(ctx, k, node, 1, perMinute, burst)
						if err != nil {
							t.Errorf("client %d taker %d: %v", c, g, err)
							return
						}
						if gr.Wait > 0 {
							time.Sleep(min(gr.Wait, 20*time.Millisecond))
							continue
						}
						granted.Add(1)
					}
				}()
			}
		}
		wg.Wait()
		elapsed := time.Since(start).Seconds()
		most := burst + perMinute/60*elapsed
		// The bucket refills continuously: the takers spend most of it.
		least := burst + perMinute/60*1.5*0.5
		if got := float64(granted.Load()); got > most+0.001 || got < least {
			t.Errorf("granted %v in %.2fs: want between %.0f and %.1f (burst %v + %v/min)", got, elapsed, least, most, burst, perMinute)
		}
	})

	t.Run("RefillIsContinuous", func(t *testing.T) {
		st, k := s.Open(t), key(t)
		const perMinute, burst = 60.0, 3.0 // one a second
		for i := range 3 {
			if g, err := st.Take(ctx, k, "n", 1, perMinute, burst); err != nil || g.Wait != 0 {
				t.Fatalf("take %d of a full bucket: %+v, %v", i, g, err)
			}
		}
		g, err := st.Take(ctx, k, "n", 1, perMinute, burst)
		if err != nil {
			t.Fatal(err)
		}
		// A window that resets each minute would say up to a minute.
		if g.Wait <= 0 || g.Wait > time.Second {
			t.Fatalf("empty bucket: wait %v, want in (0, 1s]", g.Wait)
		}
		time.Sleep(g.Wait + 20*time.Millisecond)
		if g, err := st.Take(ctx, k, "n", 1, perMinute, burst); err != nil || g.Wait != 0 {
			t.Fatalf("after the wait it said: %+v, %v", g, err)
		}
		// Half a unit's time later, half a unit is there: the wait is
		// about half a second.
		time.Sleep(500 * time.Millisecond)
		if g, err := st.Take(ctx, k, "n", 1, perMinute, burst); err != nil || g.Wait <= 0 || g.Wait > 600*time.Millisecond {
			t.Fatalf("half refilled: %+v, %v, want a wait in (0, 600ms]", g, err)
		}
	})

	t.Run("AllOrNothing", func(t *testing.T) {
		st, k := s.Open(t), key(t)
		if g, err := st.Take(ctx, k, "n", 8, 60, 10); err != nil || g.Wait != 0 {
			t.Fatalf("take 8 of 10: %+v, %v", g, err)
		}
		if g, err := st.Take(ctx, k, "n", 5, 60, 10); err != nil || g.Wait <= 0 {
			t.Fatalf("take 5 of 2: %+v, %v, want a wait", g, err)
		}
		if g, err := st.Take(ctx, k, "n", 2, 60, 10); err != nil || g.Wait != 0 {
			t.Fatalf("take the 2 left (a refused take took nothing): %+v, %v", g, err)
		}
	})

	t.Run("KeysAreSeparate", func(t *testing.T) {
		st, k := s.Open(t), key(t)
		if g, err := st.Take(ctx, k+":a", "n", 5, 60, 5); err != nil || g.Wait != 0 {
			t.Fatalf("a: %+v, %v", g, err)
		}
		if g, err := st.Take(ctx, k+":a", "n", 1, 60, 5); err != nil || g.Wait == 0 {
			t.Fatalf("a is empty: %+v, %v", g, err)
		}
		if g, err := st.Take(ctx, k+":b", "n", 5, 60, 5); err != nil || g.Wait != 0 {
			t.Fatalf("b is full: %+v, %v", g, err)
		}
	})

	t.Run("CountsNodes", func(t *testing.T) {
		a, b, k := s.Open(t), s.Open(t), key(t)
		if _, err := a.Take(ctx, k, "node-a", 1, 6000, 100); err != nil {
			t.Fatal(err)
		}
		g, err := b.Take(ctx, k, "node-b", 1, 6000, 100)
		if err != nil || g.Nodes != 2 {
			t.Fatalf("two nodes took: %+v, %v", g, err)
		}
		if g, err := a.Take(ctx, k, "node-a", 1, 6000, 100); err != nil || g.Nodes != 2 {
			t.Fatalf("node a again: %+v, %v", g, err)
		}
	})

	t.Run("DeadStoreFailsPromptly", func(t *testing.T) {
		st, k := s.Open(t), key(t)
		if _, err := st.Take(ctx, k, "n", 1, 60, 1); err != nil {
			t.Fatal(err)
		}
		s.Kill(t)
		tctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := st.Take(tctx, k, "n", 1, 60, 1)
		if err == nil {
			t.Fatal("Take of a dead store: no error")
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("Take of a dead store took %v with a 500ms context", d)
		}
	})
}

// Memory is a Shared store in this process. Failing makes every Take
// fail; Hang makes every Take wait for its context.
type Memory struct {
	mu      sync.Mutex
	buckets map[string]*bucket
	Failing atomic.Bool
	Hang    atomic.Bool
	Takes   atomic.Int64 // how many Takes it answered
}

type bucket struct {
	level float64
	at    time.Time
	nodes map[string]time.Time
}

// NewMemory returns an empty Memory store.
func NewMemory() *Memory { return &Memory{buckets: map[string]*bucket{}} }

// ErrFailing is what a Failing Memory's Take returns.
var ErrFailing = errors.New("ratelimittest: the store is failing")

// Kind is "memory".
func (m *Memory) Kind() string { return "memory" }

// Take implements ratelimit.Shared.
func (m *Memory) Take(ctx context.Context, key, node string, n, perMinute, burst float64) (ratelimit.Grant, error) {
	if m.Hang.Load() {
		<-ctx.Done()
		return ratelimit.Grant{}, ctx.Err()
	}
	if m.Failing.Load() {
		return ratelimit.Grant{}, ErrFailing
	}
	m.Takes.Add(1)
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	b := m.buckets[key]
	if b == nil {
		b = &bucket{level: burst, at: now, nodes: map[string]time.Time{}}
		m.buckets[key] = b
	}
	rate := perMinute / 60
	b.level = math.Min(b.level+now.Sub(b.at).Seconds()*rate, burst)
	b.at = now
	b.nodes[node] = now
	for id, at := range b.nodes {
		if now.Sub(at) > 10*time.Second {
			delete(b.nodes, id)
		}
	}
	g := ratelimit.Grant{Nodes: len(b.nodes)}
	if b.level >= n {
		b.level -= n
	} else {
		g.Wait = time.Duration(math.Ceil((n - b.level) / rate * float64(time.Second)))
	}
	return g, nil
}

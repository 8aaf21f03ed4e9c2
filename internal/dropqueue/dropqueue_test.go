package dropqueue

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder is a consumer that keeps every batch it is given.
type recorder struct {
	mu      sync.Mutex
	batches [][]int
}

func (r *recorder) consume(b []int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.batches = append(r.batches, slices.Clone(b))
}

func (r *recorder) sizes() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []int
	for _, b := range r.batches {
		out = append(out, len(b))
	}
	return out
}

func (r *recorder) items() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []int
	for _, b := range r.batches {
		out = append(out, b...)
	}
	return out
}

func TestDeliversInOrderAndDrainsOnClose(t *testing.T) {
	r := &recorder{}
	q := New(Config{Size: 100}, r.consume)
	for i := range 50 {
		if !q.Put(i) {
			t.Fatalf("Put(%d) refused with room in the queue", i)
		}
	}
	if err := q.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := make([]int, 50)
	for i := range want {
		want[i] = i
	}
	if got := r.items(); !slices.Equal(got, want) {
		t.Fatalf("consumed %v, want 0..49 in order", got)
	}
	for _, n := range r.sizes() {
		if n != 1 {
			t.Fatalf("batch of %d with Batch 1", n)
		}
	}
	if q.Put(50) || q.Dropped() != 1 {
		t.Fatalf("Put after Close: dropped %d, want 1", q.Dropped())
	}
	if err := q.Close(context.Background()); err != nil {
		t.Fatalf("second Close = %v", err)
	}
}

// A consumer that never returns must not stall Put: what does not fit is
// dropped and counted; Close with a deadline gives up and drops the rest.
func TestNeverBlocksAndCloseGivesUp(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	q := New(Config{Size: 8}, func([]int) {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-release
	})
	q.Put(0)
	<-entered // the goroutine holds item 0; the queue is empty again
	for i := 1; i <= 1000; i++ {
		q.Put(i)
	}
	if d := q.Dropped(); d != 1000-8 {
		t.Fatalf("dropped %d of 1000 with a queue of 8 and a stuck consumer, want %d", d, 1000-8)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := q.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close with a stuck consumer = %v, want the deadline", err)
	}
	close(release)
	<-q.Done()
	// The 8 queued behind the stuck call were dropped, not consumed.
	if d := q.Dropped(); d != 1000 {
		t.Fatalf("dropped %d after an abandoned Close, want 1000", d)
	}
}

// With Linger the consumer gets full batches, and a partial batch once its
// first item has waited Linger. synctest's clock makes the waits exact.
func TestLingerBatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &recorder{}
		q := New(Config{Size: 100, Batch: 10, Linger: time.Second}, r.consume)
		for i := range 25 {
			q.Put(i)
		}
		synctest.Wait()
		if got := r.sizes(); !reflect.DeepEqual(got, []int{10, 10}) {
			t.Fatalf("batches before the linger: %v, want [10 10]", got)
		}
		time.Sleep(999 * time.Millisecond)
		synctest.Wait()
		if got := r.sizes(); len(got) != 2 {
			t.Fatalf("the partial batch went early: %v", got)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if got := r.sizes(); !reflect.DeepEqual(got, []int{10, 10, 5}) {
			t.Fatalf("batches after the linger: %v, want [10 10 5]", got)
		}
		// The next item starts a new wait.
		q.Put(25)
		time.Sleep(time.Second)
		synctest.Wait()
		if got := r.sizes(); !reflect.DeepEqual(got, []int{10, 10, 5, 1}) {
			t.Fatalf("batches: %v, want [10 10 5 1]", got)
		}
		q.Put(26)
		if err := q.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := r.sizes(); !reflect.DeepEqual(got, []int{10, 10, 5, 1, 1}) {
			t.Fatalf("Close did not flush the partial batch: %v", got)
		}
	})
}

// Without Linger the consumer gets what has piled up, up to Batch, at once.
func TestBatchesWhatIsWaiting(t *testing.T) {
	release, entered := make(chan struct{}), make(chan struct{})
	r := &recorder{}
	first := true
	q := New(Config{Size: 100, Batch: 4}, func(b []int) {
		if first {
			first = false
			close(entered)
			<-release
		}
		r.consume(b)
	})
	q.Put(0)
	<-entered // the goroutine holds item 0 alone
	for i := 1; i <= 9; i++ {
		q.Put(i)
	}
	close(release)
	if err := q.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := r.sizes(); !reflect.DeepEqual(got, []int{1, 4, 4, 1}) {
		t.Fatalf("batches %v, want [1 4 4 1]", got)
	}
}

func TestConcurrentPutAndClose(t *testing.T) {
	var n sync.WaitGroup
	var consumed int64
	var mu sync.Mutex
	q := New(Config{Size: 16, Batch: 3}, func(b []int) { mu.Lock(); consumed += int64(len(b)); mu.Unlock() })
	for range 4 {
		n.Go(func() {
			for i := range 1000 {
				q.Put(i)
			}
		})
	}
	time.Sleep(time.Millisecond)
	if err := q.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	n.Wait()
	mu.Lock()
	defer mu.Unlock()
	if consumed+q.Dropped() != 4000 {
		t.Fatalf("consumed %d + dropped %d != 4000 put", consumed, q.Dropped())
	}
}

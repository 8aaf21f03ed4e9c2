// Package brokertest is the contract suite every svc.Broker passes, in the
// style of testing/fstest.TestFS: a broker's own test calls Run with a
// function that opens clients of one backend.
package brokertest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/fleetwire"
)

// Open returns a new client of the backend under test. Clients returned by
// one Open share the backend, as separate processes share a broker server:
// what one publishes another consumes. The suite closes every client it
// opens.
type Open func(t *testing.T) svc.Broker

// ackWait is the short ack deadline the suite runs under, so that
// redeliveries come quickly; assertions are on counts and identities, never
// on how long something took.
const ackWait = 500 * time.Millisecond

// patience bounds every wait: only a broken broker reaches it.
const patience = 20 * time.Second

// noDeadline is the ack deadline of tests that are not about deadlines: long
// enough that a slow machine never causes a redelivery.
const noDeadline = 30 * time.Second

// Run runs the contract subtests, in parallel, each on its own subjects.
func Run(t *testing.T, open Open) {
	t.Helper()
	o := func(t *testing.T) svc.Broker {
		t.Helper()
		b := open(t)
		if b == nil {
			t.Fatal("open returned a nil broker")
		}
		t.Cleanup(func() { _ = b.Close() })
		return b
	}
	tests := []struct {
		name string
		fn   func(*testing.T, func(*testing.T) svc.Broker)
	}{
		{"PublishSubscribe", testPublishSubscribe},
		{"CompetingConsumers", testCompetingConsumers},
		{"RedeliverAfterDeath", testRedeliverAfterDeath},
		{"InProgressKeepsAlive", testInProgress},
		{"NackRedelivers", testNack},
		{"DeadLetterAfterMaxDeliver", testDeadLetter},
		{"DeadLetterAfterDeadlines", testDeadLetterAbandoned},
		{"Prefetch", testPrefetch},
		{"Drain", testDrain},
		{"DrainGivesUp", testDrainGivesUp},
		{"StopCancelsHandlers", testStop},
		{"Broadcast", testBroadcast},
		{"Payloads", testPayloads},
		{"Close", testClose},
		{"ErrorsTyped", testErrorsTyped},
		{"HandlerPanics", testHandlerPanics},
		{"Retain", testRetain},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, o)
		})
	}
}

// subject returns a fresh task subject for one test.
func subject(t *testing.T) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fleetwire.TaskSubject("bt-" + hex.EncodeToString(b[:]))
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	t.Cleanup(cancel)
	return ctx
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// quiet lets a broker that would wrongly deliver more do so, before counts
// are checked.
func quiet() { time.Sleep(2 * ackWait) }

func publish(t *testing.T, b svc.Broker, subj string, data []byte) {
	t.Helper()
	if err := b.Publish(ctxT(t), subj, data); err != nil {
		t.Fatalf("Publish(%s): %v", subj, err)
	}
}

func subscribe(t *testing.T, b svc.Broker, subj string, opts svc.SubscribeOptions, h svc.Handler) svc.Subscription {
	t.Helper()
	if opts.AckWait == 0 {
		opts.AckWait = ackWait
	}
	s, err := b.Subscribe(ctxT(t), subj, opts, h)
	if err != nil {
		t.Fatalf("Subscribe(%s): %v", subj, err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	return s
}

// record collects deliveries.
type record struct {
	mu   sync.Mutex
	seen []seen
}

type seen struct {
	member  string
	data    string
	attempt int
	id      string
}

func (r *record) add(member string, d *svc.Delivery) {
	r.mu.Lock()
	r.seen = append(r.seen, seen{member, string(d.Data), d.Attempt, d.ID})
	r.mu.Unlock()
}

func (r *record) all() []seen {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seen)
}

func (r *record) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen)
}

func testPublishSubscribe(t *testing.T, open func(*testing.T) svc.Broker) {
	b := open(t)
	subj := subject(t)
	publish(t, b, subj, []byte("hello"))
	got := make(chan *svc.Delivery, 4)
	var ackErr, againErr atomic.Value
	subscribe(t, b, subj, svc.SubscribeOptions{AckWait: noDeadline}, func(ctx context.Context, d *svc.Delivery) {
		if err := d.Ack(ctx); err != nil {
			ackErr.Store(err)
		}
		againErr.Store(fmt.Sprint(d.Ack(ctx)))
		got <- d
	})
	var d *svc.Delivery
	select {
	case d = <-got:
	case <-time.After(patience):
		t.Fatal("the published message never arrived (a message published before the subscription must wait for it)")
	}
	if string(d.Data) != "hello" || d.Subject != subj || d.Attempt != 1 || d.ID == "" || d.AckWait != noDeadline {
		t.Errorf("delivery = {Subject %q, Data %q, Attempt %d, ID %q, AckWait %v}; want {%q, hello, 1, non-empty, %v}",
			d.Subject, d.Data, d.Attempt, d.ID, d.AckWait, subj, noDeadline)
	}
	if e := ackErr.Load(); e != nil {
		t.Errorf("Ack: %v", e)
	}
	if e := againErr.Load(); e != fmt.Sprint(svc.ErrSettled) {
		t.Errorf("second Ack = %v, want ErrSettled", e)
	}
	if err := d.InProgress(context.Background()); !errors.Is(err, svc.ErrSettled) {
		t.Errorf("InProgress after Ack = %v, want ErrSettled", err)
	}
	publish(t, b, subj, []byte("second"))
	select {
	case d = <-got:
		if string(d.Data) != "second" || d.Attempt != 1 {
			t.Errorf("second message: %q attempt %d", d.Data, d.Attempt)
		}
	case <-time.After(patience):
		t.Fatal("a message published to a live subscription never arrived")
	}
	quiet()
	if len(got) != 0 {
		t.Errorf("an acked message was delivered again: %q", (<-got).Data)
	}
}

func testCompetingConsumers(t *testing.T, open func(*testing.T) svc.Broker) {
	subj := subject(t)
	var rec record
	const n = 30
	for _, name := range []string{"a", "b"} {
		b := open(t)
		subscribe(t, b, subj, svc.SubscribeOptions{Group: "workers", ConsumerID: name, Prefetch: 1, AckWait: noDeadline}, func(ctx context.Context, d *svc.Delivery) {
			rec.add(name, d)
			time.Sleep(10 * time.Millisecond) // hold the slot so the other member is asked
			if err := d.Ack(ctx); err != nil {
				t.Errorf("Ack: %v", err)
			}
		})
	}
	pub := open(t)
	for i := range n {
		publish(t, pub, subj, fmt.Appendf(nil, "m%02d", i))
	}
	waitFor(t, "all messages", func() bool { return rec.len() >= n })
	quiet()
	all := rec.all()
	count := map[string]int{}
	per := map[string]int{}
	for _, s := range all {
		count[s.data]++
		per[s.member]++
	}
	if len(all) != n || len(count) != n {
		t.Errorf("%d deliveries of %d distinct messages; want each of %d exactly once", len(all), len(count), n)
	}
	for data, c := range count {
		if c != 1 {
			t.Errorf("%s delivered %d times", data, c)
		}
	}
	if per["a"] == 0 || per["b"] == 0 {
		t.Errorf("deliveries per member = %v; both members of the group should get work", per)
	}
}

func testRedeliverAfterDeath(t *testing.T, open func(*testing.T) svc.Broker) {
	subj := subject(t)
	dying := open(t)
	first := make(chan *svc.Delivery, 1)
	// The member that dies takes the message and works on it until its
	// whole client goes away, never settling it.
	subscribe(t, dying, subj, svc.SubscribeOptions{Group: "g", ConsumerID: "dying"}, func(ctx context.Context, d *svc.Delivery) {
		select {
		case first <- d:
		default:
		}
		<-ctx.Done()
	})
	pub := open(t)
	publish(t, pub, subj, []byte("survive me"))
	var d1 *svc.Delivery
	select {
	case d1 = <-first:
	case <-time.After(patience):
		t.Fatal("first delivery never arrived")
	}
	if err := dying.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	var rec record
	heir := open(t)
	subscribe(t, heir, subj, svc.SubscribeOptions{Group: "g", ConsumerID: "heir"}, func(ctx context.Context, d *svc.Delivery) {
		rec.add("heir", d)
		_ = d.Ack(ctx)
	})
	waitFor(t, "the redelivery to the surviving member", func() bool { return rec.len() >= 1 })
	quiet()
	all := rec.all()
	if len(all) != 1 {
		t.Fatalf("surviving member got %d deliveries, want 1: %+v", len(all), all)
	}
	if all[0].data != "survive me" || all[0].attempt != 2 || all[0].id != d1.ID {
		t.Errorf("redelivery = %+v; want data %q, attempt 2, id %q", all[0], "survive me", d1.ID)
	}
}

func testInProgress(t *testing.T, open func(*testing.T) svc.Broker) {
	subj := subject(t)
	var rec record
	done := make(chan struct{})
	var doneOnce sync.Once
	for _, name := range []string{"a", "b"} {
		b := open(t)
		subscribe(t, b, subj, svc.SubscribeOptions{Group: "g", ConsumerID: name, AckWait: 2 * ackWait}, func(ctx context.Context, d *svc.Delivery) {
			rec.add(name, d)
			// Work for three ack deadlines, extending all along.
			stop := fleetwire.KeepAlive(ctx, d, ackWait/5)
			time.Sleep(6 * ackWait)
			stop()
			if err := d.InProgress(ctx); err != nil {
				t.Errorf("InProgress: %v", err)
			}
			if err := d.Ack(ctx); err != nil {
				t.Errorf("Ack after a long, extended run: %v", err)
			}
			doneOnce.Do(func() { close(done) })
		})
	}
	publish(t, open(t), subj, []byte("long task"))
	select {
	case <-done:
	case <-time.After(patience):
		t.Fatal("the long task never finished")
	}
	quiet()
	if all := rec.all(); len(all) != 1 {
		t.Errorf("a task kept alive by InProgress was delivered %d times: %+v", len(all), all)
	}
}

func testNack(t *testing.T, open func(*testing.T) svc.Broker) {
	b := open(t)
	subj := subject(t)
	var rec record
	subscribe(t, b, subj, svc.SubscribeOptions{}, func(ctx context.Context, d *svc.Delivery) {
		rec.add("", d)
		var err error
		switch {
		case d.Attempt == 1 && string(d.Data) == "now":
			err = d.Nack(ctx, 0)
		case d.Attempt == 1:
			err = d.Nack(ctx, ackWait/2)
		default:
			err = d.Ack(ctx)
		}
		if err != nil {
			t.Errorf("settle attempt %d: %v", d.Attempt, err)
		}
		if err := d.Nack(ctx, 0); !errors.Is(err, svc.ErrSettled) {
			t.Errorf("second settlement = %v, want ErrSettled", err)
		}
	})
	publish(t, b, subj, []byte("now"))
	publish(t, b, subj, []byte("later"))
	waitFor(t, "the redeliveries", func() bool { return rec.len() >= 4 })
	quiet()
	all := rec.all()
	if len(all) != 4 {
		t.Fatalf("%d deliveries, want 4: %+v", len(all), all)
	}
	for _, data := range []string{"now", "later"} {
		var attempts []int
		ids := map[string]bool{}
		for _, s := range all {
			if s.data == data {
				attempts = append(attempts, s.attempt)
				ids[s.id] = true
			}
		}
		if !slices.Equal(attempts, []int{1, 2}) || len(ids) != 1 {
			t.Errorf("%s: attempts %v with ids %v; want [1 2] under one id", data, attempts, ids)
		}
	}
}

func deadLetters(t *testing.T, b svc.Broker, subj string) chan svc.DeadLetter {
	ch := make(chan svc.DeadLetter, 8)
	subscribe(t, b, fleetwire.DeadLetterSubject(subj), svc.SubscribeOptions{}, func(ctx context.Context, d *svc.Delivery) {
		var dl svc.DeadLetter
		if err := json.Unmarshal(d.Data, &dl); err != nil {
			t.Errorf("dead letter record: %v: %q", err, d.Data)
		}
		// A dead letter starts its own count: the deliveries of the
		// message it records are not its own.
		if d.Attempt != 1 {
			t.Errorf("first delivery of a dead letter has attempt %d, want 1", d.Attempt)
		}
		ch <- dl
		_ = d.Ack(ctx)
	})
	return ch
}

func checkDeadLetter(t *testing.T, how string, dl svc.DeadLetter, subj, data string, n int) {
	t.Helper()
	if dl.Subject != subj || string(dl.Data) != data || dl.Deliveries != n || dl.Reason == "" || dl.At.IsZero() {
		t.Errorf("%s = {Subject %q, Data %q, Deliveries %d, Reason %q, At %v}; want {%q, %q, %d, a reason, a time}",
			how, dl.Subject, dl.Data, dl.Deliveries, dl.Reason, dl.At, subj, data, n)
	}
}

func testDeadLetter(t *testing.T, open func(*testing.T) svc.Broker) {
	b := open(t)
	subj := subject(t)
	var rec record
	hook := make(chan svc.DeadLetter, 4)
	dlq := deadLetters(t, b, subj)
	subscribe(t, b, subj, svc.SubscribeOptions{MaxDeliver: 3, OnDeadLetter: func(ctx context.Context, dl svc.DeadLetter) { hook <- dl }},
		func(ctx context.Context, d *svc.Delivery) {
			rec.add("", d)
			if err := d.Nack(ctx, 0); err != nil {
				t.Errorf("Nack: %v", err)
			}
		})
	publish(t, b, subj, []byte("poison"))
	for _, c := range []struct {
		how string
		ch  chan svc.DeadLetter
	}{{"OnDeadLetter", hook}, {"dead-letter subject", dlq}} {
		select {
		case dl := <-c.ch:
			checkDeadLetter(t, c.how, dl, subj, "poison", 3)
		case <-time.After(patience):
			t.Fatalf("no dead letter through %s", c.how)
		}
	}
	quiet()
	var attempts []int
	for _, s := range rec.all() {
		attempts = append(attempts, s.attempt)
	}
	if !slices.Equal(attempts, []int{1, 2, 3}) {
		t.Errorf("handler saw attempts %v, want [1 2 3] then the dead letter", attempts)
	}
	if len(hook) != 0 || len(dlq) != 0 {
		t.Errorf("more than one dead letter for one message")
	}
}

func testDeadLetterAbandoned(t *testing.T, open func(*testing.T) svc.Broker) {
	b := open(t)
	subj := subject(t)
	var rec record
	hook := make(chan svc.DeadLetter, 4)
	subscribe(t, b, subj, svc.SubscribeOptions{MaxDeliver: 2, OnDeadLetter: func(ctx context.Context, dl svc.DeadLetter) { hook <- dl }},
		func(ctx context.Context, d *svc.Delivery) { rec.add("", d) }) // never settles
	publish(t, b, subj, []byte("hangs"))
	select {
	case dl := <-hook:
		checkDeadLetter(t, "OnDeadLetter", dl, subj, "hangs", 2)
	case <-time.After(patience):
		t.Fatal("a message whose every delivery timed out never reached the dead letter")
	}
	quiet()
	if n := rec.len(); n != 2 {
		t.Errorf("handler saw %d deliveries, want 2", n)
	}
}

func testPrefetch(t *testing.T, open func(*testing.T) svc.Broker) {
	b := open(t)
	subj := subject(t)
	var running, most, total atomic.Int32
	release := make(chan struct{})
	subscribe(t, b, subj, svc.SubscribeOptions{Prefetch: 2, AckWait: noDeadline}, func(ctx context.Context, d *svc.Delivery) {
		n := running.Add(1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		<-release
		running.Add(-1)
		total.Add(1)
		_ = d.Ack(ctx)
	})
	for i := range 6 {
		publish(t, b, subj, fmt.Appendf(nil, "%d", i))
	}
	waitFor(t, "two handlers running", func() bool { return running.Load() == 2 })
	quiet()
	if m := most.Load(); m != 2 {
		t.Errorf("%d handlers ran at once with Prefetch 2", m)
	}
	close(release)
	waitFor(t, "all six", func() bool { return total.Load() == 6 })
	if m := most.Load(); m > 2 {
		t.Errorf("%d handlers ran at once with Prefetch 2", m)
	}
}

func testDrain(t *testing.T, open func(*testing.T) svc.Broker) {
	b := open(t)
	subj := subject(t)
	started := make(chan struct{})
	var startOnce sync.Once
	var acked, cancelled atomic.Bool
	var rec record
	sub := subscribe(t, b, subj, svc.SubscribeOptions{AckWait: noDeadline}, func(ctx context.Context, d *svc.Delivery) {
		rec.add("", d)
		startOnce.Do(func() { close(started) })
		select {
		case <-time.After(ackWait / 2):
		case <-ctx.Done():
			cancelled.Store(true)
		}
		acked.Store(d.Ack(context.Background()) == nil)
	})
	publish(t, b, subj, []byte("finish me"))
	<-started
	if err := sub.Drain(ctxT(t)); err != nil {
		t.Fatalf("Drain: %v", err)
	}
	if cancelled.Load() || !acked.Load() {
		t.Errorf("Drain returned with the handler cancelled=%v acked=%v; want it to finish and ack", cancelled.Load(), acked.Load())
	}
	if err := sub.Stop(); err != nil {
		t.Errorf("Stop after Drain: %v", err)
	}
	// Drained: a new message waits for another member.
	publish(t, b, subj, []byte("next"))
	quiet()
	if n := rec.len(); n != 1 {
		t.Errorf("drained subscription handled %d messages, want 1", n)
	}
	var later record
	subscribe(t, open(t), subj, svc.SubscribeOptions{}, func(ctx context.Context, d *svc.Delivery) {
		later.add("", d)
		_ = d.Ack(ctx)
	})
	waitFor(t, "the message published after the drain", func() bool { return later.len() >= 1 })
	if s := later.all()[0]; s.data != "next" || s.attempt != 1 {
		t.Errorf("after drain got %+v, want next at attempt 1 (the drained message was acked)", s)
	}
}

func testDrainGivesUp(t *testing.T, open func(*testing.T) svc.Broker) {
	b := open(t)
	subj := subject(t)
	started := make(chan struct{})
	var sawCancel atomic.Bool
	sub := subscribe(t, b, subj, svc.SubscribeOptions{AckWait: noDeadline}, func(ctx context.Context, d *svc.Delivery) {
		close(started)
		<-ctx.Done() // a task that will not finish in time
		sawCancel.Store(true)
	})
	publish(t, b, subj, []byte("stuck"))
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), ackWait/5)
	defer cancel()
	if err := sub.Drain(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Drain past its context = %v, want context.DeadlineExceeded", err)
	}
	if !sawCancel.Load() {
		t.Error("Drain gave up without cancelling and waiting for the handler")
	}
}

func testStop(t *testing.T, open func(*testing.T) svc.Broker) {
	b := open(t)
	subj := subject(t)
	started := make(chan struct{})
	var sawCancel atomic.Bool
	sub := subscribe(t, b, subj, svc.SubscribeOptions{}, func(ctx context.Context, d *svc.Delivery) {
		close(started)
		<-ctx.Done()
		sawCancel.Store(true)
	})
	publish(t, b, subj, []byte("x"))
	<-started
	if err := sub.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if !sawCancel.Load() {
		t.Error("Stop returned before the handler saw its context cancelled")
	}
	if err := sub.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	// The unsettled delivery comes back to the next member.
	var rec record
	subscribe(t, open(t), subj, svc.SubscribeOptions{}, func(ctx context.Context, d *svc.Delivery) {
		rec.add("", d)
		_ = d.Ack(ctx)
	})
	waitFor(t, "the stopped member's message", func() bool { return rec.len() >= 1 })
	if s := rec.all()[0]; s.data != "x" || s.attempt != 2 {
		t.Errorf("got %+v, want x at attempt 2", s)
	}
}

type bcast struct {
	mu   sync.Mutex
	msgs []string
}

func (c *bcast) handler(want string) svc.BroadcastHandler {
	return func(ctx context.Context, subject string, data []byte) {
		if subject != want {
			panic("broadcast handler got subject " + subject)
		}
		c.mu.Lock()
		c.msgs = append(c.msgs, string(data))
		c.mu.Unlock()
	}
}

func (c *bcast) get() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.msgs)
}

func testBroadcast(t *testing.T, open func(*testing.T) svc.Broker) {
	subj := "svc.bt.bcast." + subject(t)[len("svc.tasks."):]
	other := subj + "x"
	pub := open(t)
	var listeners [3]bcast
	var subs [3]svc.Subscription
	var otherL bcast
	for i := range listeners {
		b := pub
		if i > 0 {
			b = open(t) // two other processes, and the publisher itself
		}
		s, err := b.SubscribeBroadcast(ctxT(t), subj, listeners[i].handler(subj))
		if err != nil {
			t.Fatalf("SubscribeBroadcast: %v", err)
		}
		t.Cleanup(func() { _ = s.Stop() })
		subs[i] = s
	}
	so, err := pub.SubscribeBroadcast(ctxT(t), other, otherL.handler(other))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = so.Stop() })
	var want []string
	for i := range 20 {
		m := fmt.Sprintf("b%02d", i)
		want = append(want, m)
		if err := pub.Broadcast(ctxT(t), subj, []byte(m)); err != nil {
			t.Fatalf("Broadcast: %v", err)
		}
	}
	for i := range listeners {
		waitFor(t, "every broadcast at every subscriber", func() bool { return len(listeners[i].get()) >= len(want) })
	}
	if err := subs[1].Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := pub.Broadcast(ctxT(t), subj, []byte("after")); err != nil {
		t.Fatal(err)
	}
	want2 := append(slices.Clone(want), "after")
	waitFor(t, "the last broadcast", func() bool { return len(listeners[0].get()) >= len(want2) && len(listeners[2].get()) >= len(want2) })
	quiet()
	for i := range listeners {
		w := want2
		if i == 1 {
			w = want
		}
		if got := listeners[i].get(); !slices.Equal(got, w) {
			t.Errorf("subscriber %d got %v, want %v (every message, once, in order; none after Stop)", i, got, w)
		}
	}
	if got := otherL.get(); len(got) != 0 {
		t.Errorf("a subscriber of another subject got %v", got)
	}
}

func testPayloads(t *testing.T, open func(*testing.T) svc.Broker) {
	b := open(t)
	subj := subject(t)
	sizes := []int{0, 1, 64 << 10, 1<<20 + 64<<10} // up to a full request body inside its envelope
	payloads := map[int][]byte{}
	for _, n := range sizes {
		p := make([]byte, n)
		_, _ = rand.Read(p)
		payloads[n] = p
	}
	got := make(chan []byte, len(sizes))
	subscribe(t, b, subj, svc.SubscribeOptions{Prefetch: 4, AckWait: noDeadline}, func(ctx context.Context, d *svc.Delivery) {
		got <- d.Data
		_ = d.Ack(ctx)
	})
	bsubj := "svc.bt.payload." + subj[len("svc.tasks."):]
	bgot := make(chan []byte, len(sizes))
	bs, err := b.SubscribeBroadcast(ctxT(t), bsubj, func(ctx context.Context, _ string, data []byte) { bgot <- data })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bs.Stop() })
	for _, n := range sizes {
		publish(t, b, subj, payloads[n])
		if err := b.Broadcast(ctxT(t), bsubj, payloads[n]); err != nil {
			t.Fatalf("Broadcast of %d bytes: %v", n, err)
		}
	}
	for _, c := range []struct {
		how string
		ch  chan []byte
	}{{"work subject", got}, {"broadcast", bgot}} {
		seen := map[int]bool{}
		for range sizes {
			select {
			case p := <-c.ch:
				if want, ok := payloads[len(p)]; !ok || !bytes.Equal(p, want) {
					t.Errorf("%s: a %d-byte payload came back altered", c.how, len(p))
				}
				seen[len(p)] = true
			case <-time.After(patience):
				t.Fatalf("%s: only sizes %v arrived of %v", c.how, seen, sizes)
			}
		}
	}
}

func testClose(t *testing.T, open func(*testing.T) svc.Broker) {
	b := open(t)
	subj := subject(t)
	ctx := ctxT(t)
	if err := b.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	started := make(chan struct{})
	var cancelled atomic.Bool
	subscribe(t, b, subj, svc.SubscribeOptions{}, func(ctx context.Context, d *svc.Delivery) {
		close(started)
		<-ctx.Done()
		cancelled.Store(true)
	})
	bs, err := b.SubscribeBroadcast(ctx, subj+".b", func(context.Context, string, []byte) {})
	if err != nil {
		t.Fatal(err)
	}
	publish(t, b, subj, []byte("in flight at close"))
	<-started
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if !cancelled.Load() {
		t.Error("Close returned before the running handler was cancelled and returned")
	}
	if err := b.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := bs.Stop(); err != nil {
		t.Errorf("Stop after Close: %v", err)
	}
	for name, err := range map[string]error{
		"Publish":            b.Publish(ctx, subj, []byte("x")),
		"Broadcast":          b.Broadcast(ctx, subj, []byte("x")),
		"Ping":               b.Ping(ctx),
		"Subscribe":          second(b.Subscribe(ctx, subj, svc.SubscribeOptions{}, func(context.Context, *svc.Delivery) {})),
		"SubscribeBroadcast": second(b.SubscribeBroadcast(ctx, subj, func(context.Context, string, []byte) {})),
	} {
		if !errors.Is(err, svc.ErrBrokerClosed) {
			t.Errorf("%s after Close = %v, want ErrBrokerClosed", name, err)
		}
		// A caller (dispatch, a worker's reply) retries a transient
		// failure and gives up on a permanent one: a closed client stays
		// closed.
		if !svc.IsPermanentBrokerError(err) || svc.IsTransientBrokerError(err) {
			t.Errorf("%s after Close = %v, want a permanent svc.BrokerError", name, err)
		}
	}
	// The message the closed client held is not lost.
	var rec record
	subscribe(t, open(t), subj, svc.SubscribeOptions{}, func(ctx context.Context, d *svc.Delivery) {
		rec.add("", d)
		_ = d.Ack(ctx)
	})
	waitFor(t, "the closed client's message", func() bool { return rec.len() >= 1 })
}

func second[T any](_ T, err error) error { return err }

// testHandlerPanics checks that a handler's panic is recovered, as
// Subscribe promises: it takes neither the process nor the subscription
// down (the work delivery it abandoned comes back, the next broadcast
// arrives), and a broker that counts such panics (svc.PanicCounter)
// counts each.
func testHandlerPanics(t *testing.T, open func(*testing.T) svc.Broker) {
	b := open(t)
	subj := subject(t)
	ctx := ctxT(t)
	var rec record
	subscribe(t, b, subj, svc.SubscribeOptions{AckWait: time.Second}, func(ctx context.Context, d *svc.Delivery) {
		rec.add("", d)
		if d.Attempt == 1 {
			panic("handler bug")
		}
		_ = d.Ack(ctx)
	})
	bsubj := "svc.bt.panic." + subj[len("svc.tasks."):]
	got := make(chan string, 4)
	bs, err := b.SubscribeBroadcast(ctx, bsubj, func(_ context.Context, _ string, data []byte) {
		if string(data) == "first" {
			panic("broadcast handler bug")
		}
		got <- string(data)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bs.Stop() })
	publish(t, b, subj, []byte("panics once"))
	waitFor(t, "the delivery a panic abandoned, again", func() bool { return rec.len() >= 2 })
	if all := rec.all(); all[1].attempt != 2 || all[1].data != "panics once" {
		t.Errorf("redelivery after the panic = %+v", all[1])
	}
	for _, m := range []string{"first", "second"} {
		if err := b.Broadcast(ctx, bsubj, []byte(m)); err != nil {
			t.Fatalf("Broadcast: %v", err)
		}
	}
	select {
	case m := <-got:
		if m != "second" {
			t.Errorf("broadcast after the panic = %q", m)
		}
	case <-time.After(patience):
		t.Fatal("the broadcast after a handler's panic never arrived")
	}
	if pc, ok := b.(svc.PanicCounter); ok {
		waitFor(t, "both panics counted", func() bool { return pc.HandlerPanics() == 2 })
	}
}

// testErrorsTyped checks that what no retry can mend is a permanent
// svc.BrokerError, so callers give up at once instead of retrying until
// their deadline: a payload over svc.MaxPayloadBytes, a second settlement
// of a delivery. Neither changes anything: the subject still carries the
// next message.
func testErrorsTyped(t *testing.T, open func(*testing.T) svc.Broker) {
	b := open(t)
	subj := subject(t)
	ctx := ctxT(t)
	err := b.Publish(ctx, subj, make([]byte, svc.MaxPayloadBytes+1))
	if err == nil || !svc.IsPermanentBrokerError(err) {
		t.Errorf("Publish of %d bytes = %v, want a permanent svc.BrokerError", svc.MaxPayloadBytes+1, err)
	}
	var be *svc.BrokerError
	if errors.As(err, &be) && be.Broker == "" {
		t.Errorf("Publish of too large a message = %v: the error does not name the broker", err)
	}
	settled := make(chan error, 2)
	subscribe(t, b, subj, svc.SubscribeOptions{AckWait: noDeadline}, func(ctx context.Context, d *svc.Delivery) {
		if err := d.Ack(ctx); err != nil {
			settled <- err
			return
		}
		settled <- d.Ack(ctx)
	})
	publish(t, b, subj, []byte("after the refused one"))
	select {
	case err := <-settled:
		if !errors.Is(err, svc.ErrSettled) || !svc.IsPermanentBrokerError(err) {
			t.Errorf("second Ack = %v, want ErrSettled, a permanent svc.BrokerError", err)
		}
	case <-time.After(patience):
		t.Fatal("the message published after a refused one was not delivered")
	}
}

// testRetain checks svc.Retainer, for a broker that implements it: a record
// one client makes is seen by another until its ttl passes, any key text is
// carried, and a closed client refuses.
func testRetain(t *testing.T, open func(*testing.T) svc.Broker) {
	a, b := open(t), open(t)
	ra, ok := a.(svc.Retainer)
	if !ok {
		t.Skipf("%T is not a svc.Retainer: workers learn of cancels only by broadcast", a)
	}
	rb := b.(svc.Retainer)
	ctx := ctxT(t)
	var n [4]byte
	_, _ = rand.Read(n[:])
	long := fleetwire.CancelledRunKey("run/" + hex.EncodeToString(n[:]) + " with: spaces, ü and *")
	short := fleetwire.CancelledRunKey("short-" + hex.EncodeToString(n[:]))
	if ok, err := rb.Retained(ctx, long); err != nil || ok {
		t.Fatalf("Retained before Retain = %v, %v; want false, nil", ok, err)
	}
	if err := ra.Retain(ctx, long, time.Hour); err != nil {
		t.Fatalf("Retain: %v", err)
	}
	if err := ra.Retain(ctx, short, ackWait); err != nil {
		t.Fatalf("Retain: %v", err)
	}
	if ok, err := rb.Retained(ctx, long); err != nil || !ok {
		t.Fatalf("Retained on another client = %v, %v; want true, nil", ok, err)
	}
	waitFor(t, "a retained key to expire", func() bool {
		ok, err := rb.Retained(ctx, short)
		if err != nil {
			t.Fatalf("Retained: %v", err)
		}
		return !ok
	})
	if ok, err := rb.Retained(ctx, long); err != nil || !ok {
		t.Fatalf("Retained (1 h ttl) after another key expired = %v, %v; want true, nil", ok, err)
	}
	_ = a.Close()
	if _, err := ra.Retained(ctx, long); !errors.Is(err, svc.ErrBrokerClosed) {
		t.Fatalf("Retained after Close: %v; want ErrBrokerClosed", err)
	}
}

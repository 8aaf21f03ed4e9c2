package amqpbroker_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	neturl "net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/goleak"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/broker/amqpbroker"
	"github.com/svc-dev/svc/broker/brokertest"
	"github.com/svc-dev/svc/fleetwire"
	"github.com/svc-dev/svc/internal/servertest"
	"github.com/svc-dev/svc/internal/testutil"
)

// rabbit is the RabbitMQ node the tests share, each on subjects of its own
// (a node takes seconds of CPU to boot); TestMain stops it.
var rabbit servertest.RabbitMQNode

func TestMain(m *testing.M) {
	code := m.Run()
	rabbit.Stop()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// subject is a task subject named for what a test does, made unique: the
// node outlives a test (and -count runs each test again on it), and the
// queues of a subject outlive its subscribers.
func subject(name string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fleetwire.TaskSubject(name + "-" + hex.EncodeToString(b[:]))
}

func connect(t *testing.T, url string) *amqpbroker.Broker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := amqpbroker.Connect(ctx, url, amqpbroker.Options{})
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	return b
}

func TestContract(t *testing.T) {
	t.Parallel() // subjects of its own on the shared node
	url := rabbit.URL(t)
	brokertest.Run(t, func(t *testing.T) svc.Broker { return connect(t, url) })
}

func TestConnectErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, u := range []string{"http://x", "amqp://", "amqp://127.0.0.1:1/"} {
		if _, err := amqpbroker.Connect(ctx, u, amqpbroker.Options{}); err == nil {
			t.Errorf("Connect(%q) succeeded", u)
		}
	}
}

// proxy forwards TCP connections to target until cut, which closes every
// connection it carries (a network failure between client and server).
type proxy struct {
	l     net.Listener
	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func newProxy(t *testing.T, target string) *proxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{l: l}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			p.wg.Add(2)
			go func() { defer p.wg.Done(); _, _ = io.Copy(s, c); _ = s.Close() }()
			go func() { defer p.wg.Done(); _, _ = io.Copy(c, s); _ = c.Close() }()
		}
	}()
	t.Cleanup(func() { _ = l.Close(); p.cut(); p.wg.Wait() })
	return p
}

func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

// TestReconnect: after the connection is lost, the client dials again and
// its work and broadcast subscriptions receive what is sent afterwards; the
// task a handler held when the connection went is delivered again.
func TestReconnect(t *testing.T) {
	t.Parallel() // subjects of its own on the shared node
	url := rabbit.URL(t)
	u, _ := neturl.Parse(url)
	px := newProxy(t, u.Host)
	u.Host = px.l.Addr().String()
	b := connect(t, u.String())
	defer b.Close()
	pub := connect(t, url) // not through the proxy
	defer pub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	subj := subject("reconnect")
	var mu sync.Mutex
	var got []string
	var attempts []int
	held := make(chan struct{}, 1)
	cut := make(chan struct{})
	var cutOnce sync.Once
	release := func() { cutOnce.Do(func() { close(cut) }) }
	defer release() // before b.Close: a failing test must not leave the handler blocked
	lateAck := make(chan error, 1)
	_, err := b.Subscribe(ctx, subj, svc.SubscribeOptions{AckWait: 30 * time.Second}, func(ctx context.Context, d *svc.Delivery) {
		mu.Lock()
		got = append(got, string(d.Data))
		attempts = append(attempts, d.Attempt)
		mu.Unlock()
		if string(d.Data) == "held" && d.Attempt == 1 {
			held <- struct{}{}
			<-cut // the connection goes (and comes back) before it settles
			lateAck <- d.Ack(ctx)
			return
		}
		_ = d.Ack(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	var bmu sync.Mutex
	var bgot []string
	if _, err := b.SubscribeBroadcast(ctx, "svc.bt.reconnect", func(_ context.Context, _ string, data []byte) {
		bmu.Lock()
		bgot = append(bgot, string(data))
		bmu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish(ctx, subj, []byte("held")); err != nil {
		t.Fatal(err)
	}
	<-held
	old := b.Connection()
	px.cut()
	testutil.Eventually(t, "a new connection", func() bool { return b.Connection() != old })
	release()
	if err := <-lateAck; err == nil {
		t.Error("Ack of a delivery whose connection was lost succeeded; the server has requeued it")
	}
	if err := pub.Publish(ctx, subj, []byte("after")); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "both tasks after the reconnection", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(got, "after") && len(got) >= 3
	})
	mu.Lock()
	if !slices.Contains(attempts, 2) {
		t.Errorf("deliveries %v attempts %v: the held task should come back at attempt 2", got, attempts)
	}
	mu.Unlock()
	testutil.Eventually(t, "a broadcast after the reconnection", func() bool {
		_ = pub.Broadcast(ctx, "svc.bt.reconnect", []byte("hi"))
		bmu.Lock()
		defer bmu.Unlock()
		return len(bgot) > 0
	})
	testutil.Eventually(t, "publishing through the reconnected client", func() bool {
		return b.Publish(ctx, subj, []byte("mine")) == nil
	})
	testutil.Eventually(t, "its own message", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(got, "mine")
	})
}

// TestPoisonDeadLetteredByServer: a task nacked until MaxDeliver ends in
// its dead-letter queue through RabbitMQ's dead-letter exchange (it carries
// the server's x-death headers naming the work queue), as one DeadLetter
// record with the delivery count and reason, and OnDeadLetter is called
// once.
func TestPoisonDeadLetteredByServer(t *testing.T) {
	t.Parallel() // subjects of its own on the shared node
	url := rabbit.URL(t)
	b := connect(t, url)
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	subj := subject("poison")
	hook := make(chan svc.DeadLetter, 4)
	if _, err := b.Subscribe(ctx, subj, svc.SubscribeOptions{MaxDeliver: 2, OnDeadLetter: func(_ context.Context, dl svc.DeadLetter) { hook <- dl }},
		func(ctx context.Context, d *svc.Delivery) { _ = d.Nack(ctx, 0) }); err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(ctx, subj, []byte("poison")); err != nil {
		t.Fatal(err)
	}
	select {
	case dl := <-hook:
		if dl.Deliveries != 2 || string(dl.Data) != "poison" || dl.Subject != subj {
			t.Errorf("OnDeadLetter got %+v", dl)
		}
	case <-ctx.Done():
		t.Fatal("OnDeadLetter never called")
	}

	// Read the dead-letter queue with a plain AMQP client.
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	dlq := "svc.q." + fleetwire.DeadLetterSubject(subj)
	var m amqp.Delivery
	testutil.Eventually(t, "the dead letter in "+dlq, func() bool {
		var ok bool
		m, ok, err = ch.Get(dlq, false)
		return err == nil && ok
	})
	if q, r := m.Headers["x-first-death-queue"], m.Headers["x-first-death-reason"]; q != "svc.q."+subj || r != "rejected" {
		t.Errorf("dead letter's x-first-death-queue %v reason %v: want svc.q.%s, rejected (routed by the server)", q, r, subj)
	}
	var dl svc.DeadLetter
	if err := json.Unmarshal(m.Body, &dl); err != nil || dl.Deliveries != 2 || string(dl.Data) != "poison" || dl.Reason == "" {
		t.Errorf("dead letter body %s (%v): want the DeadLetter record of 2 deliveries", m.Body, err)
	}
	if _, ok, _ := ch.Get(dlq, false); ok {
		t.Error("two dead letters for one task")
	}
	if _, ok, _ := ch.Get("svc.q."+subj, false); ok {
		t.Error("the poisoned task is still in its work queue")
	}
	if len(hook) != 0 {
		t.Error("OnDeadLetter called twice")
	}
}

// TestServerDeadLetterBecomesRecord: a message RabbitMQ dead-letters on its
// own (here, rejected by a plain AMQP consumer) reaches the handlers of the
// dead-letter subject as a DeadLetter record.
func TestServerDeadLetterBecomesRecord(t *testing.T) {
	t.Parallel() // subjects of its own on the shared node
	url := rabbit.URL(t)
	b := connect(t, url)
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	subj := subject("foreign")
	got := make(chan *svc.Delivery, 2)
	if _, err := b.Subscribe(ctx, fleetwire.DeadLetterSubject(subj), svc.SubscribeOptions{}, func(ctx context.Context, d *svc.Delivery) {
		got <- d
		_ = d.Ack(ctx)
	}); err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(ctx, subj, []byte("task")); err != nil {
		t.Fatal(err)
	}
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	m, ok, err := ch.Get("svc.q."+subj, false)
	if err != nil || !ok {
		t.Fatalf("get the task: %v %v", ok, err)
	}
	if err := m.Reject(false); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-got:
		var dl svc.DeadLetter
		if err := json.Unmarshal(d.Data, &dl); err != nil || dl.Subject != subj || string(dl.Data) != "task" || !strings.Contains(dl.Reason, "rejected") {
			t.Errorf("dead letter %s (%v): want a record of %s with data task and reason rejected", d.Data, err, subj)
		}
		if d.Attempt != 1 {
			t.Errorf("first delivery of a dead letter has attempt %d", d.Attempt)
		}
	case <-ctx.Done():
		t.Fatal("no dead letter")
	}
}

// TestQueueWithOldArguments: a work queue an older build declared without
// the dead-letter arguments makes Publish and Subscribe fail with an error
// that says what to do, and the client keeps publishing to other subjects.
func TestQueueWithOldArguments(t *testing.T) {
	t.Parallel() // subjects of its own on the shared node
	url := rabbit.URL(t)
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	subj := subject("legacy")
	if _, err := ch.QueueDeclare("svc.q."+subj, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		t.Fatal(err)
	}
	b := connect(t, url)
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	perr := b.Publish(ctx, subj, []byte("x"))
	_, serr := b.Subscribe(ctx, subj, svc.SubscribeOptions{}, func(context.Context, *svc.Delivery) {})
	for name, err := range map[string]error{"Publish": perr, "Subscribe": serr} {
		if err == nil || !strings.Contains(err.Error(), "rabbitmqctl delete_queue svc.q."+subj) {
			t.Errorf("%s to a queue with old arguments = %v; want an error saying to delete it", name, err)
		}
	}
	if err := b.Publish(ctx, subject("fresh"), []byte("x")); err != nil {
		t.Errorf("Publish to another subject after the refusal: %v", err)
	}
}

// TestHandlerDeadLetters: a handler that refuses a message (a worker, for a
// tampered task) dead-letters it at once through the Acker's DeadLetter:
// the server routes its record, with the handler's reason, to the
// dead-letter queue, and OnDeadLetter (which would answer the task's
// untrusted reply subject) is not called.
func TestHandlerDeadLetters(t *testing.T) {
	t.Parallel() // subjects of its own on the shared node
	url := rabbit.URL(t)
	b := connect(t, url)
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	subj := subject("refused")
	hook := make(chan svc.DeadLetter, 4)
	errs := make(chan error, 4)
	if _, err := b.Subscribe(ctx, subj, svc.SubscribeOptions{OnDeadLetter: func(_ context.Context, dl svc.DeadLetter) { hook <- dl }},
		func(ctx context.Context, d *svc.Delivery) {
			dlr, ok := d.Acker.(interface {
				DeadLetter(context.Context, svc.DeadLetter) error
			})
			if !ok {
				errs <- errors.New("the delivery's Acker has no DeadLetter")
				return
			}
			errs <- dlr.DeadLetter(ctx, svc.DeadLetter{Reason: "rejected: bad signature"})
		}); err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(ctx, subj, []byte("forged")); err != nil {
		t.Fatal(err)
	}
	if err := <-errs; err != nil {
		t.Fatalf("DeadLetter: %v", err)
	}
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	var m amqp.Delivery
	testutil.Eventually(t, "the dead letter", func() bool {
		var ok bool
		m, ok, err = ch.Get("svc.q."+fleetwire.DeadLetterSubject(subj), false)
		return err == nil && ok
	})
	var dl svc.DeadLetter
	if err := json.Unmarshal(m.Body, &dl); err != nil || dl.Reason != "rejected: bad signature" || string(dl.Data) != "forged" ||
		dl.Subject != subj || dl.Deliveries != 1 || m.Headers["x-first-death-reason"] != "rejected" {
		t.Errorf("dead letter %s (%v), x-first-death-reason %v; want the handler's record, routed by the server",
			m.Body, err, m.Headers["x-first-death-reason"])
	}
	if len(hook) != 0 || len(errs) != 0 {
		t.Errorf("OnDeadLetter called %d times, handler ran %d more times; want neither", len(hook), len(errs))
	}
}

package amqpbroker_test

import (
	"context"
	"io"
	"net"
	neturl "net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/broker/amqpbroker"
	"github.com/svc-dev/svc/broker/brokertest"
	"github.com/svc-dev/svc/internal/servertest"
	"github.com/svc-dev/svc/internal/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

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
	url := servertest.RabbitMQ(t)
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
	url := servertest.RabbitMQ(t)
	u, _ := neturl.Parse(url)
	px := newProxy(t, u.Host)
	u.Host = px.l.Addr().String()
	b := connect(t, u.String())
	defer b.Close()
	pub := connect(t, url) // not through the proxy
	defer pub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	subj := svc.TaskSubject("reconnect")
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

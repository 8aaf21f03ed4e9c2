package natsbroker_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/broker/brokertest"
	"github.com/svc-dev/svc/broker/natsbroker"
	"github.com/svc-dev/svc/fleetwire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startServer runs an embedded nats-server on a free loopback port with its
// store in a temp dir, shut down when the test ends.
func startServer(t *testing.T) *natsbroker.Embedded {
	t.Helper()
	e, err := natsbroker.StartEmbedded(natsbroker.EmbeddedConfig{DataDir: t.TempDir(), Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatalf("StartEmbedded: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	})
	return e
}

func connect(t *testing.T, url string) *natsbroker.Broker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := natsbroker.Connect(ctx, url, natsbroker.Options{})
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	return b
}

func TestContract(t *testing.T) {
	e := startServer(t)
	brokertest.Run(t, func(t *testing.T) svc.Broker { return connect(t, e.ClientURL()) })
}

func TestEmbeddedKeepsTasksAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	e, err := natsbroker.StartEmbedded(natsbroker.EmbeddedConfig{DataDir: dir, Listen: "127.0.0.1:0", Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(e.ClientURL(), "nats://127.0.0.1:") || strings.HasSuffix(e.ClientURL(), ":0") {
		t.Errorf("ClientURL = %q", e.ClientURL())
	}
	b := connect(t, e.ClientURL())
	if err := b.Publish(ctx, fleetwire.TaskSubject("kept"), []byte("queued")); err != nil {
		t.Fatal(err)
	}
	_ = b.Close()
	if err := e.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.Shutdown(ctx); err != nil {
		t.Errorf("second Shutdown: %v", err)
	}

	e2, err := natsbroker.StartEmbedded(natsbroker.EmbeddedConfig{DataDir: dir, Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer e2.Shutdown(ctx)
	b2 := connect(t, e2.ClientURL())
	defer b2.Close()
	got := make(chan string, 1)
	sub, err := b2.Subscribe(ctx, fleetwire.TaskSubject("kept"), svc.SubscribeOptions{}, func(ctx context.Context, d *svc.Delivery) {
		got <- string(d.Data)
		_ = d.Ack(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Stop()
	select {
	case m := <-got:
		if m != "queued" {
			t.Errorf("got %q", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a task queued before the restart was lost")
	}
}

func TestEmbeddedErrors(t *testing.T) {
	if _, err := natsbroker.StartEmbedded(natsbroker.EmbeddedConfig{}); err == nil {
		t.Error("no data dir accepted")
	}
	if _, err := natsbroker.StartEmbedded(natsbroker.EmbeddedConfig{DataDir: t.TempDir(), Listen: "nonsense"}); err == nil {
		t.Error("bad listen address accepted")
	}
	e := startServer(t)
	addr := strings.TrimPrefix(e.ClientURL(), "nats://")
	if e2, err := natsbroker.StartEmbedded(natsbroker.EmbeddedConfig{DataDir: t.TempDir(), Listen: addr, ReadyTimeout: 2 * time.Second}); err == nil {
		_ = e2.Shutdown(context.Background())
		t.Error("a second server on a taken port started")
	}
}

func TestConnectErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := natsbroker.Connect(ctx, "nats://127.0.0.1:1", natsbroker.Options{}); err == nil {
		t.Error("Connect to a closed port succeeded")
	}
}

func TestBadSubjects(t *testing.T) {
	e := startServer(t)
	b := connect(t, e.ClientURL())
	defer b.Close()
	ctx := context.Background()
	for _, s := range []string{"svc.tasks", "svc..x", "svc.tasks.*", "svc.tasks.a b"} {
		if err := b.Publish(ctx, s, []byte("x")); err == nil {
			t.Errorf("Publish(%q) accepted", s)
		}
	}
	// Agent names may hold dots; groups with dots get valid, distinct durable names.
	for _, agent := range []string{"a.b", "a_b"} {
		s, err := b.Subscribe(ctx, fleetwire.TaskSubject(agent), svc.SubscribeOptions{}, func(context.Context, *svc.Delivery) {})
		if err != nil {
			t.Fatalf("Subscribe(%s): %v", agent, err)
		}
		_ = s.Stop()
	}
	s, err := b.Subscribe(ctx, fleetwire.TaskSubject("one"), svc.SubscribeOptions{Group: "g1"}, func(context.Context, *svc.Delivery) {})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	if _, err := b.Subscribe(ctx, fleetwire.TaskSubject("one"), svc.SubscribeOptions{Group: "g2"}, func(context.Context, *svc.Delivery) {}); err == nil {
		t.Error("a second group on a work subject was accepted")
	} else if errors.Is(err, svc.ErrBrokerClosed) {
		t.Error(err)
	}
}

// TestMemberSurvivesServerRestart: a member keeps consuming after its server
// restarts (same address, same store): the client reconnects and the durable
// consumer is still there.
func TestMemberSurvivesServerRestart(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	e, err := natsbroker.StartEmbedded(natsbroker.EmbeddedConfig{DataDir: dir, Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimPrefix(e.ClientURL(), "nats://")
	b := connect(t, e.ClientURL())
	defer b.Close()
	got := make(chan string, 4)
	sub, err := b.Subscribe(ctx, fleetwire.TaskSubject("restart"), svc.SubscribeOptions{}, func(ctx context.Context, d *svc.Delivery) {
		if err := d.Ack(ctx); err == nil {
			// Never blocks: the publishes that land while the member
			// rejoins are all delivered at once, and a handler stuck on
			// a full channel would hang sub.Stop.
			select {
			case got <- string(d.Data):
			default:
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Stop()
	if err := e.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	e2, err := natsbroker.StartEmbedded(natsbroker.EmbeddedConfig{DataDir: dir, Listen: addr})
	if err != nil {
		t.Fatalf("restart on %s: %v", addr, err)
	}
	defer e2.Shutdown(ctx)
	pub := connect(t, e2.ClientURL())
	defer pub.Close()
	if err := pub.Publish(ctx, fleetwire.TaskSubject("restart"), []byte("after restart")); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		if m != "after restart" {
			t.Errorf("got %q", m)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the member never consumed again after the server restarted")
	}
	if err := b.Ping(ctx); err != nil {
		t.Errorf("Ping after the restart: %v", err)
	}
}

// TestMemberRejoinsDeletedConsumer: a member whose consumer (or stream) was
// deleted on the server brings it back and goes on consuming.
func TestMemberRejoinsDeletedConsumer(t *testing.T) {
	e := startServer(t)
	ctx := context.Background()
	b := connect(t, e.ClientURL())
	defer b.Close()
	subj := fleetwire.TaskSubject("rejoin")
	got := make(chan string, 4)
	sub, err := b.Subscribe(ctx, subj, svc.SubscribeOptions{}, func(ctx context.Context, d *svc.Delivery) {
		if err := d.Ack(ctx); err == nil {
			// Never blocks: the publishes that land while the member
			// rejoins are all delivered at once, and a handler stuck on
			// a full channel would hang sub.Stop.
			select {
			case got <- string(d.Data):
			default:
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Stop()
	js, err := jetstream.New(b.Conn())
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(ctx, "SVC_TASKS"); err != nil {
		t.Fatal(err)
	}
	pub := connect(t, e.ClientURL())
	defer pub.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		// The first publishes may land before the member has rejoined, or
		// fail while the stream is gone; keep publishing until one arrives.
		_ = pub.Publish(ctx, subj, []byte("again"))
		select {
		case m := <-got:
			if m != "again" {
				t.Errorf("got %q", m)
			}
			return
		case <-time.After(500 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the member never consumed again after its stream was deleted")
		}
	}
}

// A subscription set up with a context without a deadline (a caller's
// Background) is bounded by the broker, not refused.
func TestSubscribeWithoutDeadline(t *testing.T) {
	e := startServer(t)
	b := connect(t, e.ClientURL())
	defer b.Close()
	sub, err := b.SubscribeBroadcast(context.Background(), "svc.test.nodeadline", func(context.Context, string, []byte) {})
	if err != nil {
		t.Fatalf("SubscribeBroadcast(Background): %v", err)
	}
	_ = sub.Stop()
	ws, err := b.Subscribe(context.Background(), "svc.tasks.nodeadline", svc.SubscribeOptions{}, func(ctx context.Context, d *svc.Delivery) { _ = d.Ack(ctx) })
	if err != nil {
		t.Fatalf("Subscribe(Background): %v", err)
	}
	_ = ws.Stop()
}

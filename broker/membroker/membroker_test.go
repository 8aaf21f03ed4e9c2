package membroker_test

import (
	"context"
	"testing"

	"go.uber.org/goleak"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/broker/brokertest"
	"github.com/svc-dev/svc/broker/membroker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestContract(t *testing.T) {
	hub := membroker.NewHub()
	brokertest.Run(t, func(t *testing.T) svc.Broker { return hub.Connect() })
}

func TestNamedHubs(t *testing.T) {
	ctx := context.Background()
	a, b := membroker.Open("shared"), membroker.Open("shared")
	c := membroker.Open("other")
	defer c.Close()
	got := make(chan string, 2)
	sub, err := b.Subscribe(ctx, "svc.tasks.x", svc.SubscribeOptions{}, func(ctx context.Context, d *svc.Delivery) {
		got <- string(d.Data)
		_ = d.Ack(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Publish(ctx, "svc.tasks.x", []byte("elsewhere")); err != nil {
		t.Fatal(err)
	}
	if err := a.Publish(ctx, "svc.tasks.x", []byte("here")); err != nil {
		t.Fatal(err)
	}
	if m := <-got; m != "here" {
		t.Errorf("got %q from the shared hub", m)
	}
	_ = sub.Stop()
	_ = a.Close()
	_ = b.Close()
	// The last client gone, the name starts afresh.
	d := membroker.Open("shared")
	defer d.Close()
	sub, err = d.Subscribe(ctx, "svc.tasks.x", svc.SubscribeOptions{Group: "new"}, func(ctx context.Context, d *svc.Delivery) {})
	if err != nil {
		t.Fatalf("a fresh hub refused a new group: %v", err)
	}
	_ = sub.Stop()
}

func TestSecondGroupRefused(t *testing.T) {
	b := membroker.New()
	defer b.Close()
	ctx := context.Background()
	s, err := b.Subscribe(ctx, "svc.tasks.y", svc.SubscribeOptions{Group: "one"}, func(context.Context, *svc.Delivery) {})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	if _, err := b.Subscribe(ctx, "svc.tasks.y", svc.SubscribeOptions{Group: "two"}, func(context.Context, *svc.Delivery) {}); err == nil {
		t.Error("a second group on one subject was accepted")
	}
}

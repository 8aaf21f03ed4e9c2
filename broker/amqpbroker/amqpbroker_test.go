package amqpbroker_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/broker/amqpbroker"
	"github.com/svc-dev/svc/broker/brokertest"
	"github.com/svc-dev/svc/internal/servertest"
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

package natslimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/svc-dev/svc/broker/natsbroker"
	"github.com/svc-dev/svc/ratelimit"
	"github.com/svc-dev/svc/ratelimit/natslimit"
	"github.com/svc-dev/svc/ratelimit/ratelimittest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	e, err := natsbroker.StartEmbedded(natsbroker.EmbeddedConfig{DataDir: t.TempDir(), Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(stop)
	ratelimittest.Run(t, ratelimittest.Store{
		Open: func(t *testing.T) ratelimit.Shared {
			nc, err := nats.Connect(e.ClientURL())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(nc.Close)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			s, err := natslimit.New(ctx, nc, "")
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		Kill: func(*testing.T) { stop() },
	})
}

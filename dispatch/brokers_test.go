package dispatch_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"go.uber.org/zap/zaptest"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/broker"
	"github.com/svc-dev/svc/dispatch"
	"github.com/svc-dev/svc/internal/servertest"
	"github.com/svc-dev/svc/internal/testutil"
)

// TestFleetOverBrokers runs a publisher and a worker, each with its own
// client as separate processes would have, over the Kafka broker (an
// in-process kfake cluster) and the RabbitMQ broker (a real
// rabbitmq-server; skipped with a message when it is not installed): a task
// runs on the worker and its result comes back, and cancelling a call
// reaches the worker through the cancel broadcast.
func TestFleetOverBrokers(t *testing.T) {
	for name, start := range map[string]func(t *testing.T) string{
		"kafka": func(t *testing.T) string {
			c, err := kfake.NewCluster(kfake.NumBrokers(1))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			return "kafka://" + c.ListenAddrs()[0]
		},
		"amqp": func(t *testing.T) string { return servertest.RabbitMQ(t) },
	} {
		t.Run(name, func(t *testing.T) {
			url := start(t)
			open := func() svc.Broker {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				b, err := broker.Open(ctx, url, broker.Options{Logger: zaptest.NewLogger(t)})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = b.Close() })
				return b
			}
			var em recorder
			// The brokers and the publisher log to the test: a cancel
			// that does not reach the worker says why (connection lost,
			// broadcast not sent).
			p, err := dispatch.New(context.Background(), dispatch.Config{Broker: open(), Emitter: &em, Logger: zaptest.NewLogger(t)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Close() })
			w := fleet(t, open(),
				svc.Agent{Name: "echo", Model: "test:echo"},
				svc.Agent{Name: "slow", Model: "test:echo", ModelSettings: map[string]any{"latency_ms": 60_000}})

			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res, err := p.Dispatch(ctx, dispatch.Request{Agent: "echo", TrustLevel: svc.TrustHigh, TaskID: "t1", TraceID: "tr",
				RunID: "tr", Input: json.RawMessage(`{"a":1}`)})
			if err != nil {
				t.Fatal(err)
			}
			if !res.Success || string(res.Output) != `{"a":1}` || res.TaskID != "t1" {
				t.Fatalf("result = %+v", res)
			}

			cctx, ccancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				_, err := p.Dispatch(cctx, dispatch.Request{Agent: "slow", TaskID: "t2", TraceID: "tr2", RunID: "run2", Input: json.RawMessage(`1`)})
				done <- err
			}()
			testutil.Eventually(t, "the slow task running on the worker", func() bool { return w.InFlight() == 1 })
			ccancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("dispatch after cancel: %v", err)
			}
			testutil.Eventually(t, "the worker to drop the cancelled task", func() bool { return w.InFlight() == 0 })
		})
	}
}

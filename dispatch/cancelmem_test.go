package dispatch_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/broker"
	"github.com/svc-dev/svc/broker/membroker"
	"github.com/svc-dev/svc/broker/natsbroker"
	"github.com/svc-dev/svc/dispatch"
	"github.com/svc-dev/svc/fleetwire"
	"github.com/svc-dev/svc/internal/servertest"
	"github.com/svc-dev/svc/internal/testutil"
	"github.com/svc-dev/svc/supervisor"
	"github.com/svc-dev/svc/worker"
)

// countingRunner counts the runs a worker asks its runtime for.
type countingRunner struct {
	worker.Runner
	runs atomic.Int64
}

func (c *countingRunner) Run(ctx context.Context, agent string, task svc.TaskSpec) (svc.AgentResult, error) {
	c.runs.Add(1)
	return c.Runner.Run(ctx, agent, task)
}

// TestCancelReachesWorkersThatStartLater cancels a run while no worker is
// connected, with one of its tasks still queued on the broker; a worker
// that starts afterwards, and so never heard the cancel broadcast, takes
// the task and must answer it as cancelled without running it. Each
// broker's clients are separate, as separate processes' would be.
func TestCancelReachesWorkersThatStartLater(t *testing.T) {
	for name, start := range map[string]func(t *testing.T) (open func() svc.Broker){
		"memory": func(t *testing.T) func() svc.Broker {
			hub := "cancel-later-" + strings.ReplaceAll(t.Name(), "/", "-")
			return func() svc.Broker {
				b := membroker.Open(hub)
				t.Cleanup(func() { _ = b.Close() })
				return b
			}
		},
		"redis": func(t *testing.T) func() svc.Broker { return opener(t, servertest.Redis(t)) },
		"nats": func(t *testing.T) func() svc.Broker {
			e, err := natsbroker.StartEmbedded(natsbroker.EmbeddedConfig{DataDir: t.TempDir(), Listen: "127.0.0.1:0"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_ = e.Shutdown(ctx)
			})
			return opener(t, e.ClientURL())
		},
	} {
		t.Run(name, func(t *testing.T) {
			open := start(t)
			// A bystander hears the cancel broadcast: the publisher
			// records the cancel before broadcasting it.
			heard := make(chan struct{}, 4)
			watch, err := open().SubscribeBroadcast(context.Background(), fleetwire.SubjectCancel, func(_ context.Context, _ string, data []byte) {
				if env, err := fleetwire.Decode(data); err == nil && env.TaskID == "" {
					heard <- struct{}{}
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = watch.Stop() })
			var em recorder
			p, err := dispatch.New(context.Background(), dispatch.Config{Broker: open(), Emitter: &em, Logger: zaptest.NewLogger(t)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Close() })

			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				_, err := p.Dispatch(ctx, dispatch.Request{Agent: "echo", TaskID: "t", TraceID: "run-1", RunID: "run-1",
					Input: json.RawMessage(`{"text":"hi"}`), Deadline: time.Now().Add(time.Minute)})
				done <- err
			}()
			testutil.Eventually(t, "the task is queued", func() bool { return em.count(svc.EventAgentDispatched) == 1 })
			p.Cancel("run-1", "") // what the runtime does when the run is cancelled
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("dispatch after cancel: %v", err)
			}
			select {
			case <-heard:
			case <-time.After(testutil.Limit):
				t.Fatal("the cancel was not broadcast")
			}

			rt, err := supervisor.New(supervisor.Config{})
			if err != nil {
				t.Fatal(err)
			}
			if err := rt.Register(svc.Agent{Name: "echo", Model: "test:echo"}); err != nil {
				t.Fatal(err)
			}
			runner := &countingRunner{Runner: rt}
			w, err := worker.New(context.Background(), worker.Config{Broker: open(), Runner: runner, Heartbeat: -1})
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_ = w.Shutdown(ctx)
				_ = rt.Shutdown(ctx)
			})
			// The worker answers the task (the publisher, whose caller
			// has its cancel, drops the answer) and counts it.
			testutil.Eventually(t, "the queued task is answered", func() bool { return p.Duplicates() == 1 && w.Skipped() == 1 })
			if n := runner.runs.Load(); n != 0 {
				t.Fatalf("the task of the cancelled run ran %d times", n)
			}
			// Settled: the worker drains without a task to give back.
			sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer scancel()
			if err := w.Shutdown(sctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func opener(t *testing.T, url string) func() svc.Broker {
	return func() svc.Broker {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		b, err := broker.Open(ctx, url, broker.Options{Logger: zaptest.NewLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		return b
	}
}

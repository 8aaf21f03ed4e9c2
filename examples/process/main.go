// Command process shows svc embedded as a whole process: app.New with the
// options `svc serve` takes, plus an agent registered from Go, then Start,
// a wait for a signal, and Shutdown, which stops everything in one order
// (HTTP, runs, watcher, runtime, emitters and event store, run store,
// metrics).
//
//	go run ./examples/process          # listens on 127.0.0.1:8421
//	curl -s -H 'Content-Type: application/json' -d '{"input":"hi"}' localhost:8421/agents/greeter/run     # registered in Go
//	curl -s -H 'Content-Type: application/json' -d '{"input":"hi"}' localhost:8421/agents/echo/run        # from examples/specs
package main

import (
	"context"
	"errors"
	"flag"
	"log"
	"os/signal"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/app"
	"github.com/svc-dev/svc/tools"
)

func main() {
	port := flag.Int("port", 8421, "port to listen on (0: any free port)")
	specs := flag.String("specs", "examples/specs", "directory of agent and group specs")
	dataDir := flag.String("data-dir", ".svc", "directory of the run and event stores")
	flag.Parse()
	logger, _ := zap.NewDevelopment()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	a, err := newApp(*specs, *dataDir, *port, logger)
	if err != nil {
		log.Fatal(err)
	}
	if err := run(ctx, a); err != nil {
		log.Fatal(err)
	}
}

// Greeting is the typed input of the greet tool.
type Greeting struct {
	Name string `json:"name" jsonschema:"who to greet"`
}

// newApp configures the process: the specs of a directory, an agent with a
// Go tool beside them, SQLite stores under dataDir, and /metrics.
func newApp(specs, dataDir string, port int, logger *zap.Logger) (*app.App, error) {
	greet := tools.MustFunc("greet", "Greets someone by name.", svc.AccessRead,
		func(_ context.Context, g Greeting) (string, error) { return "hello, " + g.Name, nil })
	return app.New(app.Options{
		SpecsDir: specs,
		Agents: []svc.Agent{{Name: "greeter", Model: "test:echo", Tools: []svc.Tool{greet}, TrustLevel: svc.TrustLow,
			ModelSettings: map[string]any{"call_tools": "all"}}},
		DataDir: dataDir,
		Port:    port,
		Metrics: true,
		Logger:  logger,
	})
}

// run starts the process and stops it when ctx ends (a signal) or the HTTP
// server fails, giving requests and runs in flight 15 s to finish.
func run(ctx context.Context, a *app.App) error {
	if err := a.Start(); err != nil {
		return err
	}
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-a.Err():
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	return errors.Join(serveErr, a.Shutdown(shutCtx))
}

// Command embed shows svc embedded in a host Go service: the host owns the
// HTTP server, loads the YAML specs and its own Go agents into one runtime,
// mounts the svc router under /svc behind its own auth middleware, and
// shuts the runtime down with the server.
//
//	go run ./examples/embed            # listens on 127.0.0.1:8080, loads examples/specs
//	go run .                           # the same from examples/embed: the specs beside it (or --specs DIR)
//	curl -s -H 'X-API-Key: demo' -H 'Content-Type: application/json' -d '{"input":"hi"}' localhost:8080/svc/agents/greeter/run
package main

import (
	"context"
	"errors"
	"flag"
	"log"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"github.com/go-chi/chi/v5"
	"go.uber.org/zap"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/app"
	"github.com/svc-dev/svc/http/server"
	"github.com/svc-dev/svc/supervisor"
	"github.com/svc-dev/svc/tools"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "listen address")
	specs := flag.String("specs", defaultSpecs(), "directory of agent and group specs")
	apiKey := flag.String("api-key", "demo", "the host's own API key (X-API-Key header)")
	flag.Parse()
	logger, _ := zap.NewDevelopment()
	if err := run(*addr, *specs, *apiKey, logger); err != nil {
		log.Fatal(err)
	}
}

// Greeting is the typed input of the greet tool; its JSON Schema is generated
// from this type.
type Greeting struct {
	Name string `json:"name" jsonschema:"who to greet"`
}

func run(addr, specs, apiKey string, logger *zap.Logger) error {
	rt, host, err := newHost(specs, apiKey, logger)
	if err != nil {
		return err
	}
	srv := &http.Server{Addr: addr, Handler: host, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	logger.Info("host listening", zap.String("addr", addr))
	select {
	case err := <-errc:
		_ = rt.Close()
		return err
	case <-ctx.Done():
	}
	// First let requests in flight finish, then release the runtime (its
	// actors, tool subprocesses, broker connections). Shutting the runtime
	// down after the server, not from RegisterOnShutdown, guarantees it
	// outlives every request that uses it and that main waits for it.
	shutCtx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	serr := srv.Shutdown(shutCtx)
	rerr := rt.Shutdown(shutCtx)
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return errors.Join(serr, rerr)
}

// defaultSpecs is examples/specs of the working directory when it has one
// (go run ./examples/embed from the repository root), else the specs beside
// this example's source (go run . from examples/embed, or from anywhere
// with the source in place), so the example starts wherever it is run from.
func defaultSpecs() string {
	const fromRoot = "examples/specs"
	if _, err := os.Stat(fromRoot); err == nil {
		return fromRoot
	}
	if _, file, _, ok := runtime.Caller(0); ok {
		beside := filepath.Join(filepath.Dir(file), "..", "specs")
		if _, err := os.Stat(beside); err == nil {
			return beside
		}
	}
	return fromRoot // the error then names it, and --specs is the way out
}

// newHost builds the runtime from the specs and a Go agent, and the host's
// router with the svc router mounted under /svc.
func newHost(specs, apiKey string, logger *zap.Logger) (*supervisor.Runtime, http.Handler, error) {
	greet := tools.MustFunc("greet", "Greets someone by name.", svc.AccessRead,
		func(_ context.Context, g Greeting) (string, error) { return "hello, " + g.Name, nil })
	greeter := svc.Agent{Name: "greeter", Model: "test:echo", Tools: []svc.Tool{greet}, TrustLevel: svc.TrustLow,
		ModelSettings: map[string]any{"call_tools": "all"}}
	// One call: the specs' agents and groups, the built-in tools,
	// spawn_agents, MCP servers, and the Go agents. Events are logged to
	// logger (supervisor.Config.NoEventLog turns that off).
	rt, err := app.NewRuntime(app.RuntimeConfig{
		SpecsDir: specs,
		Agents:   []svc.Agent{greeter},
		Runtime:  supervisor.Config{Logger: logger},
	})
	if err != nil {
		return nil, nil, err
	}
	agents, err := server.NewRouter(rt, server.WithLogger(logger))
	if err != nil {
		_ = rt.Close()
		return nil, nil, err
	}
	host := chi.NewRouter()
	host.Get("/", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("host app\n")) })
	// The host's own handler, reporting a domain error the svc way.
	host.Get("/teapot", server.Handle(func(w http.ResponseWriter, r *http.Request) error {
		return svc.Errorf(svc.KindRegistry, "no teapot here")
	}).ServeHTTP)
	host.Route("/svc", func(r chi.Router) {
		r.Use(requireKey(apiKey)) // auth is the host's concern
		r.Mount("/", agents)
	})
	return rt, host, nil
}

// requireKey is the host's auth middleware.
func requireKey(key string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-API-Key") != key {
				http.Error(w, "missing or wrong X-API-Key", http.StatusUnauthorized)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

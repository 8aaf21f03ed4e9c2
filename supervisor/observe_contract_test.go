package supervisor_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/emitters"
	"github.com/svc-dev/svc/emitters/sse"
	"github.com/svc-dev/svc/eventstore"
	"github.com/svc-dev/svc/eventstore/memevents"
	"github.com/svc-dev/svc/http/client"
	"github.com/svc-dev/svc/http/client/clienttest"
	"github.com/svc-dev/svc/http/openapi/openapitest"
	"github.com/svc-dev/svc/http/server"
	"github.com/svc-dev/svc/model"
	"github.com/svc-dev/svc/supervisor"
	"github.com/svc-dev/svc/tools"
)

// observed is a runtime whose events reach a live SSE emitter and, written
// synchronously so the rollups see them at once, an in-memory event store.
type observed struct {
	rt   svc.Backend
	mem  *memevents.Store
	live *sse.Emitter
}

func observedFixture(t *testing.T) observed {
	t.Helper()
	mem := memevents.New(eventstore.Retention{})
	t.Cleanup(func() { _ = mem.Close() })
	live, err := sse.New(nil, sse.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = live.Close() })
	store := svc.EmitterFunc(func(ev svc.RuntimeEvent) { _ = mem.Write(context.Background(), []svc.RuntimeEvent{ev}) })
	// test:echo is free by default; priced here so usage has costs to sum,
	// at prices that make each run's cost a fraction with no short binary
	// form.
	prices := model.NewPriceTable(map[string]model.Price{"test:echo": {InputPerMTok: 1234.567, OutputPerMTok: 3210.987}})
	rt, err := supervisor.New(supervisor.Config{Options: svc.Options{}, Emitter: emitters.Multi(store, live), Prices: &prices})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := rt.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	err = rt.Register(
		svc.Agent{Name: "echo", Model: "test:echo"},
		svc.Agent{Name: "fail", Model: "test:fail"},
		svc.Agent{Name: "clock", Model: "test:echo", Tools: []svc.Tool{tools.Builtins(tools.BuiltinOptions{})[tools.CurrentTime]}},
	)
	if err != nil {
		t.Fatal(err)
	}
	return observed{rt: rt, mem: mem, live: live}
}

func (o observed) handler(*testing.T) server.StandaloneConfig {
	return server.StandaloneConfig{Logger: zap.NewNop(), Events: o.mem,
		RouterOptions: []server.Option{server.WithSSEEmitter(o.live)}}
}

// TestObserverContract runs the observation contract suite (usage, stats,
// tools, live events) against the HTTP client in front of a standalone
// server, the in-process client over that server's handler, and the
// in-process client over the runtime itself.
func TestObserverContract(t *testing.T) {
	t.Run("HTTPClient", func(t *testing.T) {
		clienttest.RunObserve(t, func(t *testing.T) clienttest.ObserveFixture {
			o := observedFixture(t)
			h, err := server.NewStandalone(o.rt, o.handler(t))
			if err != nil {
				t.Fatal(err)
			}
			srv := serveHandler(t, h)
			c, err := client.New(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			return clienttest.ObserveFixture{Observer: c, Backend: c}
		})
	})
	t.Run("LocalOverHandler", func(t *testing.T) {
		clienttest.RunObserve(t, func(t *testing.T) clienttest.ObserveFixture {
			o := observedFixture(t)
			h, err := server.NewStandalone(o.rt, o.handler(t))
			if err != nil {
				t.Fatal(err)
			}
			l, err := client.NewLocal(client.OverHandler(h))
			if err != nil {
				t.Fatal(err)
			}
			return clienttest.ObserveFixture{Observer: l, Backend: l}
		})
	})
	t.Run("LocalOverRuntime", func(t *testing.T) {
		clienttest.RunObserve(t, func(t *testing.T) clienttest.ObserveFixture {
			o := observedFixture(t)
			l, err := client.NewLocal(client.OverBackend(o.rt), client.WithEventReader(o.mem), client.WithSubscriber(o.live))
			if err != nil {
				t.Fatal(err)
			}
			return clienttest.ObserveFixture{Observer: l, Backend: l}
		})
	})
}

func serveHandler(t *testing.T, h http.Handler) *httptest.Server {
	// Every JSON answer is checked against the OpenAPI document.
	checked, _ := openapitest.Wrap(t, h)
	srv := httptest.NewServer(checked)
	t.Cleanup(srv.Close)
	return srv
}

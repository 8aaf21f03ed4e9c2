package supervisor

import (
	"fmt"
	"strings"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/emitters"
	"github.com/svc-dev/svc/emitters/sse"
	"github.com/svc-dev/svc/supervisor/hostapi"
)

// The message API (package hostapi) is the runtime's actor PREFIX/api,
// which host actors send the requests of package actors/msg. The runtime
// starts it with the calls it serves and stops it in Shutdown, after the
// calls it started and before the run shards.

// DefaultPrefix starts the names of a runtime's actors when Config.Prefix
// is empty.
const DefaultPrefix = hostapi.DefaultPrefix

// initAPI checks the prefix and picks the source of the message API's
// event subscriptions: cfg.Events, or an SSE emitter the runtime adds to
// its chain when it runs in a host's actor system.
func (rt *Runtime) initAPI(cfg *Config) error {
	rt.prefix, rt.apiEvents = cfg.Prefix, cfg.Events
	if rt.prefix == "" {
		rt.prefix = DefaultPrefix
	}
	if strings.HasPrefix(rt.prefix, "/") || strings.HasSuffix(rt.prefix, "/") {
		return svc.Errorf(svc.KindSpecValidation, "supervisor: Prefix %q: must not start or end with /", cfg.Prefix)
	}
	if rt.apiEvents == nil && cfg.System != nil {
		e, err := sse.New(rt.system, sse.Config{Prefix: rt.prefix})
		if err != nil {
			return fmt.Errorf("supervisor: event subscriptions: %w", err)
		}
		rt.ownEvents, rt.apiEvents = e, e
		if _, nop := rt.emitter.(svc.NopEmitter); nop {
			rt.emitter = e
		} else {
			rt.emitter = emitters.Multi(rt.emitter, e)
		}
	}
	return nil
}

// startAPI spawns the message API's actor.
func (rt *Runtime) startAPI() error {
	api, err := hostapi.Start(hostapi.Config{System: rt.system, Prefix: rt.prefix, Dispatcher: rt.env.Dispatcher, Events: rt.apiEvents,
		Calls: hostapi.Calls{
			RunAsync: rt.runAsync, Gather: rt.Gather, RunGroup: rt.RunGroup, Submit: rt.Submit, CancelRun: rt.CancelRun,
			RunEvents: rt.RunEvents, Running: rt.running, Go: rt.goHeld,
		}})
	if err != nil {
		return fmt.Errorf("supervisor: %w", err)
	}
	rt.api = api
	return nil
}

// stopAPI stops the actor and waits for its subscriptions to end.
func (rt *Runtime) stopAPI() {
	if rt.api != nil {
		rt.api.Stop()
	}
}

// closeEvents closes the SSE emitter the runtime added, once nothing
// emits.
func (rt *Runtime) closeEvents() {
	if rt.ownEvents != nil {
		_ = rt.ownEvents.Close()
	}
}

// PID is the runtime's actor in its actor system: the address of the
// message API (package actors/msg). Send it requests with ctx.Request or
// RequestFuture; the replies go to the sender.
func (rt *Runtime) PID() *actor.PID { return rt.api.PID() }

// System is the actor system the runtime's actors live in.
func (rt *Runtime) System() *actor.ActorSystem { return rt.system }

// settled is the end of a submitted run's execute: the run is no longer
// running, and its actor, if any, stops.
func (rt *Runtime) settled(id string) {
	rt.submitted.Delete(id)
	rt.api.Ended(id)
	rt.callbackEnded(id)
}

// running reports whether a submitted run's execute has not ended.
func (rt *Runtime) running(id string) bool {
	_, ok := rt.submitted.Load(id)
	return ok
}

// goHeld runs f on a pooled goroutine that Shutdown waits for like for a
// call, though it is not a call of its own (InFlight counts the call it
// makes), or refuses once Shutdown began.
func (rt *Runtime) goHeld(f func()) error {
	rt.mu.RLock()
	if rt.closed {
		rt.mu.RUnlock()
		return svc.Errorf(svc.KindShuttingDown, "runtime is shutting down")
	}
	rt.inflight.Add(1)
	rt.mu.RUnlock()
	rt.pool.Go(func() {
		defer rt.inflight.Done()
		f()
	})
	return nil
}

package supervisor

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/actors/msg"
	"github.com/svc-dev/svc/emitters"
	"github.com/svc-dev/svc/emitters/sse"
)

// The message API: one actor, PREFIX/api, takes the requests of package
// actors/msg from a host's actors. It never waits in Receive: each call
// runs on a goroutine of the runtime's pool (held like a call, so
// Shutdown waits for it), which sends the reply to the sender and then
// forgets the call. The actor keeps, per sender, the calls it started,
// and watches the sender: when it stops, the calls it left that are not
// Detached are cancelled. The blocking parts of Submit and Cancel (the
// run store) run on goroutines the same way.
//
// A future (RequestFuture) cannot be watched (a watch completes it), so
// a run asked for by a future is not tied to anything.

// DefaultPrefix starts the names of a runtime's actors when Config.Prefix
// is empty.
const DefaultPrefix = "svc"

// hostAPI is the runtime's part of the message API.
type hostAPI struct {
	rt     *Runtime
	prefix string
	pid    *actor.PID
	// events feeds the runtime event subscriptions (nil: refused);
	// ownEvents is the SSE emitter the runtime added for them, if any.
	events    svc.EventSubscriber
	ownEvents *sse.Emitter
	// subs counts the subscription goroutines; stopping tells them the
	// actor is gone.
	subs     sync.WaitGroup
	stopping atomic.Bool
	// ended holds, by run id, what to do when a submitted run ends
	// (settled): stop its actor.
	ended sync.Map
}

func (h *hostAPI) init(rt *Runtime, cfg *Config) error {
	h.rt, h.prefix, h.events = rt, cfg.Prefix, cfg.Events
	if h.prefix == "" {
		h.prefix = DefaultPrefix
	}
	if strings.HasPrefix(h.prefix, "/") || strings.HasSuffix(h.prefix, "/") {
		return svc.Errorf(svc.KindSpecValidation, "supervisor: Prefix %q: must not start or end with /", cfg.Prefix)
	}
	if h.events == nil && cfg.System != nil {
		e, err := sse.New(rt.system, sse.Config{Prefix: h.prefix})
		if err != nil {
			return fmt.Errorf("supervisor: event subscriptions: %w", err)
		}
		h.ownEvents, h.events = e, e
		if _, nop := rt.emitter.(svc.NopEmitter); nop {
			rt.emitter = e
		} else {
			rt.emitter = emitters.Multi(rt.emitter, e)
		}
	}
	return nil
}

func (h *hostAPI) start() error {
	props := actor.PropsFromProducer(func() actor.Actor {
		return &gateway{h: h, owners: map[pidKey]*owner{}, subs: map[string]*hostSub{}, handles: map[string]*actor.PID{}, byRun: map[string][]runRef{}}
	}, actor.WithDispatcher(h.rt.env.Dispatcher)) // pooled goroutines, as the shards
	pid, err := h.rt.system.Root.SpawnNamed(props, h.prefix+"/api")
	if err != nil {
		return fmt.Errorf("supervisor: spawn %s/api: %w", h.prefix, err)
	}
	h.pid = pid
	return nil
}

// stop stops the actor (and the submitted runs' actors, its children),
// and waits for the subscriptions to end.
func (h *hostAPI) stop() {
	if h.pid == nil {
		return
	}
	h.stopping.Store(true)
	_ = h.rt.system.Root.StopFuture(h.pid).Wait()
	h.subs.Wait()
}

// close closes the SSE emitter the runtime added, once nothing emits.
func (h *hostAPI) close() {
	if h.ownEvents != nil {
		_ = h.ownEvents.Close()
	}
}

// PID is the runtime's actor in its actor system: the address of the
// message API (package actors/msg). Send it requests with ctx.Request or
// RequestFuture; the replies go to the sender.
func (rt *Runtime) PID() *actor.PID { return rt.host.pid }

// System is the actor system the runtime's actors live in.
func (rt *Runtime) System() *actor.ActorSystem { return rt.system }

// settled is the end of a submitted run's execute: the run is no longer
// running, and its actor, if any, stops.
func (rt *Runtime) settled(id string) {
	rt.submitted.Delete(id)
	if f, ok := rt.host.ended.LoadAndDelete(id); ok {
		f.(func())()
	}
}

// hold admits a goroutine of the message API: Shutdown waits for it
// like for a call, but it is not a call of its own (InFlight counts the
// call it makes).
func (rt *Runtime) hold() error {
	rt.mu.RLock()
	defer rt.mu.RUnlock()
	if rt.closed {
		return svc.Errorf(svc.KindShuttingDown, "runtime is shutting down")
	}
	rt.inflight.Add(1)
	return nil
}

// pidKey identifies a PID (a PID's other fields are caches).
type pidKey struct{ address, id string }

func keyOf(p *actor.PID) pidKey { return pidKey{p.Address, p.Id} }

// owner is a sender with runs or subscriptions under way.
type owner struct {
	pid  *actor.PID
	runs map[uint64]*hostRun
	subs int
}

// hostRun is a call a sender started.
type hostRun struct {
	ref      string
	detached bool
	runID    string // a submitted run's
	cancel   func()
}

// hostSub is a subscription.
type hostSub struct {
	target pidKey
	cancel context.CancelFunc
}

// Messages the actor sends itself.
type (
	release   struct{ owner pidKey }
	submitted struct {
		req    *msg.Submit
		sender *actor.PID
		runID  string
	}
	runEnded struct{ runID string }
	subDone  struct{ id string }
)

// gateway is the message API's actor. Its owners are shared with the
// goroutines of its calls, which forget a call when it ends without a
// message to the actor (a message per call was a tenth of the message
// API's cost); an owner is created and dropped (Watch, Unwatch) only by
// the actor.
type gateway struct {
	h       *hostAPI
	mu      sync.Mutex // guards owners and next
	owners  map[pidKey]*owner
	subs    map[string]*hostSub
	handles map[string]*actor.PID // submitted run id → its actor
	byRun   map[string][]runRef   // submitted run id → its senders' records
	next    uint64                // call records, under mu
	subN    uint64                // subscriptions
}

// runRef names a run in its owner's record.
type runRef struct {
	owner pidKey
	id    uint64
}

func (g *gateway) Receive(c actor.Context) {
	rt := g.h.rt
	switch m := c.Message().(type) {
	case *msg.RunAgent:
		g.call(c, m.Ref, m.Detached, "", func(ctx context.Context) any {
			res, err := rt.Run(ctx, m.Agent, m.Task)
			if err != nil {
				return msg.NewError(m.Ref, err)
			}
			return &msg.AgentResult{Ref: m.Ref, Result: res}
		})
	case *msg.Gather:
		g.call(c, m.Ref, m.Detached, "", func(ctx context.Context) any {
			res, err := rt.Gather(ctx, m.Agent, m.Tasks, m.MaxConcurrency)
			if err != nil {
				return msg.NewError(m.Ref, err)
			}
			return &msg.GatherResult{Ref: m.Ref, Results: res}
		})
	case *msg.RunGroup:
		g.call(c, m.Ref, m.Detached, "", func(ctx context.Context) any {
			res, err := rt.RunGroup(ctx, m.Group, m.Task)
			if err != nil {
				return msg.NewError(m.Ref, err)
			}
			return &msg.GroupResult{Ref: m.Ref, Result: res}
		})
	case *msg.Submit:
		g.submit(c, m)
	case *submitted:
		g.submitted(c, m)
	case *runEnded:
		if pid, ok := g.handles[m.runID]; ok {
			delete(g.handles, m.runID)
			c.Stop(pid)
		}
		for _, r := range g.byRun[m.runID] {
			g.forget(c, r.owner, func(o *owner) { delete(o.runs, r.id) })
		}
		delete(g.byRun, m.runID)
	case *msg.Cancel:
		g.cancel(c, m)
	case *release:
		g.mu.Lock()
		o, ok := g.owners[m.owner]
		ok = ok && o.idle()
		if ok {
			delete(g.owners, m.owner)
		}
		g.mu.Unlock()
		if ok {
			c.Unwatch(o.pid)
		}
	case *msg.Subscribe:
		g.subscribe(c, m)
	case *msg.Unsubscribe:
		s, ok := g.subs[m.ID]
		if !ok {
			respond(c, msg.NewError(m.Ref, svc.Errorf(svc.KindRegistry, "no subscription %q", m.ID)))
			return
		}
		s.cancel()
		respond(c, &msg.Unsubscribed{Ref: m.Ref, ID: m.ID})
	case *subDone:
		if s, ok := g.subs[m.id]; ok {
			delete(g.subs, m.id)
			g.forget(c, s.target, func(o *owner) { o.subs-- })
		}
	case *actor.Terminated:
		g.ownerStopped(m.Who)
	case *actor.Stopping:
		for _, s := range g.subs {
			s.cancel()
		}
		g.mu.Lock()
		var cancels []func()
		for _, o := range g.owners {
			for _, r := range o.runs {
				cancels = append(cancels, r.cancel)
			}
		}
		g.mu.Unlock()
		for _, f := range cancels {
			f()
		}
	}
}

func respond(c actor.Context, reply any) {
	if c.Sender() != nil {
		c.Respond(reply)
	}
}

// isFuture: a future's PID cannot be watched.
func isFuture(p *actor.PID) bool { return strings.HasPrefix(p.Id, "future") }

// track records a call of sender and watches sender; not tracked for a
// sender that cannot be watched.
func (g *gateway) track(c actor.Context, sender *actor.PID, r *hostRun) (pidKey, uint64, bool) {
	if sender == nil || isFuture(sender) {
		return pidKey{}, 0, false
	}
	k := keyOf(sender)
	g.mu.Lock()
	o, known := g.owners[k]
	if !known {
		o = &owner{pid: sender, runs: map[uint64]*hostRun{}}
		g.owners[k] = o
	}
	g.next++
	id := g.next
	o.runs[id] = r
	g.mu.Unlock()
	if !known {
		c.Watch(sender)
	}
	return k, id, true
}

// addSub counts a subscription of target, watching it.
func (g *gateway) addSub(c actor.Context, target *actor.PID) pidKey {
	k := keyOf(target)
	g.mu.Lock()
	o, known := g.owners[k]
	if !known {
		o = &owner{pid: target, runs: map[uint64]*hostRun{}}
		g.owners[k] = o
	}
	o.subs++
	g.mu.Unlock()
	if !known {
		c.Watch(target)
	}
	return k
}

func (o *owner) idle() bool { return len(o.runs) == 0 && o.subs == 0 }

// forget applies f to an owner's record and drops an owner left with
// nothing under way; only the actor calls it.
func (g *gateway) forget(c actor.Context, k pidKey, f func(*owner)) {
	g.mu.Lock()
	o, ok := g.owners[k]
	if ok {
		f(o)
		if ok = o.idle(); ok {
			delete(g.owners, k)
		}
	}
	g.mu.Unlock()
	if ok {
		c.Unwatch(o.pid)
	}
}

// done forgets a call that has ended, from its goroutine; the actor is
// told only when that leaves the owner with nothing under way.
func (g *gateway) done(self *actor.PID, root *actor.RootContext, k pidKey, id uint64) {
	g.mu.Lock()
	o, ok := g.owners[k]
	idle := false
	if ok {
		delete(o.runs, id)
		idle = o.idle()
	}
	g.mu.Unlock()
	if idle {
		root.Send(self, &release{owner: k})
	}
}

// ownerStopped cancels what a stopped sender left running.
func (g *gateway) ownerStopped(who *actor.PID) {
	k := keyOf(who)
	g.mu.Lock()
	o, ok := g.owners[k]
	if ok {
		delete(g.owners, k)
	}
	var cancels []func()
	if ok {
		for _, r := range o.runs {
			if !r.detached {
				cancels = append(cancels, r.cancel)
			}
		}
	}
	g.mu.Unlock()
	for _, f := range cancels {
		f()
	}
	for _, s := range g.subs {
		if s.target == k {
			s.cancel()
		}
	}
}

// call runs f on a pooled goroutine the runtime owns and sends its reply
// to the sender.
func (g *gateway) call(c actor.Context, ref string, detached bool, runID string, f func(ctx context.Context) any) {
	rt := g.h.rt
	if err := rt.hold(); err != nil {
		respond(c, msg.NewError(ref, err))
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	sender, self, root := c.Sender(), c.Self(), c.ActorSystem().Root
	k, id, tracked := g.track(c, sender, &hostRun{ref: ref, detached: detached, runID: runID, cancel: cancel})
	rt.pool.Go(func() {
		defer rt.inflight.Done()
		reply := f(ctx)
		cancel()
		if sender != nil {
			root.Send(sender, reply)
		}
		if tracked {
			g.done(self, root, k, id)
		}
	})
}

// async runs f on a pooled goroutine the runtime owns, replying to the sender
// with what it returns (nothing when nil).
func (g *gateway) async(c actor.Context, ref string, f func() any) {
	rt := g.h.rt
	if err := rt.hold(); err != nil {
		respond(c, msg.NewError(ref, err))
		return
	}
	sender, root := c.Sender(), c.ActorSystem().Root
	rt.pool.Go(func() {
		defer rt.inflight.Done()
		if reply := f(); reply != nil && sender != nil {
			root.Send(sender, reply)
		}
	})
}

func (g *gateway) submit(c actor.Context, m *msg.Submit) {
	rt, sender, self, root := g.h.rt, c.Sender(), c.Self(), c.ActorSystem().Root
	g.async(c, m.Ref, func() any {
		id, err := rt.Submit(context.Background(), m.Request)
		if err != nil {
			return msg.NewError(m.Ref, err)
		}
		// The actor answers, once the run's actor is spawned.
		root.Send(self, &submitted{req: m, sender: sender, runID: id})
		return nil
	})
}

func (g *gateway) submitted(c actor.Context, m *submitted) {
	rt, id := g.h.rt, m.runID
	pid, ok := g.handles[id]
	if !ok {
		var err error
		pid, err = c.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return &runHandle{gateway: c.Self(), runID: id} }), "run-"+id)
		if err != nil {
			g.reply(c, m.sender, msg.NewError(m.req.Ref, fmt.Errorf("supervisor: spawn the actor of run %s: %w", id, err)))
			return
		}
		g.handles[id] = pid
		self, root := c.Self(), c.ActorSystem().Root
		g.h.ended.Store(id, func() { root.Send(self, &runEnded{runID: id}) })
		// settled may have run before the store: then it found nothing.
		if _, running := rt.submitted.Load(id); !running {
			if f, ok := g.h.ended.LoadAndDelete(id); ok {
				f.(func())()
			}
		}
	}
	if m.sender != nil && !isFuture(m.sender) {
		// The run is the sender's: it is cancelled when the sender stops,
		// and forgotten when it ends (runEnded).
		k, seq, _ := g.track(c, m.sender, &hostRun{ref: m.req.Ref, detached: m.req.Detached, runID: id,
			cancel: func() { g.h.cancelRun(id) }})
		g.byRun[id] = append(g.byRun[id], runRef{owner: k, id: seq})
	}
	g.reply(c, m.sender, &msg.Submitted{Ref: m.req.Ref, RunID: id, Run: pid})
}

// cancelRun cancels a submitted run, from a goroutine the runtime owns.
func (h *hostAPI) cancelRun(id string) {
	rt := h.rt
	if rt.hold() != nil {
		return // shutting down: Shutdown cancels it
	}
	rt.pool.Go(func() {
		defer rt.inflight.Done()
		_ = rt.CancelRun(context.Background(), id)
	})
}

func (g *gateway) reply(c actor.Context, to *actor.PID, reply any) {
	if to != nil {
		c.Send(to, reply)
	}
}

func (g *gateway) cancel(c actor.Context, m *msg.Cancel) {
	rt := g.h.rt
	if m.RunID != "" {
		g.async(c, m.Ref, func() any {
			if err := rt.CancelRun(context.Background(), m.RunID); err != nil {
				return msg.NewError(m.Ref, err)
			}
			return &msg.Cancelled{Ref: m.Ref, RunID: m.RunID}
		})
		return
	}
	var cancels []func()
	if s := c.Sender(); s != nil {
		g.mu.Lock()
		if o, ok := g.owners[keyOf(s)]; ok {
			for _, r := range o.runs {
				if r.ref == m.Ref {
					cancels = append(cancels, r.cancel)
				}
			}
		}
		g.mu.Unlock()
	}
	found := len(cancels) > 0
	for _, f := range cancels {
		f()
	}
	if !found {
		respond(c, msg.NewError(m.Ref, svc.Errorf(svc.KindRegistry, "no run with ref %q started by this sender is running", m.Ref)))
		return
	}
	respond(c, &msg.Cancelled{Ref: m.Ref})
}

func (g *gateway) subscribe(c actor.Context, m *msg.Subscribe) {
	h := g.h
	target := m.Target
	if target == nil {
		target = c.Sender()
	}
	if target == nil || isFuture(target) {
		respond(c, msg.NewError(m.Ref, svc.Errorf(svc.KindSpecValidation, "subscribe: the target must be an actor: give Target, or send with ctx.Request from an actor")))
		return
	}
	if m.RunID == "" && h.events == nil {
		respond(c, msg.NewError(m.Ref, svc.Errorf(svc.KindSpecValidation, "subscribe: this runtime has no live event source (supervisor.Config.Events)")))
		return
	}
	g.subN++
	id := "sub-" + strconv.FormatUint(g.subN, 10)
	ctx, cancel := context.WithCancel(context.Background())
	k := g.addSub(c, target)
	g.subs[id] = &hostSub{target: k, cancel: cancel}
	sender, self, root := c.Sender(), c.Self(), c.ActorSystem().Root
	h.subs.Add(1)
	go func() {
		defer h.subs.Done()
		defer cancel()
		dropped, err := h.forward(ctx, m, id, target, func() {
			if sender != nil {
				root.Send(sender, &msg.Subscribed{Ref: m.Ref, ID: id})
			}
		})
		if err != nil {
			if sender != nil {
				root.Send(sender, msg.NewError(m.Ref, err))
			}
		} else {
			root.Send(target, &msg.SubscriptionEnded{ID: id, Dropped: dropped})
		}
		if !h.stopping.Load() {
			root.Send(self, &subDone{id: id})
		}
	}()
}

// forward sends a subscription's events to target until it ends, calling
// started once it is live; it returns the events dropped.
func (h *hostAPI) forward(ctx context.Context, m *msg.Subscribe, id string, target *actor.PID, started func()) (uint64, error) {
	root := h.rt.system.Root
	if m.RunID != "" {
		events, err := h.rt.RunEvents(ctx, m.RunID, 0)
		if err != nil {
			return 0, err
		}
		started()
		for ev := range events {
			root.Send(target, &msg.RunEvent{Subscription: id, Event: ev})
		}
		return 0, nil
	}
	sub, err := h.events.Subscribe(ctx, m.Filter)
	if err != nil {
		return 0, err
	}
	defer sub.Close()
	started()
	// Ended (Unsubscribe, the target stopped, Shutdown), the subscription
	// closes Events: what it had queued still goes out, then
	// SubscriptionEnded.
	for ev := range sub.Events() {
		root.Send(target, &msg.RuntimeEvent{Subscription: id, Event: ev, Dropped: sub.Dropped()})
	}
	_ = sub.Close()
	return sub.Dropped(), nil
}

// runHandle is a submitted run's actor: it stops when the run has ended
// (Watch it), and a Cancel sent to it cancels the run.
type runHandle struct {
	gateway *actor.PID
	runID   string
}

func (a *runHandle) Receive(c actor.Context) {
	if m, ok := c.Message().(*msg.Cancel); ok {
		c.RequestWithCustomSender(a.gateway, &msg.Cancel{Ref: m.Ref, RunID: a.runID}, c.Sender())
	}
}

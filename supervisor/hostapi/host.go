// Package hostapi is the runtime's message API: one actor, PREFIX/api,
// that takes the requests of package actors/msg from a host's protoactor
// actors and answers them with the runtime's calls. It owns what ties a
// call to its sender (the sender's end, or its future's, cancels it), the
// actors of submitted runs, and the event subscriptions' flow control.
// The runtime (package supervisor) starts it with the calls it offers
// (Calls) and stops it in Shutdown.
package hostapi

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
)

// The message API: one actor, PREFIX/api, takes the requests of package
// actors/msg from a host's actors. It never waits in Receive. A RunAgent
// parks no goroutine: the run actor calls back when the run ends, and
// the callback sends the reply (runAsync). A Gather or RunGroup runs on
// a goroutine of the runtime's pool (held like a call, so Shutdown waits
// for it), which sends the reply. The actor keeps, per sender, the calls
// it started, grouped by Ref (callSet), and watches the sender: when it
// stops, the calls it left that are not Detached are cancelled. The
// blocking parts of Submit and Cancel (the run store) run on pooled
// goroutines too.
//
// A future (RequestFuture) cannot be watched (a watch completes it): a
// call a future asks for is cancelled when the future ends (its timeout,
// mostly; futureWatch), unless Detached. It cannot be cancelled by Ref
// (the next request comes from another future).

// DefaultPrefix starts the names of a runtime's actors when no prefix is
// given.
const DefaultPrefix = "svc"

// Calls are what the message API asks of its runtime.
type Calls struct {
	// RunAsync is Run without a goroutine waiting for the reply: it
	// calls done with what Run would have returned, at once for a call
	// refused before it starts, otherwise when the run ends; done must
	// not block.
	RunAsync  func(ctx context.Context, agent string, task svc.TaskSpec, done func(svc.AgentResult, error))
	Gather    func(ctx context.Context, agent string, tasks []svc.TaskSpec, maxConcurrency int) ([]svc.AgentResult, error)
	RunGroup  func(ctx context.Context, group string, task svc.TaskSpec) (svc.RunResult, error)
	Submit    func(ctx context.Context, req svc.SubmitRequest) (string, error)
	CancelRun func(ctx context.Context, runID string) error
	RunEvents func(ctx context.Context, runID string, after int64) (<-chan svc.RunEvent, error)
	// Running reports whether a submitted run is still executing.
	Running func(runID string) bool
	// Go runs f on a goroutine the runtime owns and Shutdown waits for,
	// or refuses (with ShuttingDownError) once Shutdown began.
	Go func(f func()) error
}

// Config configures an API.
type Config struct {
	System *actor.ActorSystem
	// Prefix starts the actor's name, PREFIX/api.
	Prefix string
	// Dispatcher runs the actor's mailbox.
	Dispatcher actor.Dispatcher
	// Events feeds the runtime event subscriptions (nil: refused).
	Events svc.EventSubscriber
	Calls  Calls
}

// API is the message API of one runtime.
type API struct {
	calls  Calls
	system *actor.ActorSystem
	pid    *actor.PID
	events svc.EventSubscriber
	// subs counts the subscription goroutines; stopping tells them the
	// actor is gone.
	subs     sync.WaitGroup
	stopping atomic.Bool
	// ended holds, by run id, what to do when a submitted run ends
	// (Ended): stop its actor.
	ended sync.Map
}

// Start spawns the API's actor, PREFIX/api.
func Start(cfg Config) (*API, error) {
	h := &API{calls: cfg.Calls, system: cfg.System, events: cfg.Events}
	props := actor.PropsFromProducer(func() actor.Actor {
		return &gateway{h: h, owners: map[pidKey]*owner{}, subs: map[string]*hostSub{}, handles: map[string]*actor.PID{}, byRun: map[string][]runRef{}}
	}, actor.WithDispatcher(cfg.Dispatcher))
	pid, err := h.system.Root.SpawnNamed(props, cfg.Prefix+"/api")
	if err != nil {
		return nil, fmt.Errorf("hostapi: spawn %s/api: %w", cfg.Prefix, err)
	}
	h.pid = pid
	return h, nil
}

// Stop stops the actor (and the submitted runs' actors, its children),
// and waits for the subscriptions to end.
func (h *API) Stop() {
	h.stopping.Store(true)
	_ = h.system.Root.StopFuture(h.pid).Wait()
	h.subs.Wait()
}

// PID is the API's actor: the address of the requests of package
// actors/msg.
func (h *API) PID() *actor.PID { return h.pid }

// Ended is the end of a submitted run's execution: its actor, if any,
// stops.
func (h *API) Ended(runID string) {
	if f, ok := h.ended.LoadAndDelete(runID); ok {
		f.(func())()
	}
}

// pidKey identifies a PID (a PID's other fields are caches).
type pidKey struct{ address, id string }

func keyOf(p *actor.PID) pidKey { return pidKey{p.Address, p.Id} }

// owner is a sender with calls, submitted runs or subscriptions under
// way. Only the actor touches it.
type owner struct {
	pid     *actor.PID
	sets    map[setKey]*callSet
	submits map[uint64]*hostRun
	subs    int
}

// setKey names a sender's calls that share a context.
type setKey struct {
	ref      string
	detached bool
}

// callSet is the calls (runs, gathers, group runs) a sender has under
// way with one Ref and one Detached. They share one cancellable context,
// so that a call makes no context of its own (a context per call, and
// the registration with it of every context the run derives, was a
// tenth of the bytes the message path allocated): Cancel by Ref cancels
// the set, the sender's end cancels its sets that are not Detached. n
// counts the calls: the actor adds them, each call's end takes itself
// away from whatever goroutine ends it, and the last tells the actor,
// which drops the set once it is still empty.
type callSet struct {
	owner  pidKey
	key    setKey
	ctx    context.Context
	cancel context.CancelFunc
	n      atomic.Int64
}

// hostRun is a submitted run a sender started.
type hostRun struct {
	ref      string
	detached bool
	runID    string
}

// hostSub is a subscription.
type hostSub struct {
	target pidKey
	cancel context.CancelFunc
}

// Messages the actor sends itself.
type (
	release   struct{ set *callSet }
	submitted struct {
		req    *msg.Submit
		sender *actor.PID
		runID  string
	}
	runEnded struct{ runID string }
	subDone  struct{ id string }
)

// gateway is the message API's actor.
type gateway struct {
	h       *API
	self    *actor.PID
	root    *actor.RootContext
	owners  map[pidKey]*owner
	subs    map[string]*hostSub
	handles map[string]*actor.PID // submitted run id → its actor
	byRun   map[string][]runRef   // submitted run id → its senders' records
	next    uint64                // submitted runs' records
	subN    uint64                // subscriptions
}

// runRef names a submitted run in its owner's record.
type runRef struct {
	owner pidKey
	id    uint64
}

func (g *gateway) Receive(c actor.Context) {
	calls := g.h.calls
	switch m := c.Message().(type) {
	case *msg.RunAgent:
		// No goroutine waits for the run: the run actor calls back with
		// the result, and the callback sends the reply.
		ctx, t := g.tie(c, m.Ref, m.Detached)
		sender, root := c.Sender(), g.root
		calls.RunAsync(ctx, m.Agent, m.Task, func(res svc.AgentResult, err error) {
			if sender != nil {
				if err != nil {
					root.Send(sender, msg.NewError(m.Ref, err))
				} else {
					root.Send(sender, &msg.AgentResult{Ref: m.Ref, Result: res})
				}
			}
			g.untie(t)
		})
	case *msg.Gather:
		g.call(c, m.Ref, m.Detached, func(ctx context.Context) any {
			res, err := calls.Gather(ctx, m.Agent, m.Tasks, m.MaxConcurrency)
			if err != nil {
				return msg.NewError(m.Ref, err)
			}
			return &msg.GatherResult{Ref: m.Ref, Results: res}
		})
	case *msg.RunGroup:
		g.call(c, m.Ref, m.Detached, func(ctx context.Context) any {
			res, err := calls.RunGroup(ctx, m.Group, m.Task)
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
			g.forget(c, r.owner, func(o *owner) { delete(o.submits, r.id) })
		}
		delete(g.byRun, m.runID)
	case *msg.Cancel:
		g.cancel(c, m)
	case *release:
		set := m.set
		if set.n.Load() != 0 {
			return // a call joined the set since
		}
		g.forget(c, set.owner, func(o *owner) {
			if o.sets[set.key] == set {
				delete(o.sets, set.key)
				set.cancel()
			}
		})
	case *msg.Subscribe:
		g.subscribe(c, m)
	case *msg.Unsubscribe:
		s, ok := g.subs[m.ID]
		if !ok {
			respond(c, msg.NewError(m.Ref, svc.Errorf(svc.KindRegistry, "no subscription %q", m.ID)))
			return
		}
		// Unsubscribed first: the subscription's end (SubscriptionEnded)
		// is sent once it is cancelled, and must not overtake it.
		respond(c, &msg.Unsubscribed{Ref: m.Ref, ID: m.ID})
		s.cancel()
	case *subDone:
		if s, ok := g.subs[m.id]; ok {
			delete(g.subs, m.id)
			g.forget(c, s.target, func(o *owner) { o.subs-- })
		}
	case *actor.Terminated:
		g.ownerStopped(m.Who)
	case *actor.Started:
		g.self, g.root = c.Self(), c.ActorSystem().Root
	case *actor.Stopping:
		for _, s := range g.subs {
			s.cancel()
		}
		for _, o := range g.owners {
			for _, set := range o.sets {
				set.cancel()
			}
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

// tie is what a call is tied to: its sender's set, or, for a call a
// future asked for, a context of its own.
type tie struct {
	set    *callSet
	cancel context.CancelFunc
}

// tie gives a call of the sender its context. An actor's call joins the
// sender's set for ref (made, and the sender watched, on its first);
// a future's call that is not detached gets a context that the future's
// end cancels (futureWatch); a detached future's call, or a call with no
// sender, is tied to nothing.
func (g *gateway) tie(c actor.Context, ref string, detached bool) (context.Context, tie) {
	sender := c.Sender()
	switch {
	case sender == nil:
		return context.Background(), tie{}
	case isFuture(sender):
		if detached {
			return context.Background(), tie{}
		}
		ctx, cancel := context.WithCancel(context.Background())
		watchFuture(c.ActorSystem(), sender, cancel)
		return ctx, tie{cancel: cancel}
	}
	o := g.owner(c, sender)
	k := setKey{ref: ref, detached: detached}
	set, ok := o.sets[k]
	if !ok {
		set = &callSet{owner: keyOf(sender), key: k}
		set.ctx, set.cancel = context.WithCancel(context.Background())
		o.sets[k] = set
	}
	set.n.Add(1)
	return set.ctx, tie{set: set}
}

// untie ends a call, from any goroutine.
func (g *gateway) untie(t tie) {
	if t.cancel != nil {
		t.cancel()
	}
	if t.set != nil && t.set.n.Add(-1) == 0 {
		g.root.Send(g.self, &release{set: t.set})
	}
}

// owner is the record of sender, made (and sender watched) when new.
func (g *gateway) owner(c actor.Context, sender *actor.PID) *owner {
	k := keyOf(sender)
	o, ok := g.owners[k]
	if !ok {
		o = &owner{pid: sender, sets: map[setKey]*callSet{}, submits: map[uint64]*hostRun{}}
		g.owners[k] = o
		c.Watch(sender)
	}
	return o
}

func (o *owner) idle() bool { return len(o.sets) == 0 && len(o.submits) == 0 && o.subs == 0 }

// forget applies f to an owner's record and drops an owner left with
// nothing under way.
func (g *gateway) forget(c actor.Context, k pidKey, f func(*owner)) {
	o, ok := g.owners[k]
	if !ok {
		return
	}
	f(o)
	if o.idle() {
		delete(g.owners, k)
		c.Unwatch(o.pid)
	}
}

// ownerStopped cancels what a stopped sender left running.
func (g *gateway) ownerStopped(who *actor.PID) {
	k := keyOf(who)
	if o, ok := g.owners[k]; ok {
		delete(g.owners, k)
		for _, set := range o.sets {
			if !set.key.detached {
				set.cancel()
			}
		}
		for _, r := range o.submits {
			if !r.detached {
				g.h.cancelRun(r.runID)
			}
		}
	}
	for _, s := range g.subs {
		if s.target == k {
			s.cancel()
		}
	}
}

// call runs f on a pooled goroutine the runtime owns and sends its reply
// to the sender.
func (g *gateway) call(c actor.Context, ref string, detached bool, f func(ctx context.Context) any) {
	ctx, t := g.tie(c, ref, detached)
	sender, root := c.Sender(), g.root
	err := g.h.calls.Go(func() {
		reply := f(ctx)
		if sender != nil {
			root.Send(sender, reply)
		}
		g.untie(t)
	})
	if err != nil {
		g.untie(t)
		respond(c, msg.NewError(ref, err))
	}
}

// async runs f on a pooled goroutine the runtime owns, replying to the sender
// with what it returns (nothing when nil).
func (g *gateway) async(c actor.Context, ref string, f func() any) {
	sender, root := c.Sender(), c.ActorSystem().Root
	err := g.h.calls.Go(func() {
		if reply := f(); reply != nil && sender != nil {
			root.Send(sender, reply)
		}
	})
	if err != nil {
		respond(c, msg.NewError(ref, err))
	}
}

// futureWatch is a process that a future pipes its outcome to
// (Future.PipeTo): whatever completes the future (the reply, its
// timeout, a dead letter), nobody waits for the call any more, so its
// context is cancelled, which ends a call the future gave up on. The
// future's process is looked up in the registry, the only way to its
// Future from its PID.
type futureWatch struct {
	system *actor.ActorSystem
	cancel context.CancelFunc
}

// watchFuture makes future's end cancel; a future already gone cancels
// at once.
func watchFuture(system *actor.ActorSystem, future *actor.PID, cancel context.CancelFunc) {
	p, ok := system.ProcessRegistry.Get(future)
	f, isFuture := p.(interface{ PipeTo(...*actor.PID) })
	if !ok || !isFuture {
		cancel()
		return
	}
	w := &futureWatch{system: system, cancel: cancel}
	pid, ok := system.ProcessRegistry.Add(w, "svc-future-watch"+system.ProcessRegistry.NextId())
	if !ok {
		cancel()
		return
	}
	f.PipeTo(pid)
}

func (w *futureWatch) SendUserMessage(pid *actor.PID, _ any) {
	w.cancel()
	w.system.ProcessRegistry.Remove(pid)
}

func (w *futureWatch) SendSystemMessage(pid *actor.PID, m any) { w.SendUserMessage(pid, m) }

func (w *futureWatch) Stop(pid *actor.PID) { w.SendUserMessage(pid, nil) }

func (g *gateway) submit(c actor.Context, m *msg.Submit) {
	calls, sender, self, root := g.h.calls, c.Sender(), c.Self(), c.ActorSystem().Root
	g.async(c, m.Ref, func() any {
		id, err := calls.Submit(context.Background(), m.Request)
		if err != nil {
			return msg.NewError(m.Ref, err)
		}
		// The actor answers, once the run's actor is spawned.
		root.Send(self, &submitted{req: m, sender: sender, runID: id})
		return nil
	})
}

func (g *gateway) submitted(c actor.Context, m *submitted) {
	id := m.runID
	pid, ok := g.handles[id]
	if !ok {
		var err error
		pid, err = c.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return &runHandle{gateway: c.Self(), runID: id} }), "run-"+id)
		if err != nil {
			g.reply(c, m.sender, msg.NewError(m.req.Ref, fmt.Errorf("hostapi: spawn the actor of run %s: %w", id, err)))
			return
		}
		g.handles[id] = pid
		self, root := c.Self(), c.ActorSystem().Root
		g.h.ended.Store(id, func() { root.Send(self, &runEnded{runID: id}) })
		// settled may have run before the store: then it found nothing.
		if !g.h.calls.Running(id) {
			g.h.Ended(id)
		}
	}
	if m.sender != nil && !isFuture(m.sender) {
		// The run is the sender's: it is cancelled when the sender stops,
		// and forgotten when it ends (runEnded).
		o := g.owner(c, m.sender)
		g.next++
		o.submits[g.next] = &hostRun{ref: m.req.Ref, detached: m.req.Detached, runID: id}
		g.byRun[id] = append(g.byRun[id], runRef{owner: keyOf(m.sender), id: g.next})
	}
	g.reply(c, m.sender, &msg.Submitted{Ref: m.req.Ref, RunID: id, Run: pid})
}

// cancelRun cancels a submitted run, from a goroutine the runtime owns.
func (h *API) cancelRun(id string) {
	// Refused when shutting down: Shutdown cancels it.
	_ = h.calls.Go(func() { _ = h.calls.CancelRun(context.Background(), id) })
}

func (g *gateway) reply(c actor.Context, to *actor.PID, reply any) {
	if to != nil {
		c.Send(to, reply)
	}
}

func (g *gateway) cancel(c actor.Context, m *msg.Cancel) {
	calls := g.h.calls
	if m.RunID != "" {
		g.async(c, m.Ref, func() any {
			if err := calls.CancelRun(context.Background(), m.RunID); err != nil {
				return msg.NewError(m.Ref, err)
			}
			return &msg.Cancelled{Ref: m.Ref, RunID: m.RunID}
		})
		return
	}
	// The answer goes out before anything is cancelled, so that a sender
	// gets Cancelled before the replies of the runs it cancelled (those
	// come from other actors, and could overtake it otherwise).
	var sets []*callSet
	var runs []string
	if s := c.Sender(); s != nil {
		if o, ok := g.owners[keyOf(s)]; ok {
			for _, detached := range []bool{false, true} {
				k := setKey{ref: m.Ref, detached: detached}
				if set, ok := o.sets[k]; ok {
					// Later calls with this Ref get a new set.
					delete(o.sets, k)
					sets = append(sets, set)
				}
			}
			for _, r := range o.submits {
				if r.ref == m.Ref {
					runs = append(runs, r.runID)
				}
			}
		}
	}
	if len(sets) == 0 && len(runs) == 0 {
		respond(c, msg.NewError(m.Ref, svc.Errorf(svc.KindRegistry, "no run with ref %q started by this sender is running", m.Ref)))
		return
	}
	respond(c, &msg.Cancelled{Ref: m.Ref})
	for _, set := range sets {
		set.cancel()
	}
	for _, id := range runs {
		g.h.cancelRun(id)
	}
	g.forget(c, keyOf(c.Sender()), func(*owner) {})
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
	if m.Window < 0 {
		respond(c, msg.NewError(m.Ref, svc.Errorf(svc.KindSpecValidation, "subscribe: window %d: want 0 (the default, %d) or more", m.Window, msg.DefaultWindow)))
		return
	}
	if m.RunID == "" && h.events == nil {
		respond(c, msg.NewError(m.Ref, svc.Errorf(svc.KindSpecValidation, "subscribe: this runtime has no live event source (supervisor.Config.Events)")))
		return
	}
	g.subN++
	id := "sub-" + strconv.FormatUint(g.subN, 10)
	ctx, cancel := context.WithCancel(context.Background())
	g.owner(c, target).subs++
	k := keyOf(target)
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
func (h *API) forward(ctx context.Context, m *msg.Subscribe, id string, target *actor.PID, started func()) (uint64, error) {
	root := h.system.Root
	// Target's mailbox has no bound (protoactor's): the window stands in
	// for the socket of an SSE stream, so the delivery waits for Target's
	// acknowledgements instead of filling its mailbox.
	flow := msg.NewFlow(m.Window)
	if m.RunID != "" {
		events, err := h.calls.RunEvents(ctx, m.RunID, 0)
		if err != nil {
			return 0, err
		}
		started()
		// A run's events are kept by the store: waiting for the window
		// loses none (the channel ends when ctx does).
		for ev := range events {
			if !flow.Acquire(ctx.Done()) {
				flow.Take()
			}
			root.Send(target, msg.NewRunEvent(flow, id, ev))
		}
		return 0, nil
	}
	sub, err := h.events.Subscribe(ctx, m.Filter)
	if err != nil {
		return 0, err
	}
	defer sub.Close()
	started()
	// While the window is full, events wait in the subscription's bounded
	// queue, which drops and counts what finds it full. Ended
	// (Unsubscribe, the target stopped, Shutdown), the subscription closes
	// Events: what it had queued (a bounded number) still goes out,
	// window or not, then SubscriptionEnded.
	for ev := range sub.Events() {
		if !flow.Acquire(ctx.Done()) {
			flow.Take()
		}
		root.Send(target, msg.NewRuntimeEvent(flow, id, ev, sub.Dropped()))
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

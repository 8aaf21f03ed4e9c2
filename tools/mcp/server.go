package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"

	"github.com/svc-dev/svc"
)

// server is the shared face of one server actor: the tool source agents
// hold, and the state Status and Tools read without a message round trip.
// The actor is its only writer.
type server struct {
	m     *Manager
	agent string
	cfg   svc.MCPServer
	log   *zap.Logger
	pid   *actor.PID
	// done is closed when the actor stops, so nobody waits for a reply
	// from an actor that is gone.
	done     chan struct{}
	retiring atomic.Bool

	mu       sync.Mutex
	state    string
	tools    []svc.Tool
	names    []string
	listed   bool // tools were listed at least once
	restarts int64
	lastErr  string
	procs    map[int]struct{} // process groups of live stdio sessions
	subPID   int              // the subprocess of the current session, 0 if none
	stopped  bool             // the actor stopped: connects must close what they open
	sessions map[*session]struct{}
}

func newServer(m *Manager, agent string, cfg svc.MCPServer) *server {
	return &server{
		m: m, agent: agent, cfg: cloneServer(cfg), done: make(chan struct{}),
		log:   m.log.With(zap.String("agent", agent), zap.String("server", cfg.Name)),
		state: StateStopped, procs: map[int]struct{}{}, sessions: map[*session]struct{}{},
	}
}

func cloneServer(s svc.MCPServer) svc.MCPServer {
	s.Args = slices.Clone(s.Args)
	s.Env = maps.Clone(s.Env)
	return s
}

// Tools returns the server's tools, starting it if it never ran. Once the
// tools were listed, the last list is returned at once, even while the
// server restarts: calls made meanwhile wait for the restart.
func (s *server) Tools(ctx context.Context) ([]svc.Tool, error) {
	if s.retiring.Load() {
		return nil, shuttingDown()
	}
	s.mu.Lock()
	tools, listed := s.tools, s.listed
	s.mu.Unlock()
	if listed {
		return slices.Clone(tools), nil
	}
	reply := make(chan toolsReply, 1)
	s.m.system.Root.Send(s.pid, &getTools{reply: reply})
	select {
	case r := <-reply:
		return slices.Clone(r.tools), r.err
	case <-ctx.Done():
		return nil, svc.Wrap(svc.KindToolExecution, context.Cause(ctx), s.what()+": waiting for tools")
	case <-s.done:
		return nil, shuttingDown()
	}
}

func (s *server) what() string { return "mcp server " + s.cfg.Name }

func (s *server) status() svc.ToolServerStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	return svc.ToolServerStatus{
		Name: s.cfg.Name, Agent: s.agent, Transport: s.cfg.Transport, State: s.state,
		Tools: slices.Clone(s.names), Restarts: s.restarts, LastError: s.lastErr, PID: s.subPID,
	}
}

func (s *server) set(f func()) {
	s.mu.Lock()
	f()
	s.mu.Unlock()
}

// retire stops the server once its calls in flight are done.
func (s *server) retire() {
	if s.retiring.CompareAndSwap(false, true) {
		s.m.system.Root.Send(s.pid, retire{})
	}
}

// killAll kills every subprocess group the server still has.
func (s *server) killAll() {
	s.mu.Lock()
	groups := make([]int, 0, len(s.procs))
	for g := range s.procs {
		groups = append(groups, g)
	}
	s.mu.Unlock()
	for _, g := range groups {
		killGroup(g)
	}
}

// call runs one tool call through the actor and waits for its outcome, at
// most the server's timeout_seconds (else CallTimeout) in all.
func (s *server) call(ctx context.Context, t *tool, args json.RawMessage) (json.RawMessage, error) {
	if s.retiring.Load() {
		return nil, shuttingDown()
	}
	timeout := s.m.cfg.CallTimeout
	if s.cfg.TimeoutSeconds > 0 {
		timeout = time.Duration(s.cfg.TimeoutSeconds * float64(time.Second))
	}
	cctx, cancel := context.WithTimeoutCause(ctx, timeout, errCallTimeout)
	defer cancel()
	req := &callReq{ctx: cctx, name: t.remote, args: args, reply: make(chan callReply, 1)}
	s.m.system.Root.Send(s.pid, req)
	select {
	case r := <-req.reply:
		if r.err != nil {
			return nil, s.callError(t, req, r.err, cctx, timeout)
		}
		return t.result(r.res)
	case <-cctx.Done():
		return nil, s.callError(t, req, context.Cause(cctx), cctx, timeout)
	case <-s.done:
		return nil, shuttingDown()
	}
}

var errCallTimeout = errors.New("call timeout")

// callError turns a failed call into the ToolExecutionError the model sees.
func (s *server) callError(t *tool, req *callReq, err error, ctx context.Context, timeout time.Duration) error {
	var se *svc.Error
	if errors.As(err, &se) {
		return err
	}
	what := "tool " + t.name + " (" + s.what() + ")"
	if ctx.Err() != nil && errors.Is(context.Cause(ctx), errCallTimeout) {
		if !req.dispatched.Load() {
			s.mu.Lock()
			last := s.lastErr
			s.mu.Unlock()
			msg := fmt.Sprintf("%s: server not ready within %v", what, timeout)
			if last != "" {
				msg += " (last error: " + last + ")"
			}
			return svc.Errorf(svc.KindToolExecution, "%s", msg)
		}
		return svc.Errorf(svc.KindToolExecution, "%s: no answer within %v", what, timeout)
	}
	if ctx.Err() != nil {
		return svc.Wrap(svc.KindToolExecution, context.Cause(ctx), what)
	}
	return svc.Wrap(svc.KindToolExecution, err, what)
}

// Messages of the server actor. Those a timer or a goroutine may send after
// the actor stopped ignore dead-letter logging.
type (
	startServer struct{}
	retire      struct{}
	getTools    struct{ reply chan<- toolsReply }
	toolsReply  struct {
		tools []svc.Tool
		err   error
	}
	callReq struct {
		ctx        context.Context // the caller's, with the call timeout
		name       string          // the tool's name on the server
		args       json.RawMessage
		reply      chan callReply // buffered: nobody blocks on it
		dispatched atomic.Bool
	}
	callReply struct {
		res *sdk.CallToolResult
		err error
	}
	// connected reports a connect attempt: sess on success, else err.
	connected struct {
		gen   int
		sess  *session
		tools []*sdk.Tool
		err   error
	}
	// died reports that a session ended (the watcher has torn it down).
	died struct {
		gen int
		err error
	}
	reconnect    struct{ gen int }
	callDone     struct{ gen int }
	probeDone    struct{}
	toolsChanged struct{ gen int }
	toolsListed  struct {
		gen   int
		tools []*sdk.Tool
		err   error
	}
)

func (connected) IgnoreDeadLetterLogging()    {}
func (died) IgnoreDeadLetterLogging()         {}
func (reconnect) IgnoreDeadLetterLogging()    {}
func (callDone) IgnoreDeadLetterLogging()     {}
func (probeDone) IgnoreDeadLetterLogging()    {}
func (toolsChanged) IgnoreDeadLetterLogging() {}
func (toolsListed) IgnoreDeadLetterLogging()  {}
func (retire) IgnoreDeadLetterLogging()       {}
func (startServer) IgnoreDeadLetterLogging()  {}

// A call or a tools request may race the actor stopping; its sender is
// answered through server.done instead.
func (*getTools) IgnoreDeadLetterLogging() {}
func (*callReq) IgnoreDeadLetterLogging()  {}

// serverActor supervises one server's session. It is the server's restart
// policy too: a session that dies is reconnected after a backoff, rather
// than the actor failing to a protoactor supervisor, because the actor's
// state (queued calls, restart count, the last tool list) must survive the
// restart.
type serverActor struct {
	srv  *server
	self *actor.PID
	root *actor.RootContext
	// base is cancelled when the actor stops: it ends connect attempts and
	// calls in flight.
	base   context.Context
	cancel context.CancelFunc

	gen        int      // generation of the current or last connect attempt
	connecting bool     // a connect attempt is running
	sess       *session // the live session, nil if none
	failures   int      // consecutive failures, for the backoff
	timer      *time.Timer
	waiters    []chan<- toolsReply
	pending    []*callReq // calls waiting for the server to be ready
	inflight   int
	probing    bool
	retiring   bool
	stopping   bool
}

func (a *serverActor) Receive(c actor.Context) {
	defer func() {
		// A panic here would make protoactor restart the actor and lose its
		// state (and the session it owns); log it and carry on instead.
		if p := recover(); p != nil {
			a.srv.log.Error("mcp server actor panicked", zap.Any("panic", p), zap.Any("message", c.Message()))
		}
	}()
	switch m := c.Message().(type) {
	case *actor.Started:
		a.self, a.root = c.Self(), c.ActorSystem().Root
		a.base, a.cancel = context.WithCancel(context.Background())
	case startServer:
		if a.srv.state == StateStopped && !a.connecting && !a.retiring {
			a.startConnect()
		}
	case *getTools:
		a.getTools(m)
	case *callReq:
		a.callReq(m)
	case connected:
		a.connected(m)
	case died:
		a.died(m)
	case reconnect:
		if m.gen == a.gen && a.sess == nil && !a.connecting && !a.retiring {
			a.srv.set(func() { a.srv.restarts++ })
			a.startConnect()
		}
	case callDone:
		a.inflight--
		a.maybeRetire(c)
	case probeDone:
		a.probing = false
	case toolsChanged:
		if a.sess != nil && m.gen == a.sess.gen {
			a.relist()
		}
	case toolsListed:
		if a.sess != nil && m.gen == a.sess.gen {
			if m.err != nil {
				a.srv.log.Warn("relisting tools failed", zap.Error(m.err))
			} else {
				a.setTools(m.tools)
			}
		}
	case retire:
		a.retiring = true
		a.failAll(shuttingDown())
		a.maybeRetire(c)
	case *actor.Stopping:
		a.stop()
	}
}

func (a *serverActor) getTools(m *getTools) {
	s := a.srv
	switch {
	case a.retiring:
		m.reply <- toolsReply{err: shuttingDown()}
	case s.listed:
		m.reply <- toolsReply{tools: s.tools}
	case a.connecting:
		a.waiters = append(a.waiters, m.reply)
	case s.state == StateStopped:
		a.waiters = append(a.waiters, m.reply)
		a.startConnect()
	default:
		// Waiting for a reconnect after a failed start: fail now with why,
		// rather than hold the agent through the backoff.
		m.reply <- toolsReply{err: a.startError()}
	}
}

func (a *serverActor) startError() error {
	a.srv.mu.Lock()
	defer a.srv.mu.Unlock()
	return svc.Errorf(svc.KindToolExecution, "%s: not started: %s", a.srv.what(), a.srv.lastErr)
}

func (a *serverActor) callReq(m *callReq) {
	switch {
	case a.retiring:
		m.reply <- callReply{err: shuttingDown()}
	case a.sess != nil:
		a.dispatch(m)
	default:
		a.prune()
		a.pending = append(a.pending, m)
		if a.srv.state == StateStopped && !a.connecting {
			a.startConnect()
		}
	}
}

// prune drops queued calls whose callers gave up.
func (a *serverActor) prune() {
	a.pending = slices.DeleteFunc(a.pending, func(r *callReq) bool { return r.ctx.Err() != nil })
}

// dispatch runs a call on the live session in a goroutine of its own,
// cancelled when the caller gives up or the actor stops.
func (a *serverActor) dispatch(m *callReq) {
	if m.ctx.Err() != nil {
		return
	}
	m.dispatched.Store(true)
	sess, self, root, base := a.sess, a.self, a.root, a.base
	a.inflight++
	a.srv.m.work.Add(1)
	go func() {
		defer a.srv.m.work.Done()
		ctx, cancel := context.WithCancelCause(m.ctx)
		defer cancel(nil)
		stop := context.AfterFunc(base, func() { cancel(shuttingDown()) })
		defer stop()
		var args any = m.args
		if len(m.args) == 0 || string(m.args) == "null" {
			args = map[string]any{}
		}
		res, err := sess.cs.CallTool(ctx, &sdk.CallToolParams{Name: m.name, Arguments: args})
		if err != nil && ctx.Err() != nil {
			err = context.Cause(ctx)
		}
		m.reply <- callReply{res: res, err: err}
		if err != nil && ctx.Err() == nil && !isProtocolError(err) {
			// Not an answer from the server: the transport may be broken in
			// a way the session has not noticed (an HTTP server gone away).
			a.probe(sess)
		}
		root.Send(self, callDone{gen: sess.gen})
	}()
}

func isProtocolError(err error) bool {
	var we *jsonrpc.Error
	return errors.As(err, &we)
}

// probe pings a session a call failed on and closes it if the ping fails
// too, so the watcher reports it dead and the actor reconnects. Called from
// call goroutines; at most one probe runs at a time.
func (a *serverActor) probe(sess *session) {
	if !sess.probing.CompareAndSwap(false, true) {
		return
	}
	ctx, cancel := context.WithTimeout(a.base, min(a.srv.m.cfg.CallTimeout, 5*time.Second))
	defer cancel()
	if err := sess.cs.Ping(ctx, nil); err != nil && a.base.Err() == nil {
		a.srv.log.Warn("session unresponsive, reconnecting", zap.Error(err))
		_ = sess.cs.Close()
		return
	}
	sess.probing.Store(false)
}

// startConnect begins a connect attempt in a goroutine that reports back
// with connected.
func (a *serverActor) startConnect() {
	a.gen++
	a.connecting = true
	gen, self, root := a.gen, a.self, a.root
	a.srv.set(func() {
		if a.srv.state == StateStopped {
			a.srv.state = StateStarting
		}
	})
	a.srv.m.work.Add(1)
	go func() {
		defer a.srv.m.work.Done()
		sess, tools, err := a.srv.connect(a.base, gen, func() { root.Send(self, toolsChanged{gen: gen}) })
		root.Send(self, connected{gen: gen, sess: sess, tools: tools, err: err})
	}()
}

func (a *serverActor) connected(m connected) {
	if m.gen != a.gen || a.stopping {
		if m.sess != nil {
			a.closeSession(m.sess)
		}
		return
	}
	a.connecting = false
	if m.err != nil {
		a.failures++
		a.srv.log.Warn("mcp server failed to start", zap.Error(m.err), zap.Int("failures", a.failures))
		a.srv.set(func() {
			a.srv.state = StateRestarting
			a.srv.lastErr = m.err.Error()
		})
		err := svc.Wrap(svc.KindToolExecution, m.err, a.srv.what()+": start")
		for _, w := range a.waiters {
			w <- toolsReply{err: err}
		}
		a.waiters = nil
		a.scheduleReconnect()
		return
	}
	a.sess = m.sess
	a.srv.log.Info("mcp server ready", zap.Int("tools", len(m.tools)), zap.Int("pid", m.sess.pid))
	a.setTools(m.tools)
	a.srv.set(func() {
		a.srv.state = StateReady
		a.srv.subPID = m.sess.pid
	})
	for _, w := range a.waiters {
		w <- toolsReply{tools: a.srv.tools}
	}
	a.waiters = nil
	pending := a.pending
	a.pending = nil
	for _, r := range pending {
		a.dispatch(r)
	}
	a.watch(m.sess)
}

// watch waits for a session to end, tears it down (reaping its subprocess
// and killing what is left of its process group) and reports died.
func (a *serverActor) watch(sess *session) {
	self, root := a.self, a.root
	a.srv.m.work.Add(1)
	go func() {
		defer a.srv.m.work.Done()
		err := sess.cs.Wait()
		a.srv.teardown(sess)
		root.Send(self, died{gen: sess.gen, err: err})
	}()
}

func (a *serverActor) died(m died) {
	if a.sess == nil || m.gen != a.sess.gen {
		return
	}
	// A session that stayed up for a while resets the backoff; one that
	// dies right after connecting keeps backing off.
	if time.Since(a.sess.started) >= a.srv.m.cfg.RestartBackoff.Max {
		a.failures = 0
	}
	a.failures++
	msg := "session ended"
	if m.err != nil {
		msg += ": " + m.err.Error()
	}
	if tail := a.sess.stderrTail(); tail != "" {
		msg += "; stderr: " + tail
	}
	a.srv.log.Warn("mcp server session ended", zap.String("reason", msg))
	a.sess = nil
	a.srv.set(func() {
		a.srv.state = StateRestarting
		a.srv.lastErr = msg
		a.srv.subPID = 0
	})
	if !a.retiring {
		a.scheduleReconnect()
	}
}

func (a *serverActor) scheduleReconnect() {
	b := a.srv.m.cfg.RestartBackoff
	d := b.Base
	for i := 1; i < a.failures && d < b.Max; i++ {
		d *= 2
	}
	d = min(d, b.Max)
	gen, self, root := a.gen, a.self, a.root
	if a.timer != nil {
		a.timer.Stop()
	}
	a.timer = time.AfterFunc(d, func() { root.Send(self, reconnect{gen: gen}) })
}

func (a *serverActor) relist() {
	sess, self, root, base := a.sess, a.self, a.root, a.base
	timeout := a.srv.m.cfg.StartTimeout
	a.srv.m.work.Add(1)
	go func() {
		defer a.srv.m.work.Done()
		ctx, cancel := context.WithTimeout(base, timeout)
		defer cancel()
		tools, err := listTools(ctx, sess.cs)
		root.Send(self, toolsListed{gen: sess.gen, tools: tools, err: err})
	}()
}

func (a *serverActor) setTools(list []*sdk.Tool) {
	tools, names := a.srv.convert(list)
	a.srv.set(func() {
		a.srv.tools, a.srv.names, a.srv.listed = tools, names, true
	})
}

// failAll answers every waiter and queued call with err.
func (a *serverActor) failAll(err error) {
	for _, w := range a.waiters {
		w <- toolsReply{err: err}
	}
	a.waiters = nil
	for _, r := range a.pending {
		r.reply <- callReply{err: err}
	}
	a.pending = nil
}

func (a *serverActor) maybeRetire(c actor.Context) {
	if a.retiring && a.inflight == 0 && !a.stopping {
		c.Stop(c.Self())
	}
}

// stop runs once, when the actor stops: it ends every attempt and call,
// and closes the session in the background (Shutdown waits for it).
func (a *serverActor) stop() {
	if a.stopping {
		return
	}
	a.stopping = true
	a.srv.retiring.Store(true)
	if a.timer != nil {
		a.timer.Stop()
	}
	a.failAll(shuttingDown())
	if a.cancel != nil {
		a.cancel()
	}
	a.srv.mu.Lock()
	a.srv.stopped = true
	a.srv.state = StateStopped
	live := make([]*session, 0, len(a.srv.sessions))
	for s := range a.srv.sessions {
		live = append(live, s)
	}
	a.srv.mu.Unlock()
	for _, s := range live {
		a.closeSession(s)
	}
	a.sess = nil
	close(a.srv.done)
	a.srv.m.stopped(a.srv)
}

// closeSession closes a session in the background; its watcher (or, for a
// session never watched, this goroutine) tears it down.
func (a *serverActor) closeSession(s *session) {
	a.srv.m.work.Add(1)
	go func() {
		defer a.srv.m.work.Done()
		_ = s.cs.Close()
		a.srv.teardown(s)
	}()
}

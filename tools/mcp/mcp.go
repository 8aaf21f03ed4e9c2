// Package mcp runs agents' Model Context Protocol tool servers (stdio,
// streamable HTTP and SSE) as supervised actors and offers their tools as
// svc.ToolSources.
//
// One actor owns each server's client session: it connects on first use
// (or at StartAll), watches the session, reconnects with exponential backoff
// when it dies (a subprocess exiting, an HTTP session breaking), and runs
// every tool call in a goroutine it owns, so its Receive never blocks.
//
// Servers are per agent: Source(agent, s) and Source(other, s) are two
// servers even when s is the same, because each agent's servers show up in
// Status under that agent, restart on their own, and may carry credentials
// in Env that another agent must not share. Asking again for the same agent
// and server name with the same configuration returns the same source (so
// re-registering an unchanged agent keeps its connection); with a different
// configuration the new server replaces the old one, which finishes its
// calls in flight and then stops.
//
// Access: an MCP tool is code outside this process, so its access is
// AccessWrite (trust high) unless the server annotates it readOnlyHint, in
// which case it is AccessNetwork (trust medium). It is never AccessRead:
// low-trust agents get only the runtime's own local read-only tools. The
// annotation is the server author's word; the operator who configured the
// server chose to trust that author.
package mcp

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/zap"

	"github.com/svc-dev/svc"
)

// Transport names of svc.MCPServer.Transport.
const (
	TransportStdio = "stdio"
	TransportHTTP  = "http"
	TransportSSE   = "sse"
)

// Server states reported by Status.
const (
	StateStopped    = "stopped"
	StateStarting   = "starting"
	StateReady      = "ready"
	StateRestarting = "restarting"
)

// Backoff bounds the delay before a server is reconnected: Base after the
// first failure, doubling with every consecutive failure up to Max.
type Backoff struct {
	Base time.Duration
	Max  time.Duration
}

// Config configures a Manager. Zero fields take the defaults noted.
type Config struct {
	// Logger receives connection, restart and subprocess stderr logs
	// (stderr at debug level). Nop when nil.
	Logger *zap.Logger
	// RestartBackoff paces reconnects; 200 ms doubling up to 30 s.
	RestartBackoff Backoff
	// CallTimeout bounds one tool call, including any wait for the server
	// to (re)start; 30 s.
	CallTimeout time.Duration
	// StartTimeout bounds connecting: starting the subprocess or opening
	// the HTTP session, the MCP handshake and listing the tools; 30 s.
	StartTimeout time.Duration
	// StopGrace is how long a stdio server gets to exit after its stdin is
	// closed, and again after SIGTERM, before it is killed; 2 s.
	StopGrace time.Duration
	// Eager starts every server as soon as Source creates it instead of on
	// first use (the mcp_eager_start option). StartAll starts servers and
	// waits for them either way.
	Eager bool
	// Prefix is put before the names of the tool server actors
	// ("PREFIX/toolservers/..."), so that they stand apart in an actor
	// system shared with other actors (a host's); none when "".
	Prefix string
}

func (c *Config) defaults() {
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.RestartBackoff.Base <= 0 {
		c.RestartBackoff.Base = 200 * time.Millisecond
	}
	if c.RestartBackoff.Max <= 0 {
		c.RestartBackoff.Max = 30 * time.Second
	}
	if c.RestartBackoff.Max < c.RestartBackoff.Base {
		c.RestartBackoff.Max = c.RestartBackoff.Base
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = 30 * time.Second
	}
	if c.StartTimeout <= 0 {
		c.StartTimeout = 30 * time.Second
	}
	if c.StopGrace <= 0 {
		c.StopGrace = 2 * time.Second
	}
}

// Manager owns the MCP tool servers of a runtime. Create it with
// NewManager and stop it with Shutdown, before the actor system it was
// given is shut down.
type Manager struct {
	system *actor.ActorSystem
	cfg    Config
	log    *zap.Logger
	// http is the client of the HTTP and SSE transports. It has a
	// transport of its own so Shutdown can close its idle connections.
	http *http.Client

	// work tracks every goroutine the servers start (connects, calls,
	// session watchers), so Shutdown can wait for them.
	work sync.WaitGroup

	mu      sync.Mutex
	servers map[key]*server      // the current server of each (agent, name)
	live    map[*server]struct{} // every server whose actor runs, retiring ones too
	closed  bool
}

type key struct{ agent, name string }

// NewManager returns a manager whose server actors live in system.
func NewManager(system *actor.ActorSystem, cfg Config) *Manager {
	cfg.defaults()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	return &Manager{
		system:  system,
		cfg:     cfg,
		log:     cfg.Logger.Named("mcp"),
		http:    &http.Client{Transport: tr},
		servers: map[key]*server{},
		live:    map[*server]struct{}{},
	}
}

// Validate checks a server configuration: a name, a known transport, a
// command for stdio and a URL for http and sse. It returns a
// SpecValidationError.
func Validate(s svc.MCPServer) error {
	bad := func(format string, args ...any) error {
		return svc.Errorf(svc.KindSpecValidation, "mcp server %q: "+format, append([]any{s.Name}, args...)...)
	}
	if !svc.ValidName(s.Name) {
		return bad("name: use letters, digits, '_', '-' and '.', starting with a letter or digit")
	}
	switch s.Transport {
	case TransportStdio:
		if s.Command == "" {
			return bad("transport stdio needs a command")
		}
	case TransportHTTP, TransportSSE:
		if !strings.HasPrefix(s.URL, "http://") && !strings.HasPrefix(s.URL, "https://") {
			return bad("transport %s needs an http:// or https:// url, got %q", s.Transport, s.URL)
		}
	default:
		return bad("transport %q: want stdio, http or sse", s.Transport)
	}
	if s.Prefix != "" && !svc.ValidName(s.Prefix+"x") {
		return bad("prefix %q: use letters, digits, '_', '-' and '.'", s.Prefix)
	}
	if s.TimeoutSeconds < 0 || s.TimeoutSeconds > 86400 || math.IsNaN(s.TimeoutSeconds) {
		return bad("timeout_seconds %v: want seconds above 0, at most 86400 (0: the default)", s.TimeoutSeconds)
	}
	return nil
}

// Source returns the tool source of one server of one agent, creating the
// server's actor if needed (and starting it when Config.Eager). An invalid
// configuration gives a source whose Tools fails with the
// SpecValidationError of Validate.
func (m *Manager) Source(agent string, s svc.MCPServer) svc.ToolSource {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sourceLocked(agent, s)
}

// Sources makes servers the complete set of an agent's servers: it returns
// their sources in order, like Source, and retires the agent's servers not
// named in servers. Sources(agent, nil) retires them all, for an agent that
// was removed.
func (m *Manager) Sources(agent string, servers []svc.MCPServer) []svc.ToolSource {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]svc.ToolSource, len(servers))
	keep := map[string]bool{}
	for i, s := range servers {
		out[i] = m.sourceLocked(agent, s)
		keep[s.Name] = true
	}
	for k, srv := range m.servers {
		if k.agent == agent && !keep[k.name] {
			delete(m.servers, k)
			srv.retire()
		}
	}
	return out
}

func (m *Manager) sourceLocked(agent string, s svc.MCPServer) svc.ToolSource {
	if err := Validate(s); err != nil {
		return errSource{err}
	}
	if m.closed {
		return errSource{shuttingDown()}
	}
	k := key{agent, s.Name}
	if old, ok := m.servers[k]; ok {
		if sameConfig(old.cfg, s) {
			return old
		}
		delete(m.servers, k)
		old.retire()
	}
	srv := newServer(m, agent, s)
	props := actor.PropsFromProducer(func() actor.Actor { return &serverActor{srv: srv} })
	srv.pid = m.system.Root.SpawnPrefix(props, m.cfg.namePrefix()+"toolservers/"+agent+"/"+s.Name+"-")
	m.servers[k] = srv
	m.live[srv] = struct{}{}
	if m.cfg.Eager {
		m.system.Root.Send(srv.pid, startServer{})
	}
	return srv
}

// stopped is called by a server's actor once it has stopped.
func (m *Manager) stopped(srv *server) {
	m.mu.Lock()
	delete(m.live, srv)
	m.mu.Unlock()
}

func sameConfig(a, b svc.MCPServer) bool {
	return a.Name == b.Name && a.Transport == b.Transport && a.Command == b.Command &&
		slices.Equal(a.Args, b.Args) && maps.Equal(a.Env, b.Env) && a.URL == b.URL && a.Prefix == b.Prefix &&
		(a.Idempotent == nil) == (b.Idempotent == nil) && (a.Idempotent == nil || *a.Idempotent == *b.Idempotent)
}

// StartAll starts every current server that is not running yet and waits
// until each has connected and listed its tools, or failed its first
// attempt, or ctx ended. It returns the failures joined (servers that
// failed keep retrying with backoff).
func (m *Manager) StartAll(ctx context.Context) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return shuttingDown()
	}
	srvs := make([]*server, 0, len(m.servers))
	for _, s := range m.servers {
		srvs = append(srvs, s)
	}
	m.mu.Unlock()
	errs := make([]error, len(srvs))
	var wg sync.WaitGroup
	for i, s := range srvs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Tools(ctx); err != nil {
				errs[i] = fmt.Errorf("agent %s: %w", s.agent, err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Status describes the current servers, sorted by agent and name.
func (m *Manager) Status() []svc.ToolServerStatus {
	m.mu.Lock()
	srvs := make([]*server, 0, len(m.servers))
	for _, s := range m.servers {
		srvs = append(srvs, s)
	}
	m.mu.Unlock()
	out := make([]svc.ToolServerStatus, len(srvs))
	for i, s := range srvs {
		out[i] = s.status()
	}
	slices.SortFunc(out, func(a, b svc.ToolServerStatus) int {
		if c := strings.Compare(a.Agent, b.Agent); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

// Shutdown stops every server: calls in flight are cancelled, sessions are
// closed and stdio servers are given StopGrace to exit after their stdin
// closes, then SIGTERM, then SIGKILL (their whole process group). When ctx
// ends first, what is left is killed at once. Shutdown returns only when no
// subprocess is left; it is safe to call more than once.
func (m *Manager) Shutdown(ctx context.Context) error {
	m.mu.Lock()
	m.closed = true
	srvs := make([]*server, 0, len(m.live))
	for s := range m.live {
		srvs = append(srvs, s)
	}
	clear(m.servers)
	m.mu.Unlock()

	var err error
	for _, s := range srvs {
		// The actor's Stopping handler starts closing the session; the
		// future only waits for the actor to process it.
		if e := m.system.Root.StopFuture(s.pid).Wait(); e != nil {
			// The actor is gone already (or the system is): make sure its
			// subprocess is too.
			s.killAll()
		}
	}
	done := make(chan struct{})
	go func() { m.work.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		for _, s := range srvs {
			s.killAll()
		}
		<-done
		// With no server there was nothing to kill: a ctx that had
		// already ended (a shutdown past its grace) is no error here.
		if len(srvs) > 0 {
			err = fmt.Errorf("mcp: shutdown: servers killed: %w", ctx.Err())
		}
	}
	m.http.CloseIdleConnections()
	return err
}

func shuttingDown() *svc.Error {
	return svc.Errorf(svc.KindShuttingDown, "mcp: tool servers are shutting down")
}

// errSource is the source of a server that cannot run.
type errSource struct{ err error }

func (e errSource) Tools(context.Context) ([]svc.Tool, error) { return nil, e.err }

// namePrefix is Prefix as the start of an actor name.
func (c Config) namePrefix() string {
	if c.Prefix == "" {
		return ""
	}
	return c.Prefix + "/"
}

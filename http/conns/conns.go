// Package conns owns the connections of svc serve's HTTP server: a bound
// on how many are open at once, with idle keep-alive connections closed
// first to make room and a small reserve past the bound that only health
// checks may use, and the problem+json body for the 4xx answers net/http
// writes on its own (a malformed request line, an invalid % escape,
// headers too large).
//
// Without a bound, a client that opens connections and never closes them
// exhausts the process's file descriptors: then nothing is accepted, not
// even /healthz, and the stores cannot open a file (an attack held 20,000
// idle keep-alive connections). With one, new connections past it wait in
// the kernel's backlog, except that an idle keep-alive connection is
// closed to make room (clients reconnect after an idle close as after any
// server's idle timeout) and a health probe still gets a reserve slot.
package conns

import (
	"container/list"
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of Config.
const (
	// DefaultReserve is how many connections past Max are accepted to
	// answer health checks (and nothing else) while the bound is reached.
	DefaultReserve = 32
	// DefaultReserveDeadline is how long a reserve connection has to send
	// its request and read the answer: it holds a descriptor past the
	// bound, so it must not linger.
	DefaultReserveDeadline = 2 * time.Second
)

// Config configures NewListener.
type Config struct {
	// Max bounds the connections open at once, not counting the reserve;
	// it must be positive.
	Max int
	// Reserve is how many connections are accepted past Max, each only
	// for a health check (see Reserved); DefaultReserve when 0, none when
	// negative.
	Reserve int
	// ReserveDeadline bounds the life of a reserve connection;
	// DefaultReserveDeadline when 0.
	ReserveDeadline time.Duration
	// Problem, when set, encodes the problem+json body of a 4xx answer
	// that net/http writes by itself, before any handler runs: the
	// connection rewrites net/http's text/plain answer into one with this
	// body, so that every 4xx the server sends is a problem document.
	// detail is net/http's own text ("invalid URL escape \"%zz\"").
	Problem func(status int, detail string) []byte
}

// Stats are a Listener's counters.
type Stats struct {
	// Open is the connections open now, Idle those of them idle between
	// requests, Reserve those accepted past the bound.
	Open, Idle, Reserve int
	// Accepted counts every connection accepted; Evicted the idle ones
	// closed to make room for a new one; Waited the accepts that had to
	// wait for room.
	Accepted, Evicted, Waited uint64
}

// Listener is a net.Listener that holds the number of open connections
// at Config.Max (plus the reserve). Set its ConnState as the
// http.Server's ConnState, so that it knows which connections are idle,
// and its ConnContext as (or inside) the server's ConnContext, so that
// Reserved can tell a reserve connection's requests.
type Listener struct {
	net.Listener
	cfg Config

	mu      sync.Mutex
	room    *sync.Cond // signalled when a connection closes or the listener does
	open    int        // connections counted against Max
	reserve int        // reserve connections open
	idle    list.List  // of *conn, oldest idle first
	closed  bool

	accepted, evicted, waited atomic.Uint64
}

// NewListener bounds the connections of ln by cfg.
func NewListener(ln net.Listener, cfg Config) (*Listener, error) {
	if cfg.Max <= 0 {
		return nil, errors.New("conns: Max must be positive")
	}
	switch {
	case cfg.Reserve == 0:
		cfg.Reserve = DefaultReserve
	case cfg.Reserve < 0:
		cfg.Reserve = 0
	}
	if cfg.ReserveDeadline <= 0 {
		cfg.ReserveDeadline = DefaultReserveDeadline
	}
	l := &Listener{Listener: ln, cfg: cfg}
	l.room = sync.NewCond(&l.mu)
	return l, nil
}

// Max is the bound of open connections (without the reserve).
func (l *Listener) Max() int { return l.cfg.Max }

// Accept waits for a connection and for room for it. A connection that
// finds the bound reached closes the oldest idle keep-alive connection,
// or takes a reserve slot, or else waits until a connection closes:
// connections that arrive meanwhile wait in the kernel's backlog.
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.accepted.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	waited := false
	for {
		if l.closed {
			_ = c.Close()
			return nil, net.ErrClosed
		}
		if l.open < l.cfg.Max {
			l.open++
			return &conn{Conn: c, l: l}, nil
		}
		if victim := l.idle.Front(); victim != nil {
			// The oldest idle connection makes room: closing it here,
			// not when the server next touches it, frees its slot now.
			vc := victim.Value.(*conn)
			l.forgetLocked(vc)
			l.evicted.Add(1)
			go func() { _ = vc.Conn.Close() }() // a close can block on a slow peer (SO_LINGER)
			l.open++
			return &conn{Conn: c, l: l}, nil
		}
		if l.reserve < l.cfg.Reserve {
			l.reserve++
			rc := &conn{Conn: c, l: l, reserved: true, until: time.Now().Add(l.cfg.ReserveDeadline)}
			_ = c.SetDeadline(rc.until)
			return rc, nil
		}
		if !waited {
			waited = true
			l.waited.Add(1)
		}
		l.room.Wait()
	}
}

// Close stops accepting and wakes an Accept waiting for room.
func (l *Listener) Close() error {
	l.mu.Lock()
	l.closed = true
	l.room.Broadcast()
	l.mu.Unlock()
	return l.Listener.Close()
}

// ConnState is the http.Server ConnState hook: it tracks which
// connections are idle, the ones Accept may close to make room.
func (l *Listener) ConnState(nc net.Conn, state http.ConnState) {
	c, ok := nc.(*conn)
	if !ok || c.l != l {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.gone {
		return
	}
	switch state {
	case http.StateIdle:
		if c.elem == nil && !c.reserved {
			c.elem = l.idle.PushBack(c)
			l.room.Signal() // an Accept waiting for room may close it now
		}
	case http.StateActive, http.StateHijacked, http.StateClosed:
		if c.elem != nil {
			l.idle.Remove(c.elem)
			c.elem = nil
		}
	}
}

// Stats returns the listener's counters.
func (l *Listener) Stats() Stats {
	l.mu.Lock()
	s := Stats{Open: l.open + l.reserve, Idle: l.idle.Len(), Reserve: l.reserve}
	l.mu.Unlock()
	s.Accepted, s.Evicted, s.Waited = l.accepted.Load(), l.evicted.Load(), l.waited.Load()
	return s
}

// forgetLocked drops c from the counts, once; l.mu is held.
func (l *Listener) forgetLocked(c *conn) {
	if c.gone {
		return
	}
	c.gone = true
	if c.elem != nil {
		l.idle.Remove(c.elem)
		c.elem = nil
	}
	if c.reserved {
		l.reserve--
	} else {
		l.open--
	}
	l.room.Signal()
}

type ctxKey struct{}

// ConnContext is an http.Server ConnContext (compose it with others) that
// lets Reserved find the connection of a request.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	if cc, ok := c.(*conn); ok && cc.reserved {
		return context.WithValue(ctx, ctxKey{}, true)
	}
	return ctx
}

// Reserved reports whether r came on a reserve connection: one accepted
// past the bound, which may serve a health check and nothing else.
func Reserved(r *http.Request) bool {
	v, _ := r.Context().Value(ctxKey{}).(bool)
	return v
}

// conn is an accepted connection, counted until it is closed.
type conn struct {
	net.Conn
	l        *Listener
	reserved bool
	until    time.Time // a reserve connection's deadline

	// Under l.mu.
	elem *list.Element // in l.idle while idle
	gone bool          // closed (or evicted): no longer counted

	closeOnce sync.Once
}

// Close closes the connection and frees its slot.
func (c *conn) Close() error {
	var err error
	c.closeOnce.Do(func() {
		c.l.mu.Lock()
		c.l.forgetLocked(c)
		c.l.mu.Unlock()
		err = c.Conn.Close()
	})
	return err
}

// SetDeadline, SetReadDeadline and SetWriteDeadline keep a reserve
// connection's deadline: net/http clears and sets deadlines per request,
// which would let a reserve connection stay.
func (c *conn) SetDeadline(t time.Time) error { return c.Conn.SetDeadline(c.clamp(t)) }

func (c *conn) SetReadDeadline(t time.Time) error { return c.Conn.SetReadDeadline(c.clamp(t)) }

func (c *conn) SetWriteDeadline(t time.Time) error { return c.Conn.SetWriteDeadline(c.clamp(t)) }

func (c *conn) clamp(t time.Time) time.Time {
	if c.reserved && (t.IsZero() || t.After(c.until)) {
		return c.until
	}
	return t
}

// SetWriteBuffer passes on to the socket (the event streams cap a
// connection's send buffer).
func (c *conn) SetWriteBuffer(n int) error {
	if s, ok := c.Conn.(interface{ SetWriteBuffer(int) error }); ok {
		return s.SetWriteBuffer(n)
	}
	return nil
}

// Write sends p, except that net/http's own plain-text 4xx answer (see
// rawError) goes out as a problem+json document.
func (c *conn) Write(p []byte) (int, error) {
	if c.l.cfg.Problem != nil {
		if q, ok := rewriteRawError(p, c.l.cfg.Problem); ok {
			if _, err := c.Conn.Write(q); err != nil {
				return 0, err
			}
			return len(p), nil
		}
	}
	return c.Conn.Write(p)
}

// NetConn is the connection beneath (for a caller that needs the socket).
func (c *conn) NetConn() net.Conn { return c.Conn }

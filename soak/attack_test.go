//go:build soak

package soak

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// The attacks of issue 25 that the mixed load carries beside its traffic:
// clients that open connections and leave them idle, and clients that
// send a body a byte every two seconds. The server must hold neither for
// good: the growth checks of TestMixedLoad see the descriptors and RSS
// they would pile up, and a slow body must be answered 408.

// attackers runs the attacks until ctx ends, then closes what they hold.
type attackers struct {
	addr string
	l    *mixed

	mu        sync.Mutex
	idle      []net.Conn // oldest first
	timeouts  int        // slow bodies answered 408
	evictions int        // idle connections the server closed
}

// idleRate is how many idle connections a second the attacker opens;
// idleCap how many it holds at most (it closes its oldest past that).
const (
	idleRate = 20
	idleCap  = 3000
)

func newAttackers(base string, l *mixed) *attackers {
	u, _ := url.Parse(base)
	return &attackers{addr: u.Host, l: l}
}

// run starts the idle-connection attacker and slow slow-body attackers
// and waits for ctx to end.
func (a *attackers) run(ctx context.Context, slow int) {
	var wg sync.WaitGroup
	wg.Add(1 + slow)
	go func() { defer wg.Done(); a.openIdle(ctx) }()
	for range slow {
		go func() { defer wg.Done(); a.slowBodies(ctx) }()
	}
	wg.Wait()
	a.mu.Lock()
	for _, c := range a.idle {
		_ = c.Close()
	}
	a.idle = nil
	a.mu.Unlock()
}

// openIdle opens idleRate connections a second, each with one GET
// /healthz on it, and leaves them idle.
func (a *attackers) openIdle(ctx context.Context) {
	tick := time.NewTicker(time.Second / idleRate)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		c, err := net.DialTimeout("tcp", a.addr, 5*time.Second)
		if err != nil {
			a.l.fail(ctx, "idle attacker: dial: %v", err)
			continue
		}
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", a.addr)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != http.StatusOK {
			a.l.fail(ctx, "idle attacker: GET /healthz: %v %v", err, resp)
			_ = c.Close()
			continue
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = c.SetDeadline(time.Time{})
		a.mu.Lock()
		a.idle = append(a.idle, c)
		if len(a.idle) > idleCap {
			_ = a.idle[0].Close()
			a.idle = a.idle[1:]
		}
		a.mu.Unlock()
	}
}

// slowBodies sends requests whose 100-byte body comes a byte every two
// seconds, one after the other: each must be answered 408 once the
// server's read timeout is over.
func (a *attackers) slowBodies(ctx context.Context) {
	for ctx.Err() == nil {
		a.l.count("slow_body")
		c, err := net.DialTimeout("tcp", a.addr, 5*time.Second)
		if err != nil {
			a.l.fail(ctx, "slow body: dial: %v", err)
			time.Sleep(time.Second)
			continue
		}
		fmt.Fprintf(c, "POST /agents/echo/run HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n", a.addr)
		answered := make(chan *http.Response, 1)
		go func() {
			_ = c.SetReadDeadline(time.Now().Add(2 * time.Minute))
			resp, _ := http.ReadResponse(bufio.NewReader(c), nil)
			answered <- resp
		}()
		var resp *http.Response
	send:
		for {
			select {
			case resp = <-answered:
				break send
			case <-ctx.Done():
				_ = c.Close()
				<-answered
				return
			case <-time.After(2 * time.Second):
				_, _ = c.Write([]byte(" "))
			}
		}
		_ = c.Close()
		if resp == nil || resp.StatusCode != http.StatusRequestTimeout ||
			!strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") {
			a.l.fail(ctx, "slow body: answer %v, want 408 problem+json", resp)
			continue
		}
		a.mu.Lock()
		a.timeouts++
		a.mu.Unlock()
	}
}

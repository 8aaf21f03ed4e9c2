package conns

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serve runs an http.Server over a bounded listener on 127.0.0.1 until
// the test ends.
func serve(t *testing.T, cfg Config, h http.Handler) *Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l, err := NewListener(ln, cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ConnState: l.ConnState, ConnContext: ConnContext, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close(); <-done })
	return l
}

// request sends a GET for path on a new connection and reads the answer,
// leaving the connection open (keep-alive).
func request(t *testing.T, l *Listener, path string) (net.Conn, *http.Response) {
	t.Helper()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = c.SetDeadline(time.Time{})
	return c, resp
}

func isClosed(c net.Conn, wait time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(wait))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	if Reserved(r) {
		w.Header().Set("X-Reserved", "1")
		w.Header().Set("Connection", "close")
	}
	_, _ = io.WriteString(w, "ok")
})

// TestEvictsOldestIdle: at the bound, a new connection closes the oldest
// idle one, not a newer one, and the count stays at the bound.
func TestEvictsOldestIdle(t *testing.T) {
	l := serve(t, Config{Max: 3, Reserve: -1}, ok)
	var cs []net.Conn
	for i := 0; i < 3; i++ {
		c, _ := request(t, l, "/")
		cs = append(cs, c)
		// net/http marks a connection idle after the client has its
		// answer: wait, so that the idle order is the test's.
		waitFor(t, "idle", func() bool { return l.Stats().Idle == i+1 })
	}
	c4, resp := request(t, l, "/")
	if resp.StatusCode != 200 {
		t.Fatalf("4th = %d", resp.StatusCode)
	}
	if !isClosed(cs[0], 2*time.Second) {
		t.Error("the oldest idle connection is open")
	}
	for i, c := range append(cs[1:], c4) {
		if isClosed(c, 50*time.Millisecond) {
			t.Errorf("connection %d was closed", i+1)
		}
	}
	if s := l.Stats(); s.Open != 3 || s.Evicted != 1 {
		t.Errorf("stats %+v, want 3 open, 1 evicted", s)
	}
}

// TestReserveAndWait: with every slot busy (no idle connection), the
// next connections take the reserve (their requests are Reserved), and
// past the reserve a connection waits until one closes.
func TestReserveAndWait(t *testing.T) {
	block := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(block) }) }
	t.Cleanup(unblock)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/block" {
			<-block
		}
		ok(w, r)
	})
	l := serve(t, Config{Max: 2, Reserve: 1, ReserveDeadline: time.Minute}, h)
	for i := 0; i < 2; i++ {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "GET /block HTTP/1.1\r\nHost: x\r\n\r\n")
	}
	waitFor(t, "2 open", func() bool { return l.Stats().Open == 2 })
	c, resp := request(t, l, "/")
	if resp.Header.Get("X-Reserved") != "1" {
		t.Fatal("the request past the bound was not on the reserve")
	}
	if !isClosed(c, 2*time.Second) {
		t.Error("the reserve connection stayed open after Connection: close")
	}
	waitFor(t, "reserve free", func() bool { return l.Stats().Reserve == 0 })

	// Reserve taken and held: the next connection waits.
	hold, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close()
	waitFor(t, "reserve taken", func() bool { return l.Stats().Reserve == 1 })
	waiting := make(chan *http.Response, 1)
	go func() {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			waiting <- nil
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, _ := http.ReadResponse(bufio.NewReader(c), nil)
		waiting <- resp
	}()
	waitFor(t, "an accept waiting", func() bool { return l.Stats().Waited == 1 })
	select {
	case <-waiting:
		t.Fatal("served past the bound and the reserve")
	case <-time.After(100 * time.Millisecond):
	}
	unblock() // the busy requests end; their connections idle and make room
	resp = <-waiting
	if resp == nil || resp.StatusCode != 200 {
		t.Fatalf("the waiting connection got %v", resp)
	}
}

// TestReserveDeadline: a reserve connection that sends nothing is closed
// after ReserveDeadline, whatever deadlines net/http sets.
func TestReserveDeadline(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-block })
	l := serve(t, Config{Max: 1, Reserve: 1, ReserveDeadline: 200 * time.Millisecond}, h)
	busy, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	fmt.Fprintf(busy, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	waitFor(t, "1 open", func() bool { return l.Stats().Open == 1 })
	silent, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	if !isClosed(silent, 3*time.Second) {
		t.Error("a silent reserve connection outlived ReserveDeadline")
	}
}

// TestCloseWakesAccept: closing the listener ends an Accept that waits
// for room.
func TestCloseWakesAccept(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l, _ := NewListener(ln, Config{Max: 1, Reserve: -1})
	first := make(chan net.Conn, 1)
	go func() {
		c, _ := l.Accept()
		first <- c
	}()
	c1, _ := net.Dial("tcp", ln.Addr().String())
	defer c1.Close()
	a1 := <-first
	defer a1.Close()
	errc := make(chan error, 1)
	go func() {
		_, err := l.Accept()
		errc <- err
	}()
	c2, _ := net.Dial("tcp", ln.Addr().String())
	defer c2.Close()
	time.Sleep(50 * time.Millisecond)
	_ = l.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("Accept after Close = %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Accept still waiting after Close")
	}
}

// TestRewriteRawError: net/http's own answer becomes a problem document;
// a handler's 4xx (it has a Date header) is left alone.
func TestRewriteRawError(t *testing.T) {
	problem := func(status int, detail string) []byte {
		return []byte(fmt.Sprintf(`{"status":%d,"detail":%q}`, status, detail))
	}
	raw := "HTTP/1.1 400 Bad Request: invalid URL escape \"%zz\"" + rawErrorHeaders + "400 Bad Request: invalid URL escape \"%zz\""
	got, ok := rewriteRawError([]byte(raw), problem)
	if !ok {
		t.Fatal("net/http's raw 400 was not rewritten")
	}
	resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(string(got))), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 400 || resp.Header.Get("Content-Type") != "application/problem+json" || !resp.Close ||
		string(body) != `{"status":400,"detail":"invalid URL escape \"%zz\""}` {
		t.Errorf("rewritten: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	for _, other := range []string{
		"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nDate: Sat, 28 Nov 2026 12:00:00 GMT\r\nConnection: close\r\n\r\nbad",
		"HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\nok",
		"HTTP/1.1 501 Not Implemented" + rawErrorHeaders + "Unsupported transfer encoding",
		"partial body bytes",
	} {
		if _, ok := rewriteRawError([]byte(other), problem); ok {
			t.Errorf("rewrote %q", other)
		}
	}
}

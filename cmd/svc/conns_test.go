package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"
)

// The holes an attack from outside found in svc serve's connection
// handling (issue 25 parts 1, 2 and 4): each test runs the real binary
// over real sockets.

// rawConn dials s and returns the connection with a reader over it.
func rawConn(t *testing.T, s *serveProc) (net.Conn, *bufio.Reader) {
	t.Helper()
	u, _ := url.Parse(s.url)
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, bufio.NewReader(c)
}

// rawRequest writes req on c and reads one answer.
func rawRequest(t *testing.T, c net.Conn, br *bufio.Reader, req string) (*http.Response, []byte) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	// A write may fail once the server has answered and closed (headers
	// too large): the answer is still there to read.
	_, werr := io.WriteString(c, req)
	resp, err := http.ReadResponse(br, nil)
	if err != nil && werr != nil {
		t.Fatalf("write: %v", werr)
	}
	if err != nil {
		t.Fatalf("reading the answer to %q: %v", firstLine(req), err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	return resp, body
}

func firstLine(s string) string { l, _, _ := strings.Cut(s, "\r\n"); return l }

// closedByServer reports whether the server closed c within limit (a read
// returns EOF or a reset), as opposed to c staying open.
func closedByServer(c net.Conn, limit time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(limit))
	_, err := c.Read(make([]byte, 1))
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return false
	}
	return err != nil
}

// problemOf decodes a problem+json answer, failing the test if it is not
// one.
func problemOf(t *testing.T, resp *http.Response, body []byte) map[string]any {
	t.Helper()
	if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("%d answer has Content-Type %q, want application/problem+json; body %q", resp.StatusCode, ct, body)
	}
	var p map[string]any
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("problem body %q: %v", body, err)
	}
	if int(p["status"].(float64)) != resp.StatusCode {
		t.Errorf("problem status %v, answer %d", p["status"], resp.StatusCode)
	}
	return p
}

// TestServeClosesIdleConnections: a keep-alive connection left idle is
// closed after --idle-timeout (before issue 25 it stayed open for good:
// 20,000 of them exhausted the descriptors).
func TestServeClosesIdleConnections(t *testing.T) {
	t.Parallel()
	s := startServe(t, nil, "--specs", exampleSpecs, "--idle-timeout", "1s")
	c, br := rawConn(t, s)
	resp, _ := rawRequest(t, c, br, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	if resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("GET /healthz = %d (close %v), want 200 on a kept-alive connection", resp.StatusCode, resp.Close)
	}
	if !closedByServer(c, 15*time.Second) {
		t.Fatal("an idle keep-alive connection is still open 15 s after --idle-timeout 1s")
	}
}

// TestServeReadTimeout: a request body that arrives a byte at a time, or
// stops short of its Content-Length, is answered 408 RequestTimeoutError
// after --read-timeout and its connection closed, instead of holding it.
// A request without a body, an event stream and a run that takes longer
// than the timeout after its body arrived are not cut.
func TestServeReadTimeout(t *testing.T) {
	t.Parallel()
	specs := writeSpecs(t, map[string]string{"agents/slow.yaml": "version: 1\nname: slow\nmodel: test:echo\nmodel_settings: {latency_ms: 2500}\n"})
	s := startServe(t, nil, "--specs", specs, "--read-timeout", "1s", "--sse-heartbeat", "200ms")

	t.Run("short body", func(t *testing.T) {
		t.Parallel()
		c, br := rawConn(t, s)
		start := time.Now()
		resp, body := rawRequest(t, c, br, "POST /agents/slow/run HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"input\":")
		if resp.StatusCode != http.StatusRequestTimeout || problemOf(t, resp, body)["error"] != "RequestTimeoutError" {
			t.Fatalf("a body short of its Content-Length = %d %s, want 408 RequestTimeoutError", resp.StatusCode, body)
		}
		if waited := time.Since(start); waited > 15*time.Second {
			t.Errorf("answered after %s", waited)
		}
		if !closedByServer(c, 10*time.Second) {
			t.Error("the connection stayed open after the 408")
		}
	})
	t.Run("a byte at a time", func(t *testing.T) {
		t.Parallel()
		c, br := rawConn(t, s)
		if _, err := io.WriteString(c, "POST /agents/slow/run HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 64\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() { // 1 byte every 300 ms: 64 bytes would take 19 s
			defer close(done)
			for {
				select {
				case <-stop:
					return
				case <-time.After(300 * time.Millisecond):
					if _, err := c.Write([]byte(" ")); err != nil {
						return
					}
				}
			}
		}()
		defer func() { close(stop); <-done }()
		_ = c.SetReadDeadline(time.Now().Add(15 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("no answer to a body sent a byte at a time: %v", err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusRequestTimeout || problemOf(t, resp, body)["error"] != "RequestTimeoutError" {
			t.Fatalf("a slow body = %d %s, want 408", resp.StatusCode, body)
		}
	})
	t.Run("a run longer than the timeout", func(t *testing.T) {
		t.Parallel()
		resp, body := do(t, context.Background(), http.MethodPost, s.url+"/agents/slow/run", `{"input":"x"}`, nil)
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"success":true`) {
			t.Fatalf("a 2.5 s run with --read-timeout 1s = %d %s, want 200 and success", resp.StatusCode, body)
		}
	})
	t.Run("event stream", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.url+"/events/stream", nil)
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		start := time.Now()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if time.Since(start) > 3*time.Second {
				return // still streaming three read timeouts later
			}
		}
		t.Fatalf("the event stream ended after %s (%v); --read-timeout must not apply to it", time.Since(start), sc.Err())
	})
}

// TestServeMaxConnections: past --max-connections, the oldest idle
// keep-alive connection is closed to make room, a health check still
// answers on the reserve while every slot is busy, any other request
// there is 503 OverloadedError, and the server's descriptors stay
// bounded.
func TestServeMaxConnections(t *testing.T) {
	t.Parallel()
	const max = 16
	s := startServe(t, nil, "--specs", exampleSpecs, "--max-connections", fmt.Sprint(max), "--read-timeout", "60s")
	baseFDs := openFiles(t, s.proc)

	// 3×max connections, each idle after one request: the first ones are
	// closed to make room for the later ones.
	var idle []net.Conn
	for i := 0; i < 3*max; i++ {
		c, br := rawConn(t, s)
		if resp, _ := rawRequest(t, c, br, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); resp.StatusCode != http.StatusOK {
			t.Fatalf("connection %d: GET /healthz = %d", i, resp.StatusCode)
		}
		idle = append(idle, c)
	}
	if !closedByServer(idle[0], 5*time.Second) {
		t.Error("the oldest idle connection is still open with 3× --max-connections opened after it")
	}
	if closedByServer(idle[len(idle)-1], 200*time.Millisecond) {
		t.Error("the newest idle connection was closed")
	}
	if fds := openFiles(t, s.proc); fds > baseFDs+max+4 {
		t.Errorf("%d descriptors open with %d connections made, at most %d allowed (%d before)", fds, 3*max, max, baseFDs)
	}

	// Every slot busy: max requests whose bodies never come.
	for i := 0; i < max; i++ {
		c, _ := rawConn(t, s)
		if _, err := io.WriteString(c, "POST /agents/echo/run HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 50\r\n\r\n{"); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(300 * time.Millisecond) // let the server take them
	c, br := rawConn(t, s)
	start := time.Now()
	resp, _ := rawRequest(t, c, br, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /healthz with every slot busy = %d, want 200 on the reserve", resp.StatusCode)
	}
	t.Logf("GET /healthz with every connection slot busy answered in %s", time.Since(start))
	c, br = rawConn(t, s)
	resp, body := rawRequest(t, c, br, "GET /agents HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	if resp.StatusCode != http.StatusServiceUnavailable || problemOf(t, resp, body)["error"] != "OverloadedError" || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("GET /agents with every slot busy = %d %v %s, want 503 OverloadedError with Retry-After", resp.StatusCode, resp.Header, body)
	}
}

// openFiles counts the descriptors p holds.
func openFiles(t *testing.T, p *proc) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p.cmd.Process.Pid))
	if err != nil {
		t.Skipf("counting descriptors: %v", err)
	}
	return len(ents)
}

// TestServeHostCheck: on loopback without a token the server answers only
// requests for its own hosts: a page whose name was rebound to 127.0.0.1
// gets 421 MisdirectedRequestError; --allowed-hosts adds names; with a
// token the Host is not checked (the token is the check).
func TestServeHostCheck(t *testing.T) {
	t.Parallel()
	open := startServe(t, nil, "--specs", exampleSpecs)
	listed := startServe(t, nil, "--specs", exampleSpecs, "--allowed-hosts", "svc.internal")
	token := startServe(t, nil, "--specs", exampleSpecs, "--auth-token", "s3cret")
	for _, tc := range []struct {
		s      *serveProc
		host   string
		header map[string]string
		want   int
	}{
		{open, "evil.example", nil, http.StatusMisdirectedRequest},
		{open, "evil.example:8420", nil, http.StatusMisdirectedRequest},
		{open, "localhost", nil, http.StatusOK},
		{open, "LOCALHOST:1", nil, http.StatusOK},
		{open, "127.0.0.1", nil, http.StatusOK},
		{open, "[::1]:8420", nil, http.StatusOK},
		{listed, "svc.internal:8420", nil, http.StatusOK},
		{listed, "evil.example", nil, http.StatusMisdirectedRequest},
		{token, "evil.example", map[string]string{"Authorization": "Bearer s3cret"}, http.StatusOK},
	} {
		for _, path := range []string{"/agents", "/healthz"} {
			req, _ := http.NewRequest(http.MethodGet, tc.s.url+path, nil)
			req.Host = tc.host
			for k, v := range tc.header {
				req.Header.Set(k, v)
			}
			resp, err := httpClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("GET %s with Host %q = %d %s, want %d", path, tc.host, resp.StatusCode, body, tc.want)
			} else if tc.want == http.StatusMisdirectedRequest && problemOf(t, resp, body)["error"] != "MisdirectedRequestError" {
				t.Errorf("Host %q: %s, want a MisdirectedRequestError", tc.host, body)
			}
		}
	}
	r := svcExec(t, nil, "", "serve", "--specs", exampleSpecs, "--allowed-hosts", "http://x.example/", "--port", "0", "--data-dir", t.TempDir())
	if r.code != 2 || !strings.Contains(r.stderr, "--allowed-hosts") {
		t.Errorf("--allowed-hosts with a URL: exit %d, stderr %q; want 2 naming the flag", r.code, r.stderr)
	}
}

// TestServeRawErrorsAreProblems: what net/http answers by itself, before
// any handler (an invalid % escape in the path, a malformed request,
// headers too large), is a problem+json document like every other 4xx.
func TestServeRawErrorsAreProblems(t *testing.T) {
	t.Parallel()
	s := startServe(t, nil, "--specs", exampleSpecs)
	for _, tc := range []struct {
		name, req string
		status    int
		kind      string
	}{
		{"invalid escape", "GET /agents/%zz/schema HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 400, "BadRequestError"},
		{"malformed request line", "GARBAGE\r\n\r\n", 400, "BadRequestError"},
		{"malformed header", "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nNo colon here\r\n\r\n", 400, "BadRequestError"},
		{"headers too large", "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + strings.Repeat("a", 1<<21) + "\r\n\r\n", 431, "HeaderTooLargeError"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, br := rawConn(t, s)
			resp, body := rawRequest(t, c, br, tc.req)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d %s, want %d", resp.StatusCode, body, tc.status)
			}
			if p := problemOf(t, resp, body); p["error"] != tc.kind || p["detail"] == "" {
				t.Errorf("problem %v, want error %s with a detail", p, tc.kind)
			}
		})
	}
}

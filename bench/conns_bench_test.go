package bench

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The attacks of issue 25 part 1, measured from outside against the real
// binary with its default flags (SVC_BENCH_BIN: another build, e.g. the
// one before the fix): clients that hold connections idle, and clients
// that send a body a byte every two seconds. Figures in RELIABILITY.md.

// BenchmarkIdleConnections opens SVC_BENCH_IDLE_CONNS (default 20,000)
// connections to svc serve, each idle after one GET /healthz, and while
// they are held probes /healthz on fresh connections: its p50 and p99,
// how many probes failed (no answer within 2 s), the server's RSS and
// descriptors, and how many of the idle connections the server still
// holds. The server starts with the descriptor limit this process has
// (20,000 on the project's machines); the client then raises its own.
func BenchmarkIdleConnections(b *testing.B) {
	n := 20000
	if v := os.Getenv("SVC_BENCH_IDLE_CONNS"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	for range b.N {
		s := startServe(b)
		u, _ := url.Parse(s.url)
		raiseFileLimit(b, uint64(n)+4096)
		pid := s.cmd.Process.Pid
		rss0 := procRSS(pid)

		var held []net.Conn
		failed, streak := 0, 0
		start := time.Now()
		for i := 0; i < n && streak < 100; i++ {
			c, err := idleConn(u.Host)
			if err != nil {
				failed++
				streak++
				continue
			}
			streak = 0
			held = append(held, c)
		}
		opened := time.Since(start)
		open := 0
		for _, c := range held {
			_ = c.SetReadDeadline(time.Now().Add(time.Millisecond))
			if _, err := c.Read(make([]byte, 1)); err != nil {
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					open++
				}
			}
		}
		lat, probeFails := probeHealth(u.Host, 200, 2*time.Second)
		rss, fds := procRSS(pid), procFDs(pid)
		for _, c := range held {
			_ = c.Close()
		}
		b.Logf("%d connections opened in %s (%d failed), %d still open on the client's side; /healthz p50 %.1f ms p99 %.1f ms, %d of 200 probes failed; server RSS %.0f → %.0f MiB, %d descriptors",
			len(held), opened.Round(time.Millisecond), failed, open, quantile(lat, 0.5), quantile(lat, 0.99), probeFails, rss0/(1<<20), rss/(1<<20), fds)
		b.ReportMetric(float64(len(held)), "conns_opened")
		b.ReportMetric(float64(open), "conns_open")
		b.ReportMetric(quantile(lat, 0.99), "healthz_p99_ms")
		b.ReportMetric(float64(probeFails), "healthz_failed")
		b.ReportMetric(rss/(1<<20), "svc_rss_MiB")
		b.ReportMetric(float64(fds), "svc_fds")
		s.stop()
	}
}

// BenchmarkSlowBodies starts SVC_BENCH_SLOW_BODIES (default 300) requests
// whose 100-byte bodies come a byte every 2 s, and counts after 60 s
// (SVC_BENCH_SLOW_WAIT) how many the server still holds open, and how many
// it answered 408.
func BenchmarkSlowBodies(b *testing.B) {
	n := 300
	if v := os.Getenv("SVC_BENCH_SLOW_BODIES"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	wait := 60 * time.Second
	if v := os.Getenv("SVC_BENCH_SLOW_WAIT"); v != "" {
		wait, _ = time.ParseDuration(v)
	}
	for range b.N {
		s := startServe(b)
		u, _ := url.Parse(s.url)
		var mu sync.Mutex
		timeouts, closed := 0, 0
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for range n {
			c, err := net.Dial("tcp", u.Host)
			if err != nil {
				b.Fatal(err)
			}
			fmt.Fprintf(c, "POST /agents/echo/run HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n", u.Host)
			wg.Add(2)
			answered := make(chan struct{})
			go func() { // the answer, or the server closing
				defer wg.Done()
				defer close(answered)
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				mu.Lock()
				defer mu.Unlock()
				if err == nil && resp.StatusCode == http.StatusRequestTimeout {
					timeouts++
				}
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					_, err = c.Read(make([]byte, 1))
				}
				if err != nil {
					closed++
				}
			}()
			go func() { // a byte every 2 s
				defer wg.Done()
				defer c.Close()
				for {
					select {
					case <-stop:
						return
					case <-answered:
						return
					case <-time.After(2 * time.Second):
						_, _ = c.Write([]byte(" "))
					}
				}
			}()
		}
		time.Sleep(wait)
		mu.Lock()
		held := n - closed
		t408 := timeouts
		mu.Unlock()
		close(stop)
		wg.Wait()
		b.Logf("%d slow bodies: after %s the server holds %d open and answered %d with 408; RSS %.0f MiB", n, wait, held, t408, procRSS(s.cmd.Process.Pid)/(1<<20))
		b.ReportMetric(float64(held), "held_open")
		b.ReportMetric(float64(t408), "answered_408")
		s.stop()
	}
}

// idleConn opens a connection, sends GET /healthz and reads the answer
// (2 s at most), leaving the connection open and idle.
func idleConn(addr string) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

// probeHealth sends n GET /healthz on fresh connections, 20 ms apart, and
// returns the latencies of those answered 200 within limit and the count
// of the others.
func probeHealth(addr string, n int, limit time.Duration) ([]time.Duration, int) {
	c := &http.Client{Timeout: limit, Transport: &http.Transport{DisableKeepAlives: true}}
	var lat []time.Duration
	failed := 0
	for range n {
		t0 := time.Now()
		resp, err := c.Get("http://" + addr + "/healthz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				lat = append(lat, time.Since(t0))
			} else {
				failed++
			}
		} else {
			failed++
		}
		time.Sleep(20 * time.Millisecond)
	}
	return lat, failed
}

// raiseFileLimit raises this process's descriptor limit to at least n
// (root may raise the hard limit too).
func raiseFileLimit(b *testing.B, n uint64) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		b.Fatal(err)
	}
	if l.Cur >= n {
		return
	}
	l.Cur = n
	if l.Max < n {
		l.Max = n
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		b.Logf("raising the descriptor limit to %d: %v (the client may run out first)", n, err)
	}
}

// procRSS is the resident set size of process pid in bytes (VmRSS).
func procRSS(pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb * 1024
		}
	}
	return 0
}

// procFDs is the number of descriptors process pid holds.
func procFDs(pid int) int {
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(ents)
}

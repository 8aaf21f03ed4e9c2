package bench

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
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
// holds. The connections are held by two processes of their own (this
// test binary, holdIdleEnv), so that neither runs out of descriptors
// before the server does (20,000 each on the project's machines, and
// only root with CAP_SYS_RESOURCE may raise it).
func BenchmarkIdleConnections(b *testing.B) {
	n := 20000
	if v := os.Getenv("SVC_BENCH_IDLE_CONNS"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	for range b.N {
		s := startServe(b)
		u, _ := url.Parse(s.url)
		pid := s.cmd.Process.Pid
		rss0 := procRSS(pid)
		start := time.Now()
		holders := []*holder{startHolder(b, u.Host, n/2), startHolder(b, u.Host, n-n/2)}
		opened, failed := 0, 0
		for _, h := range holders {
			var o, f int
			if _, err := fmt.Sscanf(h.line(b), "opened %d failed %d", &o, &f); err != nil {
				b.Fatal(err)
			}
			opened, failed = opened+o, failed+f
		}
		took := time.Since(start)
		lat, probeFails := probeHealth(u.Host, 200, 2*time.Second)
		rss, fds := procRSS(pid), procFDs(pid)
		open := 0
		for _, h := range holders {
			var o int
			fmt.Fprintln(h.in, "check")
			if _, err := fmt.Sscanf(h.line(b), "open %d", &o); err != nil {
				b.Fatal(err)
			}
			open += o
			h.stop()
		}
		b.Logf("%d connections opened in %s (%d failed), %d of them still open; /healthz p50 %.1f ms p99 %.1f ms, %d of 200 probes failed; server RSS %.0f → %.0f MiB, %d descriptors",
			opened, took.Round(time.Millisecond), failed, open, quantile(lat, 0.5), quantile(lat, 0.99), probeFails, rss0/(1<<20), rss/(1<<20), fds)
		b.ReportMetric(float64(opened), "conns_opened")
		b.ReportMetric(float64(open), "conns_open")
		b.ReportMetric(quantile(lat, 0.99), "healthz_p99_ms")
		b.ReportMetric(float64(probeFails), "healthz_failed")
		b.ReportMetric(rss/(1<<20), "svc_rss_MiB")
		b.ReportMetric(float64(fds), "svc_fds")
		s.stop()
	}
}

// holdIdleEnv, set to "ADDR N" in the environment of this test binary,
// makes TestMain hold N idle connections to ADDR (holdIdle) instead of
// running tests.
const holdIdleEnv = "SVC_BENCH_HOLD_IDLE"

// holdIdle opens n idle connections to addr (idleConn; it stops after
// 100 failures in a row), prints "opened K failed F", then answers each
// line "check" on stdin with "open K", the connections the server has not
// closed; it exits when stdin closes.
func holdIdle(spec string) {
	var addr string
	var n int
	if _, err := fmt.Sscanf(spec, "%s %d", &addr, &n); err != nil {
		fmt.Fprintln(os.Stderr, holdIdleEnv, err)
		os.Exit(2)
	}
	var held []net.Conn
	failed, streak := 0, 0
	for i := 0; i < n && streak < 100; i++ {
		c, err := idleConn(addr)
		if err != nil {
			failed, streak = failed+1, streak+1
			continue
		}
		streak = 0
		held = append(held, c)
	}
	fmt.Printf("opened %d failed %d\n", len(held), failed)
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		open := 0
		for _, c := range held {
			_ = c.SetReadDeadline(time.Now().Add(time.Millisecond))
			_, err := c.Read(make([]byte, 1))
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				open++
			}
		}
		fmt.Printf("open %d\n", open)
	}
	os.Exit(0)
}

// holder is a holdIdle process.
type holder struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

func startHolder(b *testing.B, addr string, n int) *holder {
	b.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d", holdIdleEnv, addr, n))
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	h := &holder{cmd: cmd, in: in, out: bufio.NewScanner(out)}
	b.Cleanup(h.stop)
	return h
}

func (h *holder) line(b *testing.B) string {
	if !h.out.Scan() {
		b.Fatalf("holder process ended: %v", h.out.Err())
	}
	return h.out.Text()
}

func (h *holder) stop() {
	_ = h.in.Close()
	_ = h.cmd.Wait()
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

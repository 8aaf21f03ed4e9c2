package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/svc-dev/svc/app"
)

// stalledStreams opens n GET /events/stream connections to addr that read
// the response's status line and then never read again, with a small
// receive buffer so that the server's writes back up soon.
func stalledStreams(b testing.TB, addr string, n int) []net.Conn {
	conns := make([]net.Conn, 0, n)
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			closeConns(conns)
			b.Fatal(err)
		}
		_ = c.(*net.TCPConn).SetReadBuffer(4096)
		conns = append(conns, c)
		if _, err := fmt.Fprintf(c, "GET /events/stream HTTP/1.1\r\nHost: %s\r\n\r\n", addr); err != nil {
			closeConns(conns)
			b.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		line, err := bufio.NewReaderSize(c, 16).ReadString('\n')
		if err != nil || !strings.Contains(line, " 200 ") {
			closeConns(conns)
			b.Fatalf("GET /events/stream: %q, %v", line, err)
		}
	}
	return conns
}

func closeConns(conns []net.Conn) {
	for _, c := range conns {
		_ = c.Close()
	}
}

// cutOff counts the connections the server has closed: reading what is
// buffered ends in EOF or a reset rather than a timeout.
func cutOff(conns []net.Conn) int {
	n := 0
	buf := make([]byte, 64<<10)
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		for {
			_, err := c.Read(buf)
			if err == nil {
				continue
			}
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				n++
			}
			break
		}
	}
	return n
}

// loadFor posts test:echo runs to url from clients keep-alive clients for
// d and returns the requests per second. A request that fails or takes
// more than 10 s fails the benchmark.
func loadFor(b testing.TB, url string, d time.Duration, clients int) float64 {
	tr := &http.Transport{MaxIdleConnsPerHost: clients}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	body := []byte(`{"input":{"text":"hello world"},"request_id":"bench"}`)
	var done atomic.Int64
	var g errgroup.Group
	start := time.Now()
	stop := start.Add(d)
	for range clients {
		g.Go(func() error {
			for time.Now().Before(stop) {
				resp, err := c.Post(url, "application/json", bytes.NewReader(body))
				if err != nil {
					return err
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					return fmt.Errorf("status %d", resp.StatusCode)
				}
				done.Add(1)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	return float64(done.Load()) / time.Since(start).Seconds()
}

// BenchmarkSSESlowSubscribers is issue 13's slow-subscriber case: the
// requests/s of POST /agents/echo/run against an `svc serve` process
// (app.New, a real listener, the SSE emitter in the chain, the default
// 10 s stream write timeout) with 500 GET /events/stream clients that
// never read, against the same process before they connect (baseline,
// same run). Each phase lasts 15 s, so the slow one spans the stalled
// clients' write deadline. A subscriber that cannot keep up must cost a
// bounded queue and then its connection, never the other clients'
// throughput; slow_cut_off is how many of the 500 the server had
// disconnected by the end.
func BenchmarkSSESlowSubscribers(b *testing.B) {
	const phase, clients, slow = 15 * time.Second, 32, 500
	a, err := app.New(app.Options{SpecsDir: "../examples/specs", DataDir: b.TempDir(), Store: "memory", Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	if err := a.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = a.Shutdown(ctx)
	}()
	addr := a.Addr().String()
	url := "http://" + addr + "/agents/echo/run"
	var baseRate, slowRate float64
	cut := 0
	for i := 0; i < b.N; i++ {
		baseRate += loadFor(b, url, phase, clients)
		conns := stalledStreams(b, addr, slow)
		slowRate += loadFor(b, url, phase, clients)
		cut += cutOff(conns)
		closeConns(conns)
	}
	b.ReportMetric(baseRate/float64(b.N), "baseline_req/s")
	b.ReportMetric(slowRate/float64(b.N), "slow500_req/s")
	b.ReportMetric(slowRate/baseRate, "ratio")
	b.ReportMetric(float64(cut)/float64(b.N), "slow_cut_off")
}

// BenchmarkAppMetrics is issue 13's --metrics cost: the requests/s of
// POST /agents/echo/run against an `svc serve` process (app.New, a real
// listener) with Metrics on and off, 10 s each in the same run, and the
// live heap the metered process holds after its load and a GC, above
// where it started (heap_growth_MB; about 6 KB a request stayed live
// before the fix).
func BenchmarkAppMetrics(b *testing.B) {
	const phase, clients = 10 * time.Second, 32
	rate := map[bool]float64{}
	var growth float64
	for i := 0; i < b.N; i++ {
		for _, metrics := range []bool{false, true} {
			a, err := app.New(app.Options{SpecsDir: "../examples/specs", DataDir: b.TempDir(), Metrics: metrics, Logger: zap.NewNop()})
			if err != nil {
				b.Fatal(err)
			}
			if err := a.Start(); err != nil {
				b.Fatal(err)
			}
			url := a.URL() + "/agents/echo/run"
			loadFor(b, url, time.Second, clients)
			before := inuse()
			rate[metrics] += loadFor(b, url, phase, clients)
			if metrics {
				growth += (float64(inuse()) - float64(before)) / (1 << 20)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_ = a.Shutdown(ctx)
			cancel()
		}
	}
	b.ReportMetric(rate[false]/float64(b.N), "plain_req/s")
	b.ReportMetric(rate[true]/float64(b.N), "metrics_req/s")
	b.ReportMetric(rate[true]/rate[false], "ratio")
	b.ReportMetric(growth/float64(b.N), "heap_growth_MB")
}

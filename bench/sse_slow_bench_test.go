package bench

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/app"
)

// stalledStreams opens n GET /events/stream connections to addr that
// read the response headers and then never read again, with a small
// receive buffer so that the server's writes back up soon. It returns a
// func that closes them.
func stalledStreams(b *testing.B, addr string, n int) func() {
	conns := make([]net.Conn, 0, n)
	closeAll := func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			closeAll()
			b.Fatal(err)
		}
		_ = c.(*net.TCPConn).SetReadBuffer(4096)
		conns = append(conns, c)
		if _, err := fmt.Fprintf(c, "GET /events/stream HTTP/1.1\r\nHost: %s\r\n\r\n", addr); err != nil {
			closeAll()
			b.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil || !strings.Contains(line, " 200 ") {
			closeAll()
			b.Fatalf("GET /events/stream: %q, %v", line, err)
		}
	}
	return closeAll
}

// BenchmarkSSESlowSubscribers is issue 13's slow-subscriber case: the
// requests/s of POST /agents/echo/run against an `svc serve` process
// (app.New, a real listener, the SSE emitter in the chain) with 500
// GET /events/stream clients that never read, against the same process
// before they connect (baseline, same run). A subscriber that cannot keep
// up must cost a bounded queue and then its connection, never the other
// clients' throughput. slow_disconnected is how many of the 500 the
// server cut off by the end.
func BenchmarkSSESlowSubscribers(b *testing.B) {
	const requests, clients, slow = 20_000, 32, 500
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
	var baseRate, slowRate float64
	for i := 0; i < b.N; i++ {
		baseRate += loadAt(b, addr, requests, clients)
		closeSlow := stalledStreams(b, addr, slow)
		slowRate += loadAt(b, addr, requests, clients)
		closeSlow()
	}
	b.ReportMetric(baseRate/float64(b.N), "baseline_req/s")
	b.ReportMetric(slowRate/float64(b.N), "slow500_req/s")
	b.ReportMetric(slowRate/baseRate, "ratio")
}

// loadAt is load against a server already listening at addr.
func loadAt(b *testing.B, addr string, requests, clients int) float64 {
	tr := &http.Transport{MaxIdleConnsPerHost: clients}
	defer tr.CloseIdleConnections()
	return loadURL(b, "http://"+addr+"/agents/echo/run", requests, clients, &http.Client{Transport: tr, Timeout: 30 * time.Second})
}

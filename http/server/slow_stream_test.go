package server_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/emitters/sse"
	"github.com/svc-dev/svc/http/internal/runstest"
	"github.com/svc-dev/svc/http/server"
	"github.com/svc-dev/svc/internal/testutil"
)

// stalledStream opens GET /events/stream on addr, reads the status line
// and never reads again, with a small receive buffer.
func stalledStream(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.(*net.TCPConn).SetReadBuffer(4096)
	if _, err := fmt.Fprintf(c, "GET /events/stream HTTP/1.1\r\nHost: %s\r\n\r\n", addr); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	line, err := bufio.NewReaderSize(c, 16).ReadString('\n')
	if err != nil || !strings.Contains(line, " 200 ") {
		t.Fatalf("GET /events/stream: %q, %v", line, err)
	}
	return c
}

// A GET /events/stream client that stops reading costs a bounded queue
// and the write timeout, then it is disconnected, counted (the emitter's
// SlowDisconnects and svc.sse.slow_disconnects) and logged; a client that
// reads keeps its stream, and run requests keep being answered (issue 13).
func TestEventStreamSlowSubscriberDisconnected(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	e, err := sse.New(nil, sse.Config{HeartbeatInterval: time.Hour, QueueSize: 64, MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	rt, err := server.NewRouter(&fakeBackend{}, server.WithSSEEmitter(e), server.WithStreamWriteTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &httptest.Server{Listener: l, Config: &http.Server{Handler: rt, ConnContext: server.ConnContext}}
	srv.Start()
	t.Cleanup(srv.Close)

	stalled := stalledStream(t, l.Addr().String())
	live := openEventStream(t, streamCtx(t), srv, "")
	testutil.Eventually(t, "both subscribers running", func() bool { return e.Subscribers() == 2 })

	// The reading client reads everything, and notes the marker events
	// emitted once the stalled one is gone.
	var markers atomic.Int64
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		for {
			line, err := live.br.ReadString('\n')
			if err != nil {
				return
			}
			if strings.HasPrefix(line, "data: ") && strings.Contains(line, `"task_id":"marker"`) {
				markers.Add(1)
			}
		}
	}()

	// Events big enough to fill the stalled connection's buffers soon.
	big := eventOf(svc.EventAgentCompleted, "echo", "flood")
	big.Payload = svc.Payload{"output": strings.Repeat("x", 4096)}
	stop := make(chan struct{})
	flooded := make(chan struct{})
	go func() {
		defer close(flooded)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			e.Emit(big)
			if i%16 == 0 {
				time.Sleep(time.Millisecond)
			}
		}
	}()
	testutil.Eventually(t, "the stalled subscriber disconnected", func() bool {
		return e.SlowDisconnects() == 1 && e.Subscribers() == 1
	})
	close(stop)
	<-flooded

	// The stalled client sees its connection end (reset or closed), not a
	// stream that just went quiet.
	buf := make([]byte, 64<<10)
	_ = stalled.SetReadDeadline(time.Now().Add(20 * time.Second))
	for {
		_, err := stalled.Read(buf)
		if err == nil {
			continue
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatal("the stalled client's connection is still open after its disconnect")
		}
		break
	}

	// The reading client still gets events, and runs are still answered.
	testutil.Eventually(t, "the reading client gets events after the disconnect", func() bool {
		e.Emit(eventOf(svc.EventAgentCompleted, "echo", "marker"))
		time.Sleep(10 * time.Millisecond)
		return markers.Load() > 0
	})
	if r := do(t, srv, http.MethodPost, "/agents/echo/run", `{"input":{"text":"hi"}}`); r.status != http.StatusOK {
		t.Fatalf("POST /agents/echo/run = %d %s", r.status, r.body)
	}
	if e.SlowDisconnects() != 1 {
		t.Errorf("SlowDisconnects = %d, want 1: only the stalled client", e.SlowDisconnects())
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var got int64 = -1
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == sse.MetricSlowDisconnects {
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					got = dp.Value
				}
			}
		}
	}
	if got != 1 {
		t.Errorf("%s = %d, want 1", sse.MetricSlowDisconnects, got)
	}
	_ = live.resp.Body.Close()
	<-readDone
}

// floodRuns is a run backend whose run streams send big events as fast as
// they are taken, until the stream ends.
type floodRuns struct {
	*runstest.Runs
}

func (f floodRuns) RunEvents(ctx context.Context, id string, after int64) (<-chan svc.RunEvent, error) {
	ch := make(chan svc.RunEvent)
	go func() {
		defer close(ch)
		big := strings.Repeat("x", 4096)
		for seq := after + 1; ; seq++ {
			select {
			case ch <- svc.RunEvent{Seq: seq, Type: svc.RunAgentFailed, RunID: id, Error: big}:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch, nil
}

// A GET /runs/{id}/stream client that stops reading is disconnected after
// the write timeout and counted in svc.http.run_stream.slow_disconnects
// (issue 13: run streams were cut off but not counted).
func TestRunStreamSlowClientCounted(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	b := floodRuns{runstest.New(t, &fakeBackend{})}
	rt, err := server.NewRouter(b, server.WithStreamWriteTimeout(time.Second), server.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &httptest.Server{Listener: l, Config: &http.Server{Handler: rt, ConnContext: server.ConnContext}}
	srv.Start()
	t.Cleanup(srv.Close)

	addr := l.Addr().String()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.(*net.TCPConn).SetReadBuffer(4096)
	if _, err := fmt.Fprintf(c, "GET /runs/r1/stream HTTP/1.1\r\nHost: %s\r\n\r\n", addr); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	if line, err := bufio.NewReaderSize(c, 16).ReadString('\n'); err != nil || !strings.Contains(line, " 200 ") {
		t.Fatalf("GET /runs/r1/stream: %q, %v", line, err)
	}

	counted := func() int64 {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if m.Name == server.MetricRunStreamSlowDisconnects {
					for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
						return dp.Value
					}
				}
			}
		}
		return 0
	}
	testutil.Eventually(t, "the stalled run stream counted", func() bool { return counted() == 1 })

	// The client sees its connection end.
	buf := make([]byte, 64<<10)
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	for {
		_, err := c.Read(buf)
		if err == nil {
			continue
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatal("the stalled client's connection is still open after its disconnect")
		}
		break
	}
	if n := counted(); n != 1 {
		t.Errorf("%s = %d, want 1", server.MetricRunStreamSlowDisconnects, n)
	}
}

func TestWithMeterProviderNil(t *testing.T) {
	if _, err := server.NewRouter(&fakeBackend{}, server.WithMeterProvider(nil)); err == nil {
		t.Error("WithMeterProvider(nil) accepted")
	}
}

// A GET /events/stream client whose queue stays full for the emitter's
// StallTimeout is cut off then, counted and its connection ended, without
// waiting for the (here one hour) write timeout: a stalled subscriber
// holds its queue for StallTimeout, not for the write timeout (issue 13).
func TestEventStreamStalledCutOffBeforeWriteTimeout(t *testing.T) {
	e, err := sse.New(nil, sse.Config{HeartbeatInterval: time.Hour, QueueSize: 16, StallTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	rt, err := server.NewRouter(&fakeBackend{}, server.WithSSEEmitter(e), server.WithStreamWriteTimeout(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &httptest.Server{Listener: l, Config: &http.Server{Handler: rt, ConnContext: server.ConnContext}}
	srv.Start()
	t.Cleanup(srv.Close)

	stalled := stalledStream(t, l.Addr().String())
	testutil.Eventually(t, "the subscriber running", func() bool { return e.Subscribers() == 1 })
	big := eventOf(svc.EventAgentCompleted, "echo", "flood")
	big.Payload = svc.Payload{"output": strings.Repeat("x", 4096)}
	testutil.Eventually(t, "the stalled subscriber cut off", func() bool {
		for range 8 {
			e.Emit(big)
		}
		time.Sleep(5 * time.Millisecond)
		return e.SlowDisconnects() == 1 && e.Subscribers() == 0
	})
	buf := make([]byte, 64<<10)
	_ = stalled.SetReadDeadline(time.Now().Add(20 * time.Second))
	for {
		_, err := stalled.Read(buf)
		if err == nil {
			continue
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatal("the stalled client's connection is still open after its disconnect")
		}
		break
	}
}

package server_test

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/emitters/sse"
	"github.com/svc-dev/svc/http/server"
)

// BenchmarkEventStreamFanout is the server's cost of one event delivered
// to 100 GET /events/stream subscribers over loopback HTTP (issue 15 part
// 5): the fan-out, each stream's frame and its write and flush, and the
// readers. ns/op is per event (for all 100 streams); ns/frame per
// subscriber. The events are emitted in bursts of 64 and each burst read
// by every subscriber before the next, so that none is dropped.
//
//	go test -run '^$' -bench EventStreamFanout -benchtime 2000x ./http/server/
func BenchmarkEventStreamFanout(b *testing.B) {
	const streams, burst = 100, 64
	e, err := sse.New(nil, sse.Config{HeartbeatInterval: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = e.Close() }()
	rt, err := server.NewRouter(&fakeBackend{}, server.WithSSEEmitter(e))
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(rt)
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var read atomic.Int64 // frames read by all streams
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for range streams {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/events/stream", nil)
		if err != nil {
			b.Fatal(err)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer resp.Body.Close()
			br := bufio.NewReaderSize(resp.Body, 64<<10)
			for {
				line, err := br.ReadSlice('\n')
				if err != nil {
					return
				}
				if bytes.HasPrefix(line, []byte("id: ")) {
					read.Add(1)
				}
			}
		}()
	}
	for e.Subscribers() < streams {
		time.Sleep(time.Millisecond)
	}
	ev := eventOf(svc.EventAgentCompleted, "echo", "0193a3b4-0000-7000-8000-000000000001")
	b.ReportAllocs()
	b.ResetTimer()
	for sent := 0; sent < b.N; {
		n := min(burst, b.N-sent)
		for range n {
			e.Emit(ev)
		}
		sent += n
		deadline := time.Now().Add(30 * time.Second)
		for read.Load() < int64(sent*streams) {
			if time.Now().After(deadline) {
				b.Fatalf("%d of %d frames read", read.Load(), sent*streams)
			}
			time.Sleep(50 * time.Microsecond)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*streams), "ns/frame")
}

package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/emitters/emittertest"
	"github.com/svc-dev/svc/emitters/sse"
	"github.com/svc-dev/svc/http/server"
	"github.com/svc-dev/svc/internal/testutil"
)

// newSSE builds an SSE emitter, closed when the test ends.
func newSSE(t *testing.T, heartbeat time.Duration) *sse.Emitter {
	t.Helper()
	e, err := sse.New(nil, sse.Config{HeartbeatInterval: heartbeat})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// esFrame is one frame of GET /events/stream as read off the wire.
type esFrame struct {
	id, event, data string
	comments        []string
}

// esStream is an open GET /events/stream.
type esStream struct {
	resp *http.Response
	br   *bufio.Reader
}

func openEventStream(t *testing.T, ctx context.Context, srv *httptest.Server, query string) *esStream {
	t.Helper()
	path := srv.URL + "/events/stream"
	if query != "" {
		path += "?" + query
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("GET /events/stream?%s = %d %q", query, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	return &esStream{resp: resp, br: bufio.NewReader(resp.Body)}
}

// next reads one frame; ok is false at the end of the stream. A read that
// hangs is ended by the test's deadline on the request context.
func (s *esStream) next(t *testing.T) (f esFrame, ok bool) {
	t.Helper()
	lines := 0
	for {
		line, err := s.br.ReadString('\n')
		if err != nil {
			if line != "" || lines != 0 {
				t.Fatalf("stream ended inside a frame: %q", line)
			}
			return f, false
		}
		line = strings.TrimSuffix(line, "\n")
		if line == "" {
			return f, true
		}
		lines++
		switch {
		case strings.HasPrefix(line, ": "):
			f.comments = append(f.comments, line[2:])
		case strings.HasPrefix(line, "id: "):
			f.id = line[4:]
		case strings.HasPrefix(line, "event: "):
			f.event = line[7:]
		case strings.HasPrefix(line, "data: "):
			f.data = line[6:]
		default:
			t.Fatalf("unexpected line %q", line)
		}
	}
}

// nextEvent skips heartbeats and returns the next event frame.
func (s *esStream) nextEvent(t *testing.T) esFrame {
	t.Helper()
	for {
		f, ok := s.next(t)
		if !ok {
			t.Fatal("the stream ended")
		}
		if f.event != "" {
			return f
		}
	}
}

// streamServes are the two ways GET /events/stream is served: with the
// connection in reach (server.ConnContext, as svc serve has it) an
// HTTP/1 stream takes its connection from net/http and a goroutine of its
// own serves it; without, the handler serves it through net/http.
var streamServes = []struct {
	name string
	conn bool
}{{"taken", true}, {"held", false}}

// newStreamRouter serves a router with opts over a fresh fake, with
// server.ConnContext when conn is set; hijacked counts the connections
// net/http let go (http.StateHijacked).
func newStreamRouter(t *testing.T, conn bool, opts ...server.Option) (srv *httptest.Server, hijacked *atomic.Int64) {
	t.Helper()
	if !conn {
		srv, _ = newRouter(t, opts...)
		return srv, new(atomic.Int64)
	}
	rt, err := server.NewRouter(&fakeBackend{}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hijacked = new(atomic.Int64)
	srv = &httptest.Server{Listener: l, Config: &http.Server{Handler: rt, ConnContext: server.ConnContext,
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateHijacked {
				hijacked.Add(1)
			}
		}}}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, hijacked
}

// streamCtx bounds a test's reads: a stream that stalls fails the test
// instead of hanging it.
func streamCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func eventOf(typ svc.EventType, agent, task string) svc.RuntimeEvent {
	ev := emittertest.SampleEvent(typ)
	ev.AgentName, ev.TaskID = agent, task
	return ev
}

func TestEventStreamAbsentWithoutOption(t *testing.T) {
	srv, _ := newRouter(t)
	r := do(t, srv, http.MethodGet, "/events/stream", "")
	problem(t, r, http.StatusNotFound)
}

func TestEventStreamFiltered(t *testing.T) {
	for _, mode := range streamServes {
		t.Run(mode.name, func(t *testing.T) { testEventStreamFiltered(t, mode.conn) })
	}
}

func testEventStreamFiltered(t *testing.T, conn bool) {
	e := newSSE(t, time.Hour)
	srv, hijacked := newStreamRouter(t, conn, server.WithSSEEmitter(e))
	q := url.Values{"event_type": {"agent_completed, agent_failed", "tool_call_failed"}, "agent": {"billing"}}
	s := openEventStream(t, streamCtx(t), srv, q.Encode())
	all := openEventStream(t, streamCtx(t), srv, "")

	emitted := []svc.RuntimeEvent{
		eventOf(svc.EventAgentSpawned, "billing", "t1"),   // wrong type
		eventOf(svc.EventAgentCompleted, "billing", "t2"), // match
		eventOf(svc.EventAgentCompleted, "tech", "t3"),    // wrong agent
		eventOf(svc.EventToolCallFailed, "billing", "t4"), // match
		eventOf(svc.EventToolCallStarted, "billing", "t5"),
		eventOf(svc.EventAgentFailed, "billing", "t6"), // match
	}
	for _, ev := range emitted {
		e.Emit(ev)
	}
	for i, want := range []string{"t2", "t4", "t6"} {
		f := s.nextEvent(t)
		var ev svc.RuntimeEvent
		if err := json.Unmarshal([]byte(f.data), &ev); err != nil {
			t.Fatalf("frame %d data %q: %v", i, f.data, err)
		}
		if ev.TaskID != want || ev.AgentName != "billing" || f.event != string(ev.EventType) || f.id != strconv.Itoa(i+1) {
			t.Errorf("frame %d = id %s event %s %+v; want id %d, task %s, event = event_type", i, f.id, f.event, ev, i+1, want)
		}
		if i == 0 {
			// The data is the RuntimeEvent's own JSON.
			if wantData, _ := json.Marshal(emitted[1]); f.data != string(wantData) {
				t.Errorf("data %s, want %s", f.data, wantData)
			}
		}
	}
	// The unfiltered stream sees everything, with its own ids.
	for i, want := range emitted {
		f := all.nextEvent(t)
		if f.id != strconv.Itoa(i+1) || f.event != string(want.EventType) || !strings.Contains(f.data, `"task_id":"`+want.TaskID+`"`) {
			t.Errorf("unfiltered frame %d = %+v, want %s of %s", i, f, want.EventType, want.TaskID)
		}
	}
	// Served the way asked: the connections taken from net/http, or not.
	if n, want := hijacked.Load(), map[bool]int64{true: 2, false: 0}[conn]; n != want {
		t.Errorf("%d connections taken from net/http, want %d", n, want)
	}
}

func TestEventStreamHeartbeat(t *testing.T) {
	for _, mode := range streamServes {
		t.Run(mode.name, func(t *testing.T) { testEventStreamHeartbeat(t, mode.conn) })
	}
}

func testEventStreamHeartbeat(t *testing.T, conn bool) {
	e := newSSE(t, 20*time.Millisecond)
	srv, _ := newStreamRouter(t, conn, server.WithSSEEmitter(e))
	s := openEventStream(t, streamCtx(t), srv, "")
	for range 2 {
		f, ok := s.next(t)
		if !ok || f.event != "" || !slices.Equal(f.comments, []string{"ping"}) {
			t.Fatalf("frame on an idle stream = %+v, %v; want the ping comment", f, ok)
		}
	}
	e.Emit(eventOf(svc.EventAgentSpawned, "echo", "t1"))
	if f := s.nextEvent(t); f.event != "agent_spawned" || f.id != "1" {
		t.Errorf("after heartbeats: %+v", f)
	}
}

// A client that goes away ends its subscription: the subscriber actor
// stops.
func TestEventStreamDisconnect(t *testing.T) {
	for _, mode := range streamServes {
		t.Run(mode.name, func(t *testing.T) { testEventStreamDisconnect(t, mode.conn) })
	}
}

func testEventStreamDisconnect(t *testing.T, conn bool) {
	// No heartbeat in the test's time: the client's going is seen at
	// once, not at the next write.
	e := newSSE(t, time.Hour)
	srv, _ := newStreamRouter(t, conn, server.WithSSEEmitter(e))
	ctx, cancel := context.WithCancel(streamCtx(t))
	s := openEventStream(t, ctx, srv, "event_type=agent_spawned")
	stay := openEventStream(t, streamCtx(t), srv, "")
	// Subscribed before the 200 went out.
	if n := e.Subscribers(); n != 2 {
		t.Fatalf("Subscribers = %d with two streams open, want 2", n)
	}
	e.Emit(eventOf(svc.EventAgentSpawned, "echo", "t1"))
	s.nextEvent(t)
	cancel()
	testutil.Eventually(t, "Subscribers to be 1 after the client left", func() bool { return e.Subscribers() == 1 })
	if f := stay.nextEvent(t); f.event != "agent_spawned" {
		t.Errorf("the other stream got %+v", f)
	}
}

// Closing the emitter (a server shutting down) ends every stream, and
// later subscriptions are refused with 503.
func TestEventStreamEmitterClosed(t *testing.T) {
	for _, mode := range streamServes {
		t.Run(mode.name, func(t *testing.T) { testEventStreamEmitterClosed(t, mode.conn) })
	}
}

func testEventStreamEmitterClosed(t *testing.T, conn bool) {
	e := newSSE(t, time.Hour)
	srv, _ := newStreamRouter(t, conn, server.WithSSEEmitter(e))
	s := openEventStream(t, streamCtx(t), srv, "")
	e.Emit(eventOf(svc.EventAgentSpawned, "echo", "t1"))
	s.nextEvent(t)
	_ = e.Close()
	if f, ok := s.next(t); ok {
		t.Fatalf("frame %+v after the emitter closed, want the end of the stream", f)
	}
	// The end of the body, not a cut: the chunked body's last chunk came.
	if _, err := s.br.ReadByte(); err != io.EOF {
		t.Errorf("reading past the stream's end: %v, want io.EOF (a clean end of the body)", err)
	}
	problem(t, do(t, srv, http.MethodGet, "/events/stream", ""), http.StatusServiceUnavailable)
}

func TestEventStreamBadQuery(t *testing.T) {
	e := newSSE(t, time.Hour)
	srv, _ := newRouter(t, server.WithSSEEmitter(e))
	for _, tc := range []struct{ query, mention string }{
		{"event_type=agent_spawned,agent_exploded", "agent_exploded"},
		{"event_type=AGENT_SPAWNED", "AGENT_SPAWNED"},
		{"event-type=agent_spawned", "event-type"},
		{"agent=a&agent=b", "agent"},
		{"event_type=%zz", "query"},
	} {
		t.Run(tc.query, func(t *testing.T) {
			p := problem(t, do(t, srv, http.MethodGet, "/events/stream?"+tc.query, ""), http.StatusBadRequest)
			if p.Error != string(svc.KindSpecValidation) || !strings.Contains(p.Detail, tc.mention) {
				t.Errorf("problem %+v, want a SpecValidationError naming %q", p, tc.mention)
			}
		})
	}
	if n := e.Subscribers(); n != 0 {
		t.Errorf("Subscribers = %d after refused requests", n)
	}
}

func TestWithSSEEmitterOption(t *testing.T) {
	e := newSSE(t, time.Hour)
	if _, err := server.NewRouter(&fakeBackend{}, server.WithSSEEmitter(nil)); err == nil {
		t.Error("WithSSEEmitter(nil) accepted")
	}
	if _, err := server.NewRouter(&fakeBackend{}, server.WithSSEEmitter(e), server.WithSSEEmitter(e)); err == nil {
		t.Error("WithSSEEmitter given twice accepted")
	}
}

// Through the standalone middleware (request id, access log, auth) the
// stream still flushes each frame as it happens.
func TestEventStreamStandalone(t *testing.T) {
	e := newSSE(t, time.Hour)
	h, err := server.NewStandalone(&fakeBackend{}, server.StandaloneConfig{
		AuthToken: "tok", RouterOptions: []server.Option{server.WithSSEEmitter(e)},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, h)
	if r := do(t, srv, http.MethodGet, "/events/stream", ""); r.status != http.StatusUnauthorized {
		t.Fatalf("without a token: %d", r.status)
	}
	req, _ := http.NewRequestWithContext(streamCtx(t), http.MethodGet, srv.URL+"/events/stream", nil)
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	s := &esStream{resp: resp, br: bufio.NewReader(resp.Body)}
	e.Emit(eventOf(svc.EventAgentCompleted, "echo", "t1"))
	if f := s.nextEvent(t); f.event != "agent_completed" {
		t.Errorf("frame %+v", f)
	}
}

// fakeSubscriber hands out one subscription whose events and drop count
// the test controls.
type fakeSubscriber struct {
	sub *fakeSubscription
}

func (f *fakeSubscriber) Subscribe(context.Context, svc.EventFilter) (svc.EventSubscription, error) {
	return f.sub, nil
}

func (f *fakeSubscriber) HeartbeatInterval() time.Duration { return time.Hour }

type fakeSubscription struct {
	ch      chan svc.RuntimeEvent
	dropped atomic.Uint64
	closed  atomic.Bool
}

func (s *fakeSubscription) Events() <-chan svc.RuntimeEvent { return s.ch }
func (s *fakeSubscription) Dropped() uint64                 { return s.dropped.Load() }
func (s *fakeSubscription) Close() error                    { s.closed.Store(true); return nil }

// Drops are reported to the client as a comment before the next frame, and
// an event that cannot be encoded is skipped without ending the stream.
func TestEventStreamDropsAndUnencodable(t *testing.T) {
	sub := &fakeSubscription{ch: make(chan svc.RuntimeEvent, 4)}
	srv, _ := newRouter(t, server.WithSSEEmitter(&fakeSubscriber{sub: sub}))
	s := openEventStream(t, streamCtx(t), srv, "")

	sub.dropped.Store(7)
	sub.ch <- eventOf(svc.EventAgentSpawned, "echo", "t1")
	f := s.nextEvent(t)
	if !slices.Equal(f.comments, []string{"dropped 7"}) || f.id != "1" {
		t.Errorf("frame after 7 drops = %+v, want a \"dropped 7\" comment and id 1", f)
	}
	bad := eventOf(svc.EventAgentCompleted, "echo", "t2")
	bad.Payload = svc.Payload{"duration_ms": math.NaN()}
	sub.ch <- bad
	sub.ch <- eventOf(svc.EventAgentCompleted, "echo", "t3")
	f = s.nextEvent(t)
	if f.id != "2" || !strings.Contains(f.data, `"t3"`) || len(f.comments) != 0 {
		t.Errorf("frame after an unencodable event = %+v, want t3 with id 2", f)
	}
	close(sub.ch)
	if _, ok := s.next(t); ok {
		t.Error("the stream went on after the subscription's channel closed")
	}
	if !sub.closed.Load() {
		t.Error("the handler did not close its subscription")
	}
}

// FuzzEventStreamQuery: any query is either refused with a 400 or gives a
// stream; never a panic or a 500.
func FuzzEventStreamQuery(f *testing.F) {
	for _, s := range []string{"", "event_type=agent_spawned", "event_type=a,b", "agent=x&agent=y", "event_type=,,", "%", "event_type=agent_spawned%2Cagent_failed&agent=%00"} {
		f.Add(s)
	}
	sub := &fakeSubscription{ch: make(chan svc.RuntimeEvent)}
	close(sub.ch) // every accepted stream ends at once
	rt, err := server.NewRouter(&fakeBackend{}, server.WithSSEEmitter(&fakeSubscriber{sub: sub}))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, query string) {
		req := httptest.NewRequest(http.MethodGet, "/events/stream", nil)
		req.URL.RawQuery = query
		w := httptest.NewRecorder()
		rt.ServeHTTP(w, req)
		if w.Code != http.StatusOK && w.Code != http.StatusBadRequest {
			t.Fatalf("query %q: status %d: %s", query, w.Code, w.Body)
		}
		if w.Code == http.StatusOK && w.Body.Len() != 0 {
			t.Fatalf("query %q: body %q from a stream with no events", query, w.Body)
		}
	})
}

// A burst of queued events reaches
// the client whole: every event, in order, numbered from 1, with the drop
// comment on the frame that follows the drops.
func TestEventStreamBurstInOrder(t *testing.T) {
	const n = 300
	sub := &fakeSubscription{ch: make(chan svc.RuntimeEvent, n)}
	sub.dropped.Store(3)
	for i := range n {
		sub.ch <- eventOf(svc.EventAgentSpawned, "echo", fmt.Sprintf("t%03d", i))
	}
	srv, _ := newRouter(t, server.WithSSEEmitter(&fakeSubscriber{sub: sub}))
	s := openEventStream(t, streamCtx(t), srv, "")
	for i := range n {
		f := s.nextEvent(t)
		if f.id != strconv.Itoa(i+1) || !strings.Contains(f.data, fmt.Sprintf(`"t%03d"`, i)) {
			t.Fatalf("frame %d = %+v, want id %d and task t%03d", i, f, i+1, i)
		}
		if want := i == 0; want != slices.Equal(f.comments, []string{"dropped 3"}) {
			t.Errorf("frame %d comments %v", i, f.comments)
		}
	}
}

// countingValue counts its JSON encodings.
type countingValue struct{ n *atomic.Int64 }

func (c countingValue) MarshalJSON() ([]byte, error) {
	c.n.Add(1)
	return []byte(`"counted"`), nil
}

// An event reaching many streams is encoded once for all of them, not
// once a stream: with 1,000 subscribers the per-stream encoding was 27 %
// of the server's CPU (issue 15).
func TestEventStreamEncodesEachEventOnce(t *testing.T) {
	for _, mode := range streamServes {
		t.Run(mode.name, func(t *testing.T) { testEventStreamEncodesEachEventOnce(t, mode.conn) })
	}
}

func testEventStreamEncodesEachEventOnce(t *testing.T, conn bool) {
	e := newSSE(t, time.Hour)
	srv, _ := newStreamRouter(t, conn, server.WithSSEEmitter(e))
	const streams = 5
	var ss []*esStream
	for range streams {
		ss = append(ss, openEventStream(t, streamCtx(t), srv, ""))
	}
	var n atomic.Int64
	ev := eventOf(svc.EventToolCallCompleted, "echo", "t1")
	ev.Payload = svc.Payload{"value": countingValue{&n}}
	e.Emit(ev)
	for i, s := range ss {
		f := s.nextEvent(t)
		if f.id != "1" || f.event != "tool_call_completed" || !strings.Contains(f.data, `"value":"counted"`) {
			t.Errorf("stream %d: frame %+v", i, f)
		}
	}
	if got := n.Load(); got != 1 {
		t.Errorf("the event was encoded %d times for %d streams; want once", got, streams)
	}
}

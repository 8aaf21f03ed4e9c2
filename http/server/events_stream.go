package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"go.uber.org/zap"

	svc "github.com/svc-dev/svc"
)

// WithSSEEmitter serves GET /events/stream, the live stream of every
// runtime event, from sub (the SSE emitter, emitters/sse, which must also
// be in the runtime's emitter chain). Without it the route does not exist
// (404).
//
// The query selects events: event_type (repeatable, or comma-separated;
// an unknown type is a 400) and agent. Each event is a frame
//
//	id: <n>             a counter of this stream's frames, from 1
//	event: <event_type>
//	data: <the RuntimeEvent as JSON>
//
// and while no event comes, a ": ping" comment is written every
// sub.HeartbeatInterval(). When the subscriber fell behind and events were
// dropped, the next frame starts with a ": dropped <total so far>" comment.
// The stream is live only: there is no history and Last-Event-ID is
// ignored. It ends when the client goes away (closing the subscription)
// or the emitter is closed.
//
// The spec makes the router's sse_emitter and "server" options mutually
// exclusive. Here the server is the backend: a backend that streams its
// own events (it implements svc.EventSubscriber, as the HTTP client does
// for the remote server it calls) is served at /events/stream without this
// option, and giving the option too is an error, since the router serves
// one event stream. Giving WithSSEEmitter twice, or a nil sub, is an error
// too.
func WithSSEEmitter(sub svc.EventSubscriber) Option {
	return func(c *config) error {
		if sub == nil {
			return errors.New("server: WithSSEEmitter: nil subscriber")
		}
		if c.sse != nil {
			return errors.New("server: WithSSEEmitter given twice: the router serves one event stream")
		}
		c.sse = sub
		return nil
	}
}

// DefaultStreamWriteTimeout is how long one write of an event stream
// (GET /events/stream, GET /runs/{id}/stream) may wait for the client to
// take it before the client counts as unable to keep up and is
// disconnected.
const DefaultStreamWriteTimeout = 10 * time.Second

// streamSendBuffer caps the kernel send buffer of a stream's connection
// when the server was built with ConnContext. Left to autotuning, a
// client that stops reading absorbs some 4 MB of frames (measured on
// loopback) before a write blocks, each encoded and written for nothing:
// 500 such clients cost the server 2 GB of frames and ~99% of its
// throughput for half a minute (issue 13). Linux doubles the value: 32 KB
// in all, still tens of frames for a client that reads.
const streamSendBuffer = 16 << 10

// WithStreamWriteTimeout sets how long one write of an event stream may
// wait for the client (default DefaultStreamWriteTimeout). A client that
// takes longer cannot keep up: its stream ends, and a subscriber of
// GET /events/stream is counted (sse.Emitter.SlowDisconnects) and logged.
// d must be positive.
func WithStreamWriteTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return errors.New("server: WithStreamWriteTimeout: the timeout must be positive")
		}
		c.writeTimeout = d
		return nil
	}
}

type connKey struct{}

// ConnContext is an http.Server ConnContext that lets the event streams
// reach their connection, to cap its kernel send buffer (see
// streamSendBuffer): set it on the server that serves the router so that a
// client that stops reading costs the server little before its write
// deadline expires. Without it the streams work the same, with the
// system's buffers.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// streamSubscription is what the event stream needs of a subscription,
// whether an svc.EventSubscription or an svc.EncodedEventSubscription.
type streamSubscription interface {
	Dropped() uint64
	Close() error
}

// slowDisconnecter is implemented by a subscription that counts the
// subscribers cut off for not keeping up (emitters/sse).
type slowDisconnecter interface {
	DisconnectSlow() bool
}

// staller is implemented by a subscription that tells when its queue has
// stayed full too long (emitters/sse): its client is cut off then,
// without waiting for the write timeout. AfterStall runs f then, as
// context.AfterFunc does (no goroutine waits for it).
type staller interface {
	AfterStall(f func()) (stop func() bool)
}

// mountEventStream adds GET /events/stream to r.
func mountEventStream(r chi.Router, sub svc.EventSubscriber, writeTimeout time.Duration) {
	r.Method(http.MethodGet, "/events/stream", Handle(adminEvents("GET /events/stream", (&eventStream{sub: sub, writeTimeout: writeTimeout}).serve)))
}

type eventStream struct {
	sub          svc.EventSubscriber
	writeTimeout time.Duration
}

// eventFilter reads the filter of GET /events/stream. Other parameters
// are refused, as on the rollup routes, so that a typo (?event-type=) is
// an error instead of an unfiltered stream.
func eventFilter(rawQuery string) (svc.EventFilter, error) {
	// event_type alone may be repeated: its values add up.
	q, err := parseQuery(rawQuery, []string{"event_type", "agent", "deltas"}, "event_type")
	if err != nil {
		return svc.EventFilter{}, err
	}
	var f svc.EventFilter
	for k, vs := range q {
		switch k {
		case "event_type":
			for _, v := range vs {
				for _, t := range strings.Split(v, ",") {
					t = strings.TrimSpace(t)
					if t == "" {
						continue
					}
					typ := svc.EventType(t)
					if !slices.Contains(svc.EventTypes, typ) && typ != svc.EventAgentDelta {
						return svc.EventFilter{}, svc.Errorf(svc.KindSpecValidation, "event_type %q is not an event type (known: %s)", t, eventTypeList())
					}
					if !slices.Contains(f.EventTypes, typ) {
						f.EventTypes = append(f.EventTypes, typ)
					}
				}
			}
		case "agent":
			f.Agent = vs[0]
		case "deltas":
			switch vs[0] {
			case "true", "1":
				f.Deltas = true
			case "false", "0", "":
			default:
				return svc.EventFilter{}, svc.Errorf(svc.KindSpecValidation, "deltas %q: want true or false", vs[0])
			}
		}
	}
	return f, nil
}

func eventTypeList() string {
	names := make([]string, len(svc.EventTypes))
	for i, t := range svc.EventTypes {
		names[i] = string(t)
	}
	return strings.Join(names, ", ")
}

func (h *eventStream) serve(w http.ResponseWriter, r *http.Request) error {
	f, err := eventFilter(r.URL.RawQuery)
	if err != nil {
		return err
	}
	heartbeat := h.sub.HeartbeatInterval()
	if heartbeat <= 0 {
		heartbeat = DefaultHeartbeat
	}
	// A subscriber that hands out events with their shared encoding
	// (emitters/sse) saves each stream encoding each event again: with
	// 1,000 streams that was 27 % of the server's CPU (issue 15).
	if es, ok := h.sub.(svc.EncodedEventSubscriber); ok {
		return h.serveEncoded(w, r, es, f, heartbeat)
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	// Subscribed before the response starts, so a client that has seen
	// the 200 misses no event emitted after it.
	sub, err := h.sub.Subscribe(ctx, f)
	if err != nil {
		return err
	}
	st, out, err := h.start(w, r, sub)
	if err != nil {
		return err
	}
	defer st.finish(out)
	defer st.stallCutsShort(out)()
	return serveLoop(ctx, out, heartbeat, sub.Events(), func(ev svc.RuntimeEvent, ok bool) (sent, stop bool) {
		if !ok {
			return false, true // the emitter closed
		}
		// MarshalJSON directly: json.Marshal would check and compact
		// what it returns, which is compact JSON already.
		data, err := ev.MarshalJSON()
		return true, !st.send(out, &ev, data, err)
	})
}

// start sends the headers of sub's stream; on failure sub is closed.
func (h *eventStream) start(w http.ResponseWriter, r *http.Request, sub streamSubscription) (*streamFrames, *sseWriter, error) {
	st := &streamFrames{sub: sub, log: loggerFrom(r.Context()), requestID: requestIDOf(w, r)}
	out, err := startSSE(w, r, h.writeTimeout)
	if err != nil {
		st.finish(nil)
		return nil, nil, fmt.Errorf("server: event stream: %w", err)
	}
	return st, out, nil
}

// serveLoop serves a stream from its handler: handle takes what arrives
// on wake (ok false once it is closed) and writes it, reporting whether
// it wrote (sent: the heartbeat waits again) and whether the stream is
// over (stop); while nothing arrives, a ping goes out every heartbeat.
// It returns when the stream is over, the client goes (ctx ends), or a
// ping cannot be written.
func serveLoop[T any](ctx context.Context, out *sseWriter, heartbeat time.Duration, wake <-chan T, handle func(v T, ok bool) (sent, stop bool)) error {
	idle := time.NewTimer(heartbeat)
	defer idle.Stop()
	for {
		select {
		case v, ok := <-wake:
			sent, stop := handle(v, ok)
			if stop {
				return nil
			}
			if sent {
				idle.Reset(heartbeat)
			}
		case <-idle.C:
			if !out.write([]byte(": ping\n\n")) {
				return nil
			}
			idle.Reset(heartbeat)
		case <-ctx.Done():
			return nil
		}
	}
}

// serveEncoded serves the stream of a subscription whose events carry
// their shared encoding. Over HTTP/1, with the connection in reach
// (ConnContext) and net/http willing to let it go, the stream takes the
// connection (hijacks it) once its headers are out, and one small
// goroutine serves it from then on (pump); otherwise the handler serves it
// as any stream (serveHeld).
func (h *eventStream) serveEncoded(w http.ResponseWriter, r *http.Request, es svc.EncodedEventSubscriber, f svc.EventFilter, heartbeat time.Duration) error {
	// Subscribed before the response starts, so a client that has seen
	// the 200 misses no event emitted after it. Not on the request's
	// context, which ends with the handler: a stream taken from net/http
	// outlives it, and ends the subscription itself.
	sub, err := es.SubscribeEncoded(context.WithoutCancel(r.Context()), f)
	if err != nil {
		return err
	}
	st, out, err := h.start(w, r, sub)
	if err != nil {
		return err
	}
	if c := out.takeConn(r); c != nil {
		go st.pump(sub, out, c, heartbeat)
		return nil
	}
	return st.serveHeld(r.Context(), sub, out, heartbeat)
}

// serveHeld serves an encoded subscription's stream from the handler,
// through net/http, until the client goes (ctx ends), cannot keep up, or
// the emitter closes.
func (st *streamFrames) serveHeld(ctx context.Context, sub svc.EncodedEventSubscription, out *sseWriter, heartbeat time.Duration) error {
	defer st.finish(out)
	defer st.stallCutsShort(out)()
	ready := make(chan struct{}, 1)
	sub.Notify(func() {
		select {
		case ready <- struct{}{}:
		default:
		}
	})
	return serveLoop(ctx, out, heartbeat, ready, func(struct{}, bool) (sent, stop bool) {
		sent, stop, _ = st.drain(sub, out)
		return sent, stop
	})
}

// pump serves a stream whose connection was taken from net/http (see
// serveEncoded), in place of the handler: it needs no buffers of
// net/http's and no second goroutine reading the connection to tell when
// the client goes, which with the handler's deep stack were some 30 KB of
// each of 2,000 idle streams (issue 25). It waits in a read of the
// connection, which tells that the client has gone (end of file) and
// times out at the heartbeat; the subscription's Notify wakes it by
// moving the read deadline to the past. It ends, and closes the
// connection, when the client goes, cannot keep up, or the emitter closes;
// its owner is the subscription, which the emitter's Close ends.
func (st *streamFrames) pump(sub svc.EncodedEventSubscription, out *sseWriter, c net.Conn, heartbeat time.Duration) {
	defer st.finish(out)
	defer st.stallCutsShort(out)()
	past := time.Unix(1, 0)
	sub.Notify(func() { _ = c.SetReadDeadline(past) })
	var in [64]byte
	for {
		// The deadline is set before the last look at the queue: an event
		// that arrives after that look moves it to the past, so the read
		// returns at once; one that arrived before is in the look.
		pingAt := time.Now().Add(heartbeat)
		_ = c.SetReadDeadline(pingAt)
		sent, stop, ended := st.drain(sub, out)
		if stop {
			out.clean = ended
			return
		}
		if sent {
			continue // a new deadline from now, and another look
		}
		_, err := c.Read(in[:])
		switch {
		case err == nil:
			// The client sent something after its request: ignored.
		case errors.Is(err, os.ErrDeadlineExceeded):
			if !time.Now().Before(pingAt) && !out.write([]byte(": ping\n\n")) {
				return
			}
		default:
			return // the client has gone
		}
	}
}

// streamFrames is what the ways of serving GET /events/stream share: the
// frames, the drop comments, and the end of a stream with its logs.
type streamFrames struct {
	sub       streamSubscription
	log       *zap.Logger
	requestID string
	seq       int64
	reported  uint64
	buf       []byte
}

// drain writes the frames of the events waiting, until none waits. sent
// reports that it wrote some; stop that the stream is over: the
// subscription has ended (the emitter closed: then ended is set too) or
// the client could not take a frame.
func (st *streamFrames) drain(sub svc.EncodedEventSubscription, out *sseWriter) (sent, stop, ended bool) {
	for {
		ee, done := sub.Next()
		if ee == nil {
			return sent, done, done
		}
		// Encoded by the first stream that asked, shared by all.
		data, err := ee.JSON()
		if !st.send(out, &ee.Event, data, err) {
			return sent, true, false
		}
		sent = true
	}
}

// frame appends ev's frame to buf, with data, ev's JSON encoding, or err
// when it cannot be encoded. An event that cannot be encoded is skipped:
// buf gets at most the drop comment, ended as a frame of its own.
func (st *streamFrames) frame(buf []byte, ev *svc.RuntimeEvent, data []byte, err error) []byte {
	start := len(buf)
	if d := st.sub.Dropped(); d > st.reported {
		st.reported = d
		// A comment line at the head of the next frame.
		buf = fmt.Appendf(buf, ": dropped %d\n", d)
	}
	if err != nil {
		// An event the JSON encoder refuses (a NaN, a func in the
		// payload) is the emitter's bug; skip it, keep the stream.
		st.log.Warn("event stream: event not encodable; skipped",
			zap.String("event_type", string(ev.EventType)), zap.Error(err))
		if len(buf) > start {
			buf = append(buf, '\n')
		}
		return buf
	}
	st.seq++
	buf = append(buf, "id: "...)
	buf = strconv.AppendInt(buf, st.seq, 10)
	buf = append(buf, "\nevent: "...)
	buf = append(buf, sseField(string(ev.EventType))...)
	buf = append(buf, "\ndata: "...)
	buf = append(buf, data...)
	return append(buf, "\n\n"...)
}

// send writes ev's frame; false ends the stream. One write and one flush
// a frame. Batching the queued frames into one write was tried (issue 13)
// and left most stalled clients of BenchmarkSSESlowSubscribers still
// connected at the end of its phase; not understood yet.
func (st *streamFrames) send(out *sseWriter, ev *svc.RuntimeEvent, data []byte, err error) bool {
	st.buf = st.frame(st.buf[:0], ev, data, err)
	if len(st.buf) > 0 && !out.write(st.buf) {
		return false
	}
	if cap(st.buf) > 64<<10 {
		st.buf = nil // one big event should not pin its buffer
	}
	return true
}

// stallCutsShort arranges, when the subscription tells when it stalls
// (emitters/sse), for a write blocked on the stalled client to be cut
// short, and returns what undoes it. Deferred after finish, so that the
// cut-short has finished (or will never start) before finish runs.
func (st *streamFrames) stallCutsShort(out *sseWriter) (undo func()) {
	s, ok := st.sub.(staller)
	if !ok {
		return func() {}
	}
	aborted := make(chan struct{})
	stop := s.AfterStall(func() { out.abort(); close(aborted) })
	return func() {
		if !stop() {
			<-aborted
		}
	}
}

// finish ends the stream: the connection cut if the client stopped taking
// it (counted and logged once), the subscription closed, and the events
// it dropped logged. out is nil when the stream never started.
func (st *streamFrames) finish(out *sseWriter) {
	if out != nil && out.end() {
		// The client stopped taking the stream: cut it off, once.
		counted := true
		if sd, ok := st.sub.(slowDisconnecter); ok {
			counted = sd.DisconnectSlow()
		}
		if counted {
			st.log.Warn("event stream subscriber too slow; disconnected",
				zap.Duration("write_timeout", out.timeout), zap.Uint64("dropped", st.sub.Dropped()),
				zap.String("request_id", st.requestID))
		}
	}
	_ = st.sub.Close()
	if d := st.sub.Dropped(); d > 0 && (out == nil || !out.slow) {
		st.log.Warn("event stream subscriber fell behind; events dropped",
			zap.Uint64("dropped", d), zap.String("request_id", st.requestID))
	}
}

// lineBreaks removes line breaks; built once, since a Replacer builds its
// tables on first use and sseField runs for every frame.
var lineBreaks = strings.NewReplacer("\r", "", "\n", "")

// sseField keeps a value on its line: a line break inside an event type
// would end the field and start a forged one.
func sseField(s string) string {
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	return lineBreaks.Replace(s)
}

// sseWriter writes a text/event-stream response, flushing every write so
// that each frame reaches the client at once, and giving each write
// timeout to complete.
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	conn    net.Conn // from ConnContext; nil without it
	timeout time.Duration
	slow    bool // a write missed its deadline, or was aborted

	// raw is set once the stream has taken its connection from net/http
	// (takeConn): writes go to conn, as the chunks of the response's
	// chunked body that net/http started. clean, set by the stream,
	// says that it ended because the emitter closed: end then sends the
	// body's last chunk.
	raw   bool
	clean bool
	chunk []byte

	// mu orders abort against a write's setting of its deadline, so that
	// a write never undoes an abort's deadline.
	mu      sync.Mutex
	aborted bool
}

// abort makes the write in progress, if any, and every later one fail at
// once, as if the client had missed the deadline. Safe to call while a
// write is blocked.
func (s *sseWriter) abort() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.aborted = true
	s.setDeadline(time.Unix(1, 0))
}

// setDeadline sets the connection's write deadline. A writer without
// deadlines (a recorder, middleware without Unwrap, no ConnContext) just
// writes: the error is ignored, and the write's duration still tells a
// stalled client.
func (s *sseWriter) setDeadline(t time.Time) {
	if s.conn != nil {
		_ = s.conn.SetWriteDeadline(t)
		return
	}
	_ = s.rc.SetWriteDeadline(t)
}

// startSSE sends the event stream's headers and flushes them. With the
// connection in r's context (ConnContext), it caps the connection's
// kernel send buffer first. timeout 0 is DefaultStreamWriteTimeout.
func startSSE(w http.ResponseWriter, r *http.Request, timeout time.Duration) (*sseWriter, error) {
	if timeout <= 0 {
		timeout = DefaultStreamWriteTimeout
	}
	s := &sseWriter{w: w, rc: http.NewResponseController(w), timeout: timeout}
	if c, ok := r.Context().Value(connKey{}).(net.Conn); ok && r.ProtoMajor == 1 {
		// The connection itself, when the server gave it (ConnContext):
		// a wrapper without Unwrap (otelhttp's) hides it from the
		// ResponseController. Over HTTP/1 only: an HTTP/2 connection
		// carries other requests' streams too.
		s.conn = c
		if tc, ok := c.(interface{ SetWriteBuffer(int) error }); ok {
			_ = tc.SetWriteBuffer(streamSendBuffer)
		}
	}
	s.setDeadline(time.Now().Add(timeout))
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-cache")
	hd.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	if err := s.rc.Flush(); err != nil {
		return nil, fmt.Errorf("the response writer cannot flush: %w", err)
	}
	return s, nil
}

// takeConn takes the stream's connection from net/http (hijacks it),
// with the response's headers sent, so that the stream goes on without
// the handler; nil when it cannot be taken: not HTTP/1, the connection
// not in reach (no ConnContext), or a response writer that does not let
// it go. Later writes go to the connection as the chunks of the body.
func (s *sseWriter) takeConn(r *http.Request) net.Conn {
	if s.conn == nil || r.ProtoMajor != 1 || r.ProtoMinor < 1 {
		return nil
	}
	c, _, err := s.rc.Hijack()
	if err != nil {
		return nil
	}
	// What the client sent after its request, still in net/http's
	// buffer, is ignored, as the stream ignores all it reads. Hijack
	// cleared the deadlines; a write sets its own.
	s.conn, s.raw = c, true
	s.w, s.rc = nil, nil
	return c
}

// write sends b at once; false means the client has gone, or did not
// take b within the timeout (then slow is set).
func (s *sseWriter) write(b []byte) bool {
	start := time.Now()
	s.mu.Lock()
	if s.aborted {
		s.mu.Unlock()
		s.slow = true
		return false
	}
	s.setDeadline(start.Add(s.timeout))
	s.mu.Unlock()
	var err error
	if s.raw {
		// One chunk of the chunked body: its size in hex, the frame.
		s.chunk = strconv.AppendInt(s.chunk[:0], int64(len(b)), 16)
		s.chunk = append(s.chunk, "\r\n"...)
		s.chunk = append(append(s.chunk, b...), "\r\n"...)
		_, err = s.conn.Write(s.chunk)
		if cap(s.chunk) > 64<<10 {
			s.chunk = nil
		}
	} else {
		_, err = s.w.Write(b)
		if err == nil {
			err = s.rc.Flush()
		}
	}
	// A wrapper's Flush without FlushError (chi's, for one) swallows the
	// deadline's error: the time the write took tells as well.
	s.mu.Lock()
	aborted := s.aborted
	s.mu.Unlock()
	if aborted || errors.Is(err, os.ErrDeadlineExceeded) || time.Since(start) >= s.timeout {
		s.slow = true
		return false
	}
	return err == nil
}

// end clears the write deadline, which would otherwise outlive the
// stream on a kept-alive connection, and reports whether the stream
// ended because the client did not keep up; then the connection is
// closed.
func (s *sseWriter) end() bool {
	if s.raw && !s.slow {
		// The stream owns the connection: end the body if the stream
		// ended cleanly, and close it (net/http would have kept it for
		// another request; the client reconnects).
		if s.clean {
			s.setDeadline(time.Now().Add(s.timeout))
			_, _ = s.conn.Write([]byte("0\r\n\r\n"))
		}
		_ = s.conn.Close()
		return false
	}
	if !s.slow {
		s.setDeadline(time.Time{})
		return false
	}
	if s.conn != nil {
		// net/http may take the response for complete when a wrapper
		// swallowed the write's error, and keep the connection for the
		// next request: close it, so the client sees the cut. Reset, not
		// closed in order: a FIN would wait behind the unsent frames for
		// a client that does not read.
		if tc, ok := s.conn.(interface{ SetLinger(int) error }); ok {
			_ = tc.SetLinger(0)
		}
		_ = s.conn.Close()
	}
	return true
}

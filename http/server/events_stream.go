package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
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

// mountEventStream adds GET /events/stream to r.
func mountEventStream(r chi.Router, sub svc.EventSubscriber) {
	r.Method(http.MethodGet, "/events/stream", Handle((&eventStream{sub: sub}).serve))
}

type eventStream struct {
	sub svc.EventSubscriber
}

// eventFilter reads the filter of GET /events/stream. Other parameters
// are refused, as on the rollup routes, so that a typo (?event-type=) is
// an error instead of an unfiltered stream.
func eventFilter(rawQuery string) (svc.EventFilter, error) {
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return svc.EventFilter{}, svc.Errorf(svc.KindSpecValidation, "query string: %v", err)
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
					if !slices.Contains(svc.EventTypes, typ) {
						return svc.EventFilter{}, svc.Errorf(svc.KindSpecValidation, "event_type %q is not an event type (known: %s)", t, eventTypeList())
					}
					if !slices.Contains(f.EventTypes, typ) {
						f.EventTypes = append(f.EventTypes, typ)
					}
				}
			}
		case "agent":
			if len(vs) > 1 {
				return svc.EventFilter{}, svc.Errorf(svc.KindSpecValidation, "query parameter \"agent\" is given %d times; give one agent", len(vs))
			}
			f.Agent = vs[0]
		default:
			return svc.EventFilter{}, svc.Errorf(svc.KindSpecValidation, "query parameter %q is not known here (known: event_type, agent)", k)
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
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	// Subscribed before the response starts, so a client that has seen
	// the 200 misses no event emitted after it.
	sub, err := h.sub.Subscribe(ctx, f)
	if err != nil {
		return err
	}
	log := loggerFrom(r.Context())
	defer func() {
		_ = sub.Close()
		if d := sub.Dropped(); d > 0 {
			log.Warn("event stream subscriber fell behind; events dropped",
				zap.Uint64("dropped", d), zap.String("request_id", requestIDOf(w, r)))
		}
	}()
	heartbeat := h.sub.HeartbeatInterval()
	if heartbeat <= 0 {
		heartbeat = DefaultHeartbeat
	}
	out, err := startSSE(w)
	if err != nil {
		return fmt.Errorf("server: event stream: %w", err)
	}
	write := out.write
	idle := time.NewTimer(heartbeat)
	defer idle.Stop()
	var seq int64
	var reported uint64
	for {
		select {
		case ev, ok := <-sub.Events():
			if !ok {
				return nil // the emitter closed
			}
			var frame []byte
			if d := sub.Dropped(); d > reported {
				reported = d
				// A comment line at the head of the next frame.
				frame = fmt.Appendf(frame, ": dropped %d\n", d)
			}
			data, err := json.Marshal(ev)
			if err != nil {
				// An event the JSON encoder refuses (a NaN, a func in the
				// payload) is the emitter's bug; skip it, keep the stream.
				log.Warn("event stream: event not encodable; skipped",
					zap.String("event_type", string(ev.EventType)), zap.Error(err))
				if len(frame) > 0 && !write(append(frame, '\n')) {
					return nil
				}
				continue
			}
			seq++
			frame = fmt.Appendf(frame, "id: %d\nevent: %s\ndata: %s\n\n", seq, sseField(string(ev.EventType)), data)
			if !write(frame) {
				return nil
			}
			idle.Reset(heartbeat)
		case <-idle.C:
			if !write([]byte(": ping\n\n")) {
				return nil
			}
			idle.Reset(heartbeat)
		case <-ctx.Done():
			return nil
		}
	}
}

// sseField keeps a value on its line: a line break inside an event type
// would end the field and start a forged one.
func sseField(s string) string {
	return strings.NewReplacer("\r", "", "\n", "").Replace(s)
}

// sseWriter writes a text/event-stream response, flushing every write so
// that each frame reaches the client at once.
type sseWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

// startSSE sends the event stream's headers and flushes them.
func startSSE(w http.ResponseWriter) (*sseWriter, error) {
	s := &sseWriter{w: w, rc: http.NewResponseController(w)}
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

// write sends b at once; false means the client has gone.
func (s *sseWriter) write(b []byte) bool {
	if _, err := s.w.Write(b); err != nil {
		return false
	}
	return s.rc.Flush() == nil
}

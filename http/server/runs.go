package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	svc "github.com/svc-dev/svc"
)

// DefaultHeartbeat is how long a run stream stays silent before the router
// sends a ": ping" comment, unless WithHeartbeat says otherwise. Proxies
// commonly drop connections idle for 30 to 60 s.
const DefaultHeartbeat = 15 * time.Second

// LastEventIDHeader is the SSE header a reconnecting client sends with the
// last sequence number it saw.
const LastEventIDHeader = "Last-Event-ID"

// WithHeartbeat sets the interval of the heartbeat comments of a run stream,
// and of the keep-alives of a streamed gather's answer (default 15 s). d
// must be positive.
func WithHeartbeat(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("server: WithHeartbeat(%v): the interval must be positive", d)
		}
		c.heartbeat = d
		return nil
	}
}

// runHandlers serve the asynchronous routes over a svc.RunBackend.
type runHandlers struct {
	rb           svc.RunBackend
	maxBody      int64
	heartbeat    time.Duration
	writeTimeout time.Duration // WithStreamWriteTimeout
	// slowCounter counts the run streams cut off for not keeping up
	// (WithMeterProvider); nil without it.
	slowCounter metric.Int64Counter
}

// MetricRunStreamSlowDisconnects is the Int64Counter, in {stream}, of the
// GET /runs/{id}/stream clients disconnected for not keeping up (a write
// missed the stream write timeout). GET /events/stream's are counted by
// its emitter (sse.MetricSlowDisconnects).
const MetricRunStreamSlowDisconnects = "svc.http.run_stream.slow_disconnects"

// meterName is the instrumentation scope of the router's own metrics.
const meterName = "github.com/svc-dev/svc/http/server"

// mountRuns adds the routes of the asynchronous runs to r.
func mountRuns(r chi.Router, h *runHandlers) {
	r.Method(http.MethodPost, "/submit", Handle(h.submit))
	r.Method(http.MethodGet, "/runs/{id}/status", Handle(h.status))
	r.Method(http.MethodGet, "/runs/{id}/result", Handle(h.result))
	r.Method(http.MethodPost, "/runs/{id}/cancel", Handle(h.cancel))
	r.Method(http.MethodPost, "/runs/{id}/resume", Handle(h.resume))
	r.Method(http.MethodGet, "/runs/{id}/stream", Handle(h.stream))
}

// submitReply is the body of a 202 from POST /submit.
type submitReply struct {
	RunID string `json:"run_id"`
}

func (h *runHandlers) submit(w http.ResponseWriter, r *http.Request) error {
	data, err := readBody(w, r, h.maxBody)
	if err != nil {
		return err
	}
	req, envelopeID, err := decodeSubmitBody(data)
	if err != nil {
		return err
	}
	switch {
	case req.Task.RequestID != "":
	case envelopeID != "":
		req.Task.RequestID = envelopeID
	default:
		req.Task.RequestID = headerRequestID(r)
	}
	w.Header().Set(RequestIDHeader, req.Task.RequestID)
	req.IdempotencyKey = r.Header.Get("Idempotency-Key")
	id, err := h.rb.Submit(r.Context(), req)
	if err != nil {
		return err
	}
	if id == "" {
		return fmt.Errorf("server: submit of %q: the backend returned an empty run id", req.Target)
	}
	w.Header().Set("Location", mountPrefix(r, "/submit")+"/runs/"+url.PathEscape(id)+"/status")
	return writeJSON(w, http.StatusAccepted, submitReply{RunID: id})
}

// runID returns the {id} path parameter (pathParam).
func runID(r *http.Request) (string, error) { return pathParam(r, "id", "run id") }

// ownRunID returns the {id} of r (runID) once the caller may see that run:
// a caller with an API key that is not an admin one sees its own tenant's
// runs only, and another tenant's run is answered as an unknown one (404,
// the stores' own words), so that its existence is not revealed.
func (h *runHandlers) ownRunID(r *http.Request) (string, error) {
	id, err := runID(r)
	if err != nil {
		return "", err
	}
	p, ok := svc.PrincipalFrom(r.Context())
	if !ok || p.Admin() {
		return id, nil
	}
	st, err := h.rb.RunStatus(r.Context(), id)
	if err != nil {
		return "", err
	}
	if !p.Sees(st.Tenant) {
		return "", svc.Errorf(svc.KindRegistry, "unknown run %q", id)
	}
	return id, nil
}

// mountPrefix returns the escaped path under which the router is mounted,
// taken from the request's path minus the route's own suffix, so the
// Location of a run works wherever a host mounts the router.
func mountPrefix(r *http.Request, route string) string {
	return strings.TrimSuffix(r.URL.EscapedPath(), route)
}

func (h *runHandlers) status(w http.ResponseWriter, r *http.Request) error {
	id, err := h.ownRunID(r)
	if err != nil {
		return err
	}
	st, err := h.rb.RunStatus(r.Context(), id)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, st)
}

func (h *runHandlers) result(w http.ResponseWriter, r *http.Request) error {
	id, err := h.ownRunID(r)
	if err != nil {
		return err
	}
	res, err := h.rb.RunResult(r.Context(), id)
	if err != nil {
		return err
	}
	if !json.Valid(res) {
		// A backend bug, not the caller's: logged, answered with a 500.
		return fmt.Errorf("server: run %q: the backend returned a result that is not JSON (%d bytes)", id, len(res))
	}
	// Served verbatim: the stored bytes are the result.
	hd := w.Header()
	hd.Set("Content-Type", "application/json")
	hd.Set("Content-Length", strconv.Itoa(len(res)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(res)
	return nil
}

func (h *runHandlers) cancel(w http.ResponseWriter, r *http.Request) error {
	id, err := h.ownRunID(r)
	if err != nil {
		return err
	}
	// The body is optional and unread, but one that is sent must be JSON,
	// or any web page could cancel runs with a form.
	if err := optionalJSONBody(r); err != nil {
		return err
	}
	if err := h.rb.CancelRun(r.Context(), id); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// resumeBody is the body of POST /runs/{id}/resume: svc.Decision as a
// client gives it (the runtime sets its time and timed_out).
type resumeBody struct {
	RequestID string          `json:"request_id"`
	Approve   *bool           `json:"approve"`
	Reason    string          `json:"reason"`
	Answer    json.RawMessage `json:"answer"`
}

// resume answers one request of a waiting run and starts it again: 202
// with the run's status.
func (h *runHandlers) resume(w http.ResponseWriter, r *http.Request) error {
	id, err := h.ownRunID(r)
	if err != nil {
		return err
	}
	rb, ok := h.rb.(svc.ResumeBackend)
	if !ok {
		return svc.Errorf(svc.KindNotFound, "this server's backend cannot resume runs")
	}
	data, err := readBody(w, r, h.maxBody)
	if err != nil {
		return err
	}
	if _, err := topLevelObject(data); err != nil {
		return err
	}
	var b resumeBody
	if err := strictUnmarshal(data, &b); err != nil {
		return err
	}
	if b.RequestID == "" {
		return svc.Errorf(svc.KindSpecValidation, "request_id: missing: name the request to answer (GET /runs/%s/status lists them under waiting)", id)
	}
	st, err := rb.ResumeRun(r.Context(), id, svc.Decision{RequestID: b.RequestID, Approve: b.Approve, Reason: b.Reason, Answer: b.Answer})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusAccepted, st)
}

// queryDeltas reads the deltas query parameter of a run's stream.
func queryDeltas(r *http.Request) (bool, error) {
	q, err := queryOf(r, "after", "deltas")
	if err != nil {
		return false, err
	}
	switch v := q.Get("deltas"); v {
	case "true", "1":
		return true, nil
	case "", "false", "0":
		return false, nil
	default:
		return false, svc.Errorf(svc.KindSpecValidation, "deltas %q: want true or false", v)
	}
}

// streamAfter returns the sequence number a stream resumes after: the
// Last-Event-ID header, else the after query parameter, else 0.
func streamAfter(r *http.Request) (int64, error) {
	q, err := queryOf(r, "after", "deltas")
	if err != nil {
		return 0, err
	}
	what, v := LastEventIDHeader, r.Header.Get(LastEventIDHeader)
	if v == "" {
		what, v = "after", q.Get("after")
	}
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n < 0 {
		return 0, svc.Errorf(svc.KindSpecValidation, "%s %q: want a non-negative event sequence number", what, v)
	}
	return n, nil
}

func (h *runHandlers) stream(w http.ResponseWriter, r *http.Request) error {
	id, err := h.ownRunID(r)
	if err != nil {
		return err
	}
	after, err := streamAfter(r)
	if err != nil {
		return err
	}
	deltas, err := queryDeltas(r)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(r.Context())
	// Ending ctx on return also ends the backend's stream when the client
	// has gone and a write failed.
	defer cancel()
	var events <-chan svc.RunEvent
	if ds, ok := h.rb.(svc.RunDeltaStreamer); ok && deltas {
		events, err = ds.RunEventsWithDeltas(ctx, id, after)
	} else {
		events, err = h.rb.RunEvents(ctx, id, after)
	}
	if err != nil {
		return err
	}
	out, err := startSSE(w, r, h.writeTimeout)
	if err != nil {
		return fmt.Errorf("server: run stream %q: %w", id, err)
	}
	defer func() {
		if out.end() {
			if h.slowCounter != nil {
				h.slowCounter.Add(context.Background(), 1)
			}
			loggerFrom(r.Context()).Warn("run stream client too slow; disconnected",
				zap.String("run_id", id), zap.Duration("write_timeout", out.timeout),
				zap.String("request_id", requestIDOf(w, r)))
		}
	}()
	idle := time.NewTimer(h.heartbeat)
	defer idle.Stop()
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return nil
			}
			frame, err := sseFrame(ev)
			if err != nil {
				return err
			}
			if !out.write(frame) {
				return nil // the client has gone
			}
			idle.Reset(h.heartbeat)
		case <-idle.C:
			if !out.write([]byte(": ping\n\n")) {
				return nil
			}
			idle.Reset(h.heartbeat)
		case <-ctx.Done():
			return nil
		}
	}
}

// sseFrame encodes one run event as an SSE frame whose id is its sequence
// number. The JSON of a RunEvent has no newline, so it fits one data line.
// A delta has no id: it is not stored, so a client resuming with
// Last-Event-ID resumes after the last stored event it saw, not after a
// delta.
func sseFrame(ev svc.RunEvent) ([]byte, error) {
	data, err := json.Marshal(ev)
	if err != nil {
		return nil, fmt.Errorf("server: encoding run event %d: %w", ev.Seq, err)
	}
	if ev.Type == svc.RunDelta {
		return fmt.Appendf(nil, "event: %s\ndata: %s\n\n", svc.RunDelta, data), nil
	}
	return fmt.Appendf(nil, "id: %d\nevent: %s\ndata: %s\n\n", ev.Seq, sseField(string(ev.Type)), data), nil
}

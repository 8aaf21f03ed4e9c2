package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	svc "github.com/svc-dev/svc"
)

// Run is the handle of a submitted run: its id and target, and the calls
// that come back for it through the backend that took it.
type Run struct {
	ID     string
	Target string
	b      svc.RunBackend
}

// Submit submits task to target (an agent or a group; kind, "agent" or
// "group", is needed only when a name is both) on b and returns the run's
// handle. b is the runtime, a Client or a Local.
func Submit(ctx context.Context, b svc.RunBackend, target string, task svc.TaskSpec, kind svc.TargetKind) (*Run, error) {
	id, err := b.Submit(ctx, svc.SubmitRequest{Target: target, Task: task, Kind: kind})
	if err != nil {
		return nil, err
	}
	return &Run{ID: id, Target: target, b: b}, nil
}

// Attach returns the handle of a run submitted earlier, by its id; target
// is informational and may be empty.
func Attach(b svc.RunBackend, runID, target string) *Run {
	return &Run{ID: runID, Target: target, b: b}
}

// Status returns the run's state and progress.
func (r *Run) Status(ctx context.Context) (svc.RunStatus, error) { return r.b.RunStatus(ctx, r.ID) }

// Backoff of Result's polling: quick for short runs, at most two requests
// a second for long ones.
const (
	pollStart = 20 * time.Millisecond
	pollMax   = 500 * time.Millisecond
)

// Result waits until the run is terminal, polling its status with backoff
// (20 ms doubling to 500 ms), then returns its stored AgentResult or
// GroupResult JSON. A cancelled run, or a failed one without a result, is
// a RunStateError; ctx bounds the wait.
func (r *Run) Result(ctx context.Context) (json.RawMessage, error) {
	delay := pollStart
	for {
		st, err := r.b.RunStatus(ctx, r.ID)
		if err != nil {
			return nil, err
		}
		if st.State.Terminal() {
			return r.b.RunResult(ctx, r.ID)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, transportError(context.Cause(ctx))
		case <-t.C:
		}
		delay = min(2*delay, pollMax)
	}
}

// Cancel cancels the run; cancelling a finished run does nothing.
func (r *Run) Cancel(ctx context.Context) error { return r.b.CancelRun(ctx, r.ID) }

// Events streams the run's events with a sequence number above after:
// history first, then live. The channel closes after the run's terminal
// event, or when ctx ends.
func (r *Run) Events(ctx context.Context, after int64) (<-chan svc.RunEvent, error) {
	return r.b.RunEvents(ctx, r.ID, after)
}

var _ svc.RunBackend = (*Client)(nil)

// submitRequest is the body of POST /submit the client sends.
type submitRequest struct {
	Target      string         `json:"target"`
	Task        svc.TaskSpec   `json:"task"`
	Kind        svc.TargetKind `json:"kind,omitempty"`
	RequestID   string         `json:"request_id"`
	CallbackURL string         `json:"callback_url,omitempty"`
}

// Submit implements svc.RunBackend: POST /submit. The request id is chosen
// as for Run and becomes the run's trace id unless the task carries its
// own. req.IdempotencyKey goes as the Idempotency-Key header.
func (c *Client) Submit(ctx context.Context, req svc.SubmitRequest) (string, error) {
	id := runRequestID(ctx, req.Task)
	var reply struct {
		RunID string `json:"run_id"`
	}
	var header http.Header
	if req.IdempotencyKey != "" {
		header = http.Header{"Idempotency-Key": {req.IdempotencyKey}}
	}
	body := submitRequest{Target: req.Target, Task: req.Task, Kind: req.Kind, RequestID: id, CallbackURL: req.CallbackURL}
	if err := c.callWith(ctx, http.MethodPost, "/submit", id, header, body, &reply); err != nil {
		return "", err
	}
	if reply.RunID == "" {
		return "", svc.Errorf(svc.KindRuntime, "client: submit of %q: the server returned no run_id", req.Target)
	}
	return reply.RunID, nil
}

// SubmitRun submits task to target and returns the run's handle; see the
// package function Submit.
func (c *Client) SubmitRun(ctx context.Context, target string, task svc.TaskSpec, kind svc.TargetKind) (*Run, error) {
	return Submit(ctx, c, target, task, kind)
}

func runPath(id, what string) string { return "/runs/" + url.PathEscape(id) + "/" + what }

// RunStatus implements svc.RunBackend: GET /runs/{id}/status.
func (c *Client) RunStatus(ctx context.Context, runID string) (svc.RunStatus, error) {
	var st svc.RunStatus
	err := c.call(ctx, http.MethodGet, runPath(runID, "status"), "", nil, &st)
	return st, err
}

// RunResult implements svc.RunBackend: GET /runs/{id}/result, the stored
// JSON as the server sent it.
func (c *Client) RunResult(ctx context.Context, runID string) (json.RawMessage, error) {
	var res json.RawMessage
	if err := c.call(ctx, http.MethodGet, runPath(runID, "result"), "", nil, &res); err != nil {
		return nil, err
	}
	return res, nil
}

// CancelRun implements svc.RunBackend: POST /runs/{id}/cancel.
func (c *Client) CancelRun(ctx context.Context, runID string) error {
	return c.call(ctx, http.MethodPost, runPath(runID, "cancel"), "", nil, nil)
}

var _ svc.ResumeBackend = (*Client)(nil)

// ResumeRun implements svc.ResumeBackend: POST /runs/{id}/resume answers
// one request of a waiting run (d.RequestID, with Approve for an approval
// or Answer for a question) and returns the run's status. The server sets
// the decision's time; TimedOut is the server's to set and is not sent.
func (c *Client) ResumeRun(ctx context.Context, runID string, d svc.Decision) (svc.RunStatus, error) {
	body := struct {
		RequestID string          `json:"request_id"`
		Approve   *bool           `json:"approve,omitempty"`
		Reason    string          `json:"reason,omitempty"`
		Answer    json.RawMessage `json:"answer,omitempty"`
	}{d.RequestID, d.Approve, d.Reason, d.Answer}
	var st svc.RunStatus
	err := c.call(ctx, http.MethodPost, runPath(runID, "resume"), "", body, &st)
	return st, err
}

// RunEvents implements svc.RunBackend: GET /runs/{id}/stream, resuming
// after the given sequence number. The stream is not bounded by the
// client's timeout, which is meant for calls that answer, but by ctx. The
// channel closes when the server ends the stream (after the terminal
// event), when the connection fails, or when ctx ends; an unknown run is
// an error before any event.
func (c *Client) RunEvents(ctx context.Context, runID string, after int64) (<-chan svc.RunEvent, error) {
	return c.runEvents(ctx, runPath(runID, "stream"), after)
}

var _ svc.RunDeltaStreamer = (*Client)(nil)

// RunEventsWithDeltas implements svc.RunDeltaStreamer: GET
// /runs/{id}/stream?deltas=true, RunEvents with the run's delta events
// (Type svc.RunDelta, Seq 0, the fragment in Text) merged in while the run
// executes. A resumed stream does not replay deltas: they are not stored.
func (c *Client) RunEventsWithDeltas(ctx context.Context, runID string, after int64) (<-chan svc.RunEvent, error) {
	return c.runEvents(ctx, runPath(runID, "stream")+"?deltas=true", after)
}

// runEvents follows the run event stream at path.
func (c *Client) runEvents(ctx context.Context, path string, after int64) (<-chan svc.RunEvent, error) {
	if after < 0 {
		return nil, svc.Errorf(svc.KindSpecValidation, "client: events after %d: want a non-negative sequence number", after)
	}
	resp, err := c.openStream(ctx, path, after)
	if err != nil {
		return nil, err
	}
	out := make(chan svc.RunEvent)
	go func() {
		defer close(out)
		defer resp.Body.Close()
		_ = readSSE(resp.Body, func(ev svc.RunEvent) bool {
			select {
			case out <- ev:
				return true
			case <-ctx.Done():
				return false
			}
		})
	}()
	return out, nil
}

// maxSSELine bounds one line of an event stream; a run event is far
// smaller.
const maxSSELine = 1 << 20

// errStopped is readSSE's answer when emit asked it to stop.
var errStopped = errors.New("client: event stream stopped")

// readSSE reads an event stream (the WHATWG server-sent events format) and
// hands each frame whose data decodes as a RunEvent to emit, until the
// stream ends, a read fails, or emit returns false. Comments, unknown
// fields and frames whose data is not a RunEvent are skipped. A frame's id
// stands in for a sequence number its data lacks, except a delta's, which
// has none (Seq 0).
func readSSE(r io.Reader, emit func(svc.RunEvent) bool) error {
	return readSSEFrames(r, func(data []byte, id int64) bool {
		var ev svc.RunEvent
		if err := json.Unmarshal(data, &ev); err != nil {
			return true
		}
		// A delta has no id of its own: the id the stream last saw is
		// the stored event before it, not the delta's.
		if ev.Seq == 0 && ev.Type != svc.RunDelta {
			ev.Seq = id
		}
		return emit(ev)
	})
}

// readSSEFrames reads an event stream and hands each frame's data (its
// data lines joined by newlines) and the last id seen to frame, until the
// stream ends, a read fails, or frame returns false (errStopped).
func readSSEFrames(r io.Reader, frame func(data []byte, id int64) bool) error {
	return readSSEComments(r, nil, frame)
}

// readSSEComments is readSSEFrames that also hands each comment line
// (without its leading colon) to comment, when comment is not nil.
func readSSEComments(r io.Reader, comment func(string), frame func(data []byte, id int64) bool) error {
	return readSSEEvents(r, comment, func(_ string, data []byte, id int64) bool { return frame(data, id) })
}

// readSSEEvents is readSSEComments that also hands on each frame's event
// name ("" when the frame has none).
func readSSEEvents(r io.Reader, comment func(string), frame func(event string, data []byte, id int64) bool) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxSSELine)
	sc.Split(scanSSELines)
	var (
		data    []byte
		hasData bool
		lastID  int64
		event   string
	)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 {
			if hasData && !frame(event, data, lastID) {
				return errStopped
			}
			data = data[:0]
			hasData = false
			event = ""
			continue
		}
		if line[0] == ':' {
			if comment != nil {
				comment(string(line[1:]))
			}
			continue // a comment: the heartbeat, a drop count
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "data":
			if hasData {
				data = append(data, '\n')
			}
			data = append(data, value...)
			hasData = true
		case "event":
			event = string(value)
		case "id":
			if n, err := strconv.ParseInt(string(value), 10, 64); err == nil && n >= 0 {
				lastID = n
			}
		}
	}
	// A frame cut off without its blank line is incomplete and dropped, as
	// the SSE format says.
	if err := sc.Err(); err != nil {
		return fmt.Errorf("client: reading the event stream: %w", err)
	}
	return nil
}

// scanSSELines splits lines ended by "\r\n", "\n" or a lone "\r", as the
// SSE format allows.
func scanSSELines(data []byte, atEOF bool) (int, []byte, error) {
	for i, b := range data {
		switch b {
		case '\n':
			return i + 1, data[:i], nil
		case '\r':
			if i+1 < len(data) {
				if data[i+1] == '\n' {
					return i + 2, data[:i], nil
				}
				return i + 1, data[:i], nil
			}
			if atEOF {
				return i + 1, data[:i], nil
			}
			return 0, nil, nil // need the next byte to tell "\r\n" from "\r"
		}
	}
	if atEOF && len(data) > 0 {
		return len(data), data, nil
	}
	return 0, nil, nil
}

var _ svc.RunBackend = (*Local)(nil)

// runBackend returns what l submits through: its backend when that is a
// svc.RunBackend (a Client over a handler always is), else an error.
func (l *Local) runBackend() (svc.RunBackend, error) {
	rb, ok := l.b.(svc.RunBackend)
	if !ok {
		return nil, svc.Errorf(svc.KindRuntime, "client: the backend (%T) cannot submit runs: it does not implement svc.RunBackend", l.b)
	}
	return rb, nil
}

// Submit implements svc.RunBackend.
func (l *Local) Submit(ctx context.Context, req svc.SubmitRequest) (string, error) {
	rb, err := l.runBackend()
	if err != nil {
		return "", err
	}
	return rb.Submit(ctx, req)
}

// SubmitRun submits task to target and returns the run's handle; see the
// package function Submit.
func (l *Local) SubmitRun(ctx context.Context, target string, task svc.TaskSpec, kind svc.TargetKind) (*Run, error) {
	return Submit(ctx, l, target, task, kind)
}

// RunStatus implements svc.RunBackend.
func (l *Local) RunStatus(ctx context.Context, runID string) (svc.RunStatus, error) {
	rb, err := l.runBackend()
	if err != nil {
		return svc.RunStatus{}, err
	}
	return rb.RunStatus(ctx, runID)
}

// RunResult implements svc.RunBackend.
func (l *Local) RunResult(ctx context.Context, runID string) (json.RawMessage, error) {
	rb, err := l.runBackend()
	if err != nil {
		return nil, err
	}
	return rb.RunResult(ctx, runID)
}

// CancelRun implements svc.RunBackend.
func (l *Local) CancelRun(ctx context.Context, runID string) error {
	rb, err := l.runBackend()
	if err != nil {
		return err
	}
	return rb.CancelRun(ctx, runID)
}

// RunEvents implements svc.RunBackend.
func (l *Local) RunEvents(ctx context.Context, runID string, after int64) (<-chan svc.RunEvent, error) {
	rb, err := l.runBackend()
	if err != nil {
		return nil, err
	}
	return rb.RunEvents(ctx, runID, after)
}

package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/svc-dev/svc"
)

// A run (POST /agents/{name}/run, POST /groups/{name}/run) whose client
// sends Accept: text/event-stream is answered as an SSE stream: a "delta"
// frame for each coalesced fragment of the answers as the models stream
// them, then one "result" frame with the AgentResult (or the group's
// result), or one "error" frame with the problem+json document the plain
// run would have answered with. The status is 200 once the stream has
// started: what went wrong is in the error frame.

// deltaQueue is how many deltas wait for a slow client before the next
// are dropped (and counted in the result frame's "deltas_dropped" SSE
// comment). The result itself is never dropped.
const deltaQueue = 256

// deltaFrame is the data of a "delta" frame.
type deltaFrame struct {
	Agent  string `json:"agent"`
	TaskID string `json:"task_id"`
	SpanID string `json:"span_id,omitempty"`
	Index  int    `json:"index"`
	Text   string `json:"text"`
}

// wantsEventStream reports whether the client of a run asked for its
// answer as an event stream.
func wantsEventStream(r *http.Request) bool {
	return streamAccept(r) == svc.MediaEventStream
}

// runStreamed runs call with a DeltaFunc in its context and answers as the
// comment above says.
func (h *handlers) runStreamed(w http.ResponseWriter, r *http.Request, call func(ctx context.Context) (any, error)) error {
	deltas := make(chan svc.Delta, deltaQueue)
	var dropped atomic.Int64
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	ctx = svc.WithDeltas(ctx, svc.DeltaFunc(func(d svc.Delta) {
		select {
		case deltas <- d:
		default:
			dropped.Add(1)
		}
	}))
	out, err := startSSE(w, r, h.writeTimeout)
	if err != nil {
		return fmt.Errorf("server: run stream: %w", err)
	}
	defer out.end()
	type answer struct {
		v   any
		err error
	}
	done := make(chan answer, 1)
	go func() {
		v, err := call(ctx)
		done <- answer{v, err}
	}()
	// The run is waited for on every path: it is this request's, and ends
	// soon once ctx is cancelled.
	var final *answer
	defer func() {
		if final == nil {
			cancel()
			<-done
		}
	}()
	idle := time.NewTimer(h.heartbeat)
	defer idle.Stop()
	writeDelta := func(d svc.Delta) bool {
		data, _ := json.Marshal(deltaFrame{Agent: d.Agent, TaskID: d.TaskID, SpanID: d.SpanID, Index: d.Index, Text: d.Text})
		return out.write(fmt.Appendf(nil, "event: delta\ndata: %s\n\n", data))
	}
	for {
		select {
		case d := <-deltas:
			if !writeDelta(d) {
				return nil // the client has gone
			}
			idle.Reset(h.heartbeat)
		case a := <-done:
			final = &a
			for drained := false; !drained; {
				select {
				case d := <-deltas:
					if !writeDelta(d) {
						return nil
					}
				default:
					drained = true
				}
			}
			if n := dropped.Load(); n > 0 {
				if !out.write(fmt.Appendf(nil, ": deltas_dropped %d\n\n", n)) {
					return nil
				}
			}
			if a.err != nil {
				status, p := problemOf(w, r, a.err)
				out.write(fmt.Appendf(nil, "event: error\ndata: %s\n\n", problemBody(w, r, status, p)))
				return nil
			}
			data, err := json.Marshal(a.v)
			if err != nil {
				return fmt.Errorf("server: encoding a run's result: %w", err)
			}
			out.write(fmt.Appendf(nil, "event: result\ndata: %s\n\n", data))
			return nil
		case <-idle.C:
			if !out.write([]byte(": ping\n\n")) {
				return nil
			}
			idle.Reset(h.heartbeat)
		}
	}
}

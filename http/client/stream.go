package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"net/http"
	"net/url"

	svc "github.com/svc-dev/svc"
)

// StreamEvent is one event of a run streamed as it executes (RunStream):
// a Delta, a coalesced fragment of an answer as the model streams it, or,
// last, the run's Result.
type StreamEvent struct {
	// Delta is set (Result is nil) on a fragment.
	Delta svc.Delta
	// Result is set on the last event, the run's AgentResult, the same as
	// Run's.
	Result *svc.AgentResult
}

// deltaFrame is the data of a run stream's "delta" frame.
type deltaFrame struct {
	Agent  string `json:"agent"`
	TaskID string `json:"task_id"`
	SpanID string `json:"span_id"`
	Index  int    `json:"index"`
	Text   string `json:"text"`
}

// RunStream is Run answered as an event stream (POST /agents/{name}/run
// with Accept: text/event-stream): it yields the deltas of the answer as
// they come, then one event with the Result. A run that fails before it
// has a result (an unknown agent, a cancelled run, a token budget
// exceeded) yields the same *svc.Error Run returns, as the last pair;
// so does a failed exchange. Deltas the server had to drop for a slow
// reader are missing (a gap in Delta.Index); the result never is. Like
// RunEvents, the stream is bounded by ctx, not by the client's timeout.
// Stopping the loop early closes the connection, which cancels the run.
func (c *Client) RunStream(ctx context.Context, agent string, task svc.TaskSpec) iter.Seq2[StreamEvent, error] {
	return func(yield func(StreamEvent, error) bool) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		id := runRequestID(ctx, task)
		body, err := json.Marshal(runRequest{Task: task, RequestID: id})
		if err != nil {
			yield(StreamEvent{}, svc.Wrap(svc.KindSpecValidation, err, "client: encoding the request"))
			return
		}
		path := "/agents/" + url.PathEscape(agent) + "/run"
		resp, err := c.post(ctx, path, id, body)
		if err != nil {
			yield(StreamEvent{}, err)
			return
		}
		defer resp.Body.Close()
		var (
			final   bool
			stopped bool
		)
		readErr := readSSEEvents(resp.Body, nil, func(event string, data []byte, _ int64) bool {
			switch event {
			case "delta":
				var f deltaFrame
				if err := json.Unmarshal(data, &f); err != nil {
					return true // not ours to fail the run for
				}
				d := svc.Delta{Agent: f.Agent, TaskID: f.TaskID, SpanID: f.SpanID, TraceID: id, Index: f.Index, Text: f.Text}
				if !yield(StreamEvent{Delta: d}, nil) {
					stopped = true
					return false
				}
				return true
			case "result":
				final = true
				var res svc.AgentResult
				if err := json.Unmarshal(data, &res); err != nil {
					yield(StreamEvent{}, svc.Wrap(svc.KindRuntime, err, fmt.Sprintf("client: decoding the result of POST %s", path)))
					return false
				}
				yield(StreamEvent{Result: &res}, nil)
				return false
			case "error":
				final = true
				var st struct {
					Status int `json:"status"`
				}
				_ = json.Unmarshal(data, &st)
				yield(StreamEvent{}, errorFromResponse(st.Status, "application/problem+json", data))
				return false
			}
			return true
		})
		if final || stopped {
			return
		}
		if readErr != nil || ctx.Err() != nil {
			yield(StreamEvent{}, transportError(firstErr(context.Cause(ctx), readErr)))
			return
		}
		yield(StreamEvent{}, svc.Errorf(svc.KindRuntime, "client: POST %s: the event stream ended without a result", path))
	}
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// post sends body to path asking for an event stream, and returns the
// response once it is one; an error answer is rebuilt as Run's would be.
func (c *Client) post(ctx context.Context, path, requestID string, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(body))
	if err != nil {
		return nil, svc.Wrap(svc.KindSpecValidation, err, "client: building the request")
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(requestIDHeader, requestID)
	return c.doStream(req, path)
}

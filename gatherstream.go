package svc

import (
	"context"
	"iter"
	"time"
)

// GatherStreamer is a Backend that also gathers as a stream: tasks are
// read as the batch is consumed and results come back as they finish.
// The runtime and both clients implement it.
type GatherStreamer interface {
	// GatherStream runs every task of tasks on one agent, at most
	// maxConcurrency at once (as Gather checks it), and yields each
	// result as it finishes, with the task's index in tasks (0-based,
	// in the order tasks yields them). tasks is read only as far ahead as
	// a bounded window (ReadAhead) past the tasks in flight, so neither
	// side holds the whole batch.
	//
	// A task whose Invalid is set, or whose input its agent refuses,
	// fails as its own result, and the batch goes on. A rejection of the
	// whole call (an unknown agent, max_concurrency out of range, the
	// runtime shutting down) is yielded as an error before any result;
	// an end of the batch before every task was answered (ctx ended, the
	// runtime stopped, a transport failed) is yielded as an error after
	// the results that came. Stopping the iteration early, or ending
	// ctx, cancels what remains; nothing keeps running once the
	// iteration has returned.
	//
	// tasks is read on another goroutine than the caller's: it must not
	// block forever (ending ctx does not interrupt it).
	GatherStream(ctx context.Context, agent string, tasks iter.Seq[TaskSpec], maxConcurrency int) iter.Seq2[GatherItem, error]
}

// ReadAhead is how many tasks a streamed gather reads beyond those in
// flight: its window is maxConcurrency + ReadAhead(maxConcurrency) tasks,
// counting the results not yet taken by the consumer.
func ReadAhead(maxConcurrency int) int { return max(maxConcurrency, 16) }

// GatherItem is one result of a streamed gather: a line of
// application/x-ndjson, {"index": 3, "result": {...}}.
type GatherItem struct {
	// Index is the task's place in the batch, 0-based.
	Index  int         `json:"index"`
	Result AgentResult `json:"result"`
	// More is a hint, never on the wire: another result was already
	// waiting when this one was handed over, so a writer may hold this
	// one back and send both at once.
	More bool `json:"-"`
}

// GatherSummary is the last line of a streamed gather,
// {"summary": {...}}: what the batch did, counted over the results sent.
type GatherSummary struct {
	TaskCount    int     `json:"task_count"`
	SuccessCount int     `json:"success_count"`
	FailureCount int     `json:"failure_count"`
	TokensUsed   int64   `json:"tokens_used"`
	CostUSD      float64 `json:"cost_usd"`
	// DurationMS is the batch's wall time, from the request to its last
	// result.
	DurationMS float64 `json:"duration_ms"`
	// Error is set when the batch ended before every task read was
	// answered (the client went away, the server shut down): the results
	// sent are all there is.
	Error *ErrorInfo `json:"error,omitempty"`
}

// Add counts one result.
func (s *GatherSummary) Add(r *AgentResult) {
	s.TaskCount++
	if r.Success {
		s.SuccessCount++
	} else {
		s.FailureCount++
	}
	s.TokensUsed += r.Metadata.TokensUsed
	s.CostUSD += r.Metadata.CostUSD
}

// Finish sets the wall time since start and the error the batch ended
// with, if any.
func (s *GatherSummary) Finish(start time.Time, err error) {
	s.DurationMS = float64(time.Since(start).Microseconds()) / 1000
	s.Error = ErrorInfoOf(err)
}

// StreamLine is one line of a streamed gather's answer: a result (Index
// and Result set) or the summary, which ends the stream.
type StreamLine struct {
	Index   *int           `json:"index,omitempty"`
	Result  *AgentResult   `json:"result,omitempty"`
	Summary *GatherSummary `json:"summary,omitempty"`
}

// Gather media types.
const (
	// MediaNDJSON is newline-delimited JSON: a streamed gather's tasks
	// (one TaskSpec a line) and its results (one StreamLine a line).
	MediaNDJSON = "application/x-ndjson"
	// MediaEventStream is server-sent events: a streamed gather's results
	// as "result" frames, then a "summary" frame.
	MediaEventStream = "text/event-stream"
)

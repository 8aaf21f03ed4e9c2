package svc

import (
	"context"
	"iter"
)

// BatchModel is a Model whose provider also takes calls in batches, at a
// discount and with a latency of minutes to hours (OpenAI's Batch API,
// Anthropic's Message Batches): the calls are submitted together, the
// provider answers them within its window, and the answers are read back
// by each call's CustomID. A batch of mode "provider" (POST /batches)
// makes its model calls this way. Implementations are safe for
// concurrent use.
type BatchModel interface {
	Model
	// SubmitCalls submits calls as one provider batch and returns its
	// id. CustomIDs are unique within calls. A call that could not be
	// encoded fails the whole submission, with nothing submitted.
	SubmitCalls(ctx context.Context, calls []BatchCall) (string, error)
	// PollCalls reports a provider batch's progress. like, here and
	// below, is a call of the batch: the calls of one batch share their
	// settings (the endpoint and key among them) and output schema (how
	// an answer is read).
	PollCalls(ctx context.Context, id string, like *ModelRequest) (ProviderBatch, error)
	// CallAnswers yields the answers of an ended provider batch, one per
	// call it answered, in any order.
	CallAnswers(ctx context.Context, id string, like *ModelRequest) iter.Seq2[BatchAnswer, error]
	// CancelCalls asks the provider to stop a batch; the calls it has
	// answered keep their answers.
	CancelCalls(ctx context.Context, id string, like *ModelRequest) error
}

// BatchCall is one model call of a provider batch.
type BatchCall struct {
	CustomID string
	Request  ModelRequest
}

// ProviderBatch is a provider batch's progress as its provider reports it.
type ProviderBatch struct {
	ID string
	// Status is the provider's own word for it (OpenAI: validating,
	// in_progress, completed, failed, expired, cancelled, ...;
	// Anthropic: in_progress, canceling, ended).
	Status string
	// Ended is set once no more answers will come: CallAnswers then
	// yields all there are.
	Ended bool
	// Total, Succeeded and Failed count its calls.
	Total, Succeeded, Failed int64
	// Error says why the provider answered none or only some of the
	// calls (a batch that failed validation, expired or was cancelled);
	// empty otherwise.
	Error string
}

// BatchAnswer is the answer to one call of a provider batch.
type BatchAnswer struct {
	CustomID string
	Response ModelResponse
	// Err is the call's failure, the provider's error for it; Response is
	// empty then.
	Err error
}

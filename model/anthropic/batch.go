package anthropic

import (
	"context"
	"encoding/json"
	"iter"
	"slices"
	"strings"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/model"
)

// The Message Batches API (svc.BatchModel): the calls go up in one
// create call (POST /v1/messages/batches), each with the params Generate
// would send; the batch is polled (GET /v1/messages/batches/{id}) until
// its processing_status is "ended", and its results read as JSONL
// (GET .../results), each read as Generate reads an answer.

var _ svc.BatchModel = (*anthropicModel)(nil)

// batchCall is what the calls of one batch share.
type batchCall struct {
	name string
	s    settings
	opts []option.RequestOption
}

func (m *anthropicModel) prepare(like *svc.ModelRequest) (*batchCall, error) {
	s, err := parseSettings(like.Settings)
	if err != nil {
		return nil, svc.Wrap(svc.KindSpecValidation, err, "anthropic:"+m.name+" model_settings")
	}
	name := like.Model
	if name == "" {
		name = m.name
	}
	opts, err := m.callOptions(name, &s)
	if err != nil {
		return nil, err
	}
	return &batchCall{name: name, s: s, opts: opts}, nil
}

// SubmitCalls makes a message batch of the calls.
func (m *anthropicModel) SubmitCalls(ctx context.Context, calls []svc.BatchCall) (string, error) {
	if len(calls) == 0 {
		return "", svc.Errorf(svc.KindSpecValidation, "anthropic batch: no calls")
	}
	bc, err := m.prepare(&calls[0].Request)
	if err != nil {
		return "", err
	}
	type request struct {
		CustomID string          `json:"custom_id"`
		Params   json.RawMessage `json:"params"`
	}
	reqs := make([]request, 0, len(calls))
	var betas []string
	for i := range calls {
		req := &calls[i].Request
		if req.OnDelta != nil {
			return "", svc.Errorf(svc.KindSpecValidation, "anthropic batch: call %s: streaming is not for batches", calls[i].CustomID)
		}
		b, err := buildRequest(bc.name, req, &bc.s)
		if err != nil {
			return "", &model.ProviderError{Provider: Provider, Model: bc.name, Class: model.ClassInvalid, Message: err.Error(), Err: err}
		}
		raw, err := json.Marshal(b.params)
		if err != nil {
			return "", svc.Wrap(svc.KindSpecValidation, err, "anthropic batch: call "+calls[i].CustomID)
		}
		reqs = append(reqs, request{calls[i].CustomID, raw})
		for _, beta := range b.betas {
			if !slices.Contains(betas, beta) {
				betas = append(betas, beta)
			}
		}
	}
	body, err := json.Marshal(map[string]any{"requests": reqs})
	if err != nil {
		return "", svc.Wrap(svc.KindSpecValidation, err, "anthropic batch")
	}
	// The params are Generate's MessageNewParams, which the SDK's batch
	// request type does not take: the body goes as encoded here.
	opts := append(slices.Clone(bc.opts), option.WithRequestBody("application/json", body))
	if len(betas) > 0 {
		opts = append(opts, option.WithHeader("anthropic-beta", strings.Join(betas, ",")))
	}
	b, err := m.client.Messages.Batches.New(ctx, anthropic.MessageBatchNewParams{}, opts...)
	if err != nil {
		return "", callError(ctx, bc.name, err, nil)
	}
	return b.ID, nil
}

// PollCalls reads the batch's processing status.
func (m *anthropicModel) PollCalls(ctx context.Context, id string, like *svc.ModelRequest) (svc.ProviderBatch, error) {
	bc, err := m.prepare(like)
	if err != nil {
		return svc.ProviderBatch{}, err
	}
	b, err := m.client.Messages.Batches.Get(ctx, id, anthropic.MessageBatchGetParams{}, bc.opts...)
	if err != nil {
		return svc.ProviderBatch{}, callError(ctx, bc.name, err, nil)
	}
	c := b.RequestCounts
	pb := svc.ProviderBatch{ID: b.ID, Status: string(b.ProcessingStatus), Ended: b.ProcessingStatus == anthropic.MessageBatchProcessingStatusEnded,
		Total: c.Processing + c.Succeeded + c.Errored + c.Canceled + c.Expired, Succeeded: c.Succeeded,
		Failed: c.Errored + c.Canceled + c.Expired}
	switch {
	case c.Expired > 0:
		pb.Error = "the provider batch expired before this call was answered"
	case c.Canceled > 0:
		pb.Error = "the provider batch was cancelled before this call was answered"
	}
	return pb, nil
}

// CallAnswers reads the batch's results.
func (m *anthropicModel) CallAnswers(ctx context.Context, id string, like *svc.ModelRequest) iter.Seq2[svc.BatchAnswer, error] {
	return func(yield func(svc.BatchAnswer, error) bool) {
		bc, err := m.prepare(like)
		if err != nil {
			yield(svc.BatchAnswer{}, err)
			return
		}
		b, err := buildRequest(bc.name, like, &bc.s)
		if err != nil {
			yield(svc.BatchAnswer{}, &model.ProviderError{Provider: Provider, Model: bc.name, Class: model.ClassInvalid, Message: err.Error(), Err: err})
			return
		}
		st := m.client.Messages.Batches.ResultsStreaming(ctx, id, anthropic.MessageBatchResultsParams{}, bc.opts...)
		defer st.Close()
		for st.Next() {
			r := st.Current()
			a := svc.BatchAnswer{CustomID: r.CustomID}
			switch r.Result.Type {
			case "succeeded":
				msg := r.Result.Message
				a.Response, a.Err = b.response(bc.name, &msg, nil)
			case "errored":
				e := r.Result.Error.Error
				a.Err = &model.ProviderError{Provider: Provider, Model: bc.name, Class: errorClass(e.Type), Message: e.Type + ": " + e.Message}
			default:
				a.Err = &model.ProviderError{Provider: Provider, Model: bc.name, Class: model.ClassServer,
					Message: "the provider batch's call was " + r.Result.Type + " before it was answered"}
			}
			if !yield(a, nil) {
				return
			}
		}
		if err := st.Err(); err != nil {
			yield(svc.BatchAnswer{}, callError(ctx, bc.name, err, nil))
		}
	}
}

// errorClass is the class of an errored result's error type.
func errorClass(typ string) model.Class {
	switch typ {
	case "invalid_request_error", "not_found_error", "permission_error", "billing_error":
		return model.ClassInvalid
	case "authentication_error":
		return model.ClassAuth
	case "rate_limit_error":
		return model.ClassRateLimit
	case "overloaded_error":
		return model.ClassOverloaded
	case "timeout_error":
		return model.ClassTimeout
	}
	return model.ClassServer
}

// CancelCalls cancels the batch.
func (m *anthropicModel) CancelCalls(ctx context.Context, id string, like *svc.ModelRequest) error {
	bc, err := m.prepare(like)
	if err != nil {
		return err
	}
	if _, err := m.client.Messages.Batches.Cancel(ctx, id, anthropic.MessageBatchCancelParams{}, bc.opts...); err != nil {
		return callError(ctx, bc.name, err, nil)
	}
	return nil
}

package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/model"
)

// DefaultStreamIdleTimeout bounds the wait for a stream's next chunk (and
// for its first, once the response's headers came) when the agent's
// model_settings do not say stream_idle_timeout_ms. It is generous: a
// reasoning model may think for minutes before its first token.
const DefaultStreamIdleTimeout = 5 * time.Minute

// errStreamIdle ends a stream that sent nothing for its idle timeout.
var errStreamIdle = errors.New("stream idle")

// generateStream makes the call with stream: true and include_usage,
// handing each text fragment to onDelta as its chunk arrives. The chunks
// are assembled by the SDK's accumulator (tool-call arguments from their
// fragments, usage from the last chunk) into the answer the plain call
// would have given, which decodeResponse reads the same way. A stream
// that sends nothing for its idle timeout fails with ClassTimeout, one
// cut short or malformed with ClassTimeout or ClassServer, as the plain
// call's failures are classified.
func (m *chatModel) generateStream(ctx, callCtx context.Context, name, key string, base *url.URL,
	body sdk.ChatCompletionNewParams, out outputMode, s *settings, onDelta func(string)) (svc.ModelResponse, error) {
	body.StreamOptions = sdk.ChatCompletionStreamOptionsParam{IncludeUsage: sdk.Bool(true)}
	idle := s.streamIdle
	if idle <= 0 {
		idle = DefaultStreamIdleTimeout
	}
	sctx, cancel := context.WithCancelCause(callCtx)
	defer cancel(nil)
	var httpResp *http.Response
	opts := []option.RequestOption{option.WithBaseURL(base.String()), option.WithAPIKey(key), option.WithResponseInto(&httpResp)}
	if s.maxRetries >= 0 {
		opts = append(opts, option.WithMaxRetries(s.maxRetries))
	}
	stream := m.chat.NewStreaming(sctx, body, opts...)
	defer stream.Close()
	timer := time.AfterFunc(idle, func() { cancel(errStreamIdle) })
	defer timer.Stop()
	var acc sdk.ChatCompletionAccumulator
	for stream.Next() {
		timer.Reset(idle)
		chunk := stream.Current()
		if !acc.AddChunk(chunk) {
			return svc.ModelResponse{}, streamBroken(name, httpResp, model.ClassServer, "a chunk that does not continue the stream")
		}
		if len(chunk.Choices) > 0 && chunk.Choices[0].Delta.Content != "" {
			onDelta(chunk.Choices[0].Delta.Content)
		}
	}
	if err := stream.Err(); err != nil {
		switch {
		case ctx.Err() != nil:
			return svc.ModelResponse{}, fmt.Errorf("openai model %s: %w", name, ctx.Err())
		case errors.Is(context.Cause(sctx), errStreamIdle):
			return svc.ModelResponse{}, streamBroken(name, httpResp, model.ClassTimeout,
				fmt.Sprintf("no chunk for %v (stream_idle_timeout_ms)", idle))
		}
		var apiErr *sdk.Error
		var syntax *json.SyntaxError
		var typeErr *json.UnmarshalTypeError
		switch {
		case errors.As(err, &apiErr), httpResp == nil || httpResp.StatusCode >= 400:
			// The call itself failed, before any chunk.
			return svc.ModelResponse{}, callError(ctx, name, err, httpResp)
		case errors.As(err, &syntax), errors.As(err, &typeErr):
			return svc.ModelResponse{}, streamBroken(name, httpResp, model.ClassServer, "malformed chunk: "+err.Error())
		}
		// Cut short: the connection dropped or reset mid-stream.
		return svc.ModelResponse{}, streamBroken(name, httpResp, transportClass(err), "stream cut short: "+err.Error())
	}
	if len(acc.Choices) == 0 || acc.Choices[0].FinishReason == "" {
		// The server closed the stream without finishing the answer (no
		// finish_reason): what arrived is not the whole answer.
		return svc.ModelResponse{}, streamBroken(name, httpResp, model.ClassTimeout, "the stream ended before the answer finished")
	}
	raw, err := json.Marshal(accumulated(&acc.ChatCompletion))
	if err != nil {
		return svc.ModelResponse{}, streamBroken(name, httpResp, model.ClassServer, "assembling the streamed answer: "+err.Error())
	}
	return decodeResponse(name, httpResp.StatusCode, raw, out)
}

// streamBroken is the error of a stream that failed after its response
// began.
func streamBroken(name string, resp *http.Response, class model.Class, msg string) error {
	pe := &model.ProviderError{Provider: Provider, Model: name, Class: class, Message: msg}
	if resp != nil {
		pe.Status = resp.StatusCode
	}
	return pe
}

// accumulated is the streamed answer as the plain call's body would have
// carried it: the wire shape decodeResponse reads.
func accumulated(c *sdk.ChatCompletion) wireAccumulated {
	msg := c.Choices[0].Message
	w := wireAccumulated{Usage: wireAccUsage{
		PromptTokens: c.Usage.PromptTokens, CompletionTokens: c.Usage.CompletionTokens, TotalTokens: c.Usage.TotalTokens,
	}}
	w.Usage.PromptTokensDetails.CachedTokens = c.Usage.PromptTokensDetails.CachedTokens
	am := wireAccMessage{Refusal: msg.Refusal}
	if msg.Content != "" || len(msg.ToolCalls) == 0 {
		am.Content = &msg.Content
	}
	for _, tc := range msg.ToolCalls {
		var call wireAccToolCall
		call.ID, call.Type = tc.ID, "function"
		call.Function.Name, call.Function.Arguments = tc.Function.Name, tc.Function.Arguments
		am.ToolCalls = append(am.ToolCalls, call)
	}
	w.Choices = []wireAccChoice{{Message: am}}
	return w
}

type (
	wireAccumulated struct {
		Choices []wireAccChoice `json:"choices"`
		Usage   wireAccUsage    `json:"usage"`
	}
	wireAccChoice struct {
		Message wireAccMessage `json:"message"`
	}
	wireAccMessage struct {
		Content   *string           `json:"content"`
		Refusal   string            `json:"refusal,omitempty"`
		ToolCalls []wireAccToolCall `json:"tool_calls,omitempty"`
	}
	wireAccToolCall struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	}
	wireAccUsage struct {
		PromptTokens        int64 `json:"prompt_tokens"`
		CompletionTokens    int64 `json:"completion_tokens"`
		TotalTokens         int64 `json:"total_tokens"`
		PromptTokensDetails struct {
			CachedTokens int64 `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	}
)

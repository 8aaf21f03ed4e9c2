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

// generateStream makes the call with stream: true and include_usage,
// handing each text fragment to onDelta as its chunk arrives. The chunks
// are assembled by the SDK's accumulator (tool-call arguments from their
// fragments, usage from the last chunk) into the answer the plain call
// would have given, which decodeResponse reads the same way. A stream
// that sends nothing for its idle timeout fails with ClassTimeout, one
// cut short or malformed with ClassTimeout or ClassServer, as the plain
// call's failures are classified.
func (m *chatModel) generateStream(ctx, callCtx context.Context, name, key string, base *url.URL,
	body sdk.ChatCompletionNewParams, out outputMode, s *settings, onDelta func(string)) (resp svc.ModelResponse, err error) {
	body.StreamOptions = sdk.ChatCompletionStreamOptionsParam{IncludeUsage: sdk.Bool(true)}
	idle := s.streamIdle
	if idle <= 0 {
		idle = DefaultStreamIdleTimeout
	}
	sctx, watch := model.WatchIdle(callCtx, idle)
	defer watch.Stop()
	var httpResp *http.Response
	defer func() { resp, err = withHint(resp, err, httpResp) }()
	opts := append(m.auth(base, key), option.WithResponseInto(&httpResp))
	if s.maxRetries >= 0 {
		opts = append(opts, option.WithMaxRetries(s.maxRetries))
	}
	stream := m.chat.NewStreaming(sctx, body, opts...)
	defer stream.Close()
	watch.Touch()
	var acc sdk.ChatCompletionAccumulator
	for stream.Next() {
		watch.Touch()
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
		case watch.Fired():
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
	wc := accumulated(&acc.ChatCompletion)
	return readAnswer(name, httpResp.StatusCode, &wc, out)
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
// carried it, for readAnswer.
func accumulated(c *sdk.ChatCompletion) wireCompletion {
	msg := c.Choices[0].Message
	var wc wireCompletion
	wc.Usage.PromptTokens = tokenCount(c.Usage.PromptTokens)
	wc.Usage.CompletionTokens = tokenCount(c.Usage.CompletionTokens)
	wc.Usage.TotalTokens = tokenCount(c.Usage.TotalTokens)
	wc.Usage.PromptTokensDetails.CachedTokens = tokenCount(c.Usage.PromptTokensDetails.CachedTokens)
	m := &wireMessage{Refusal: msg.Refusal}
	if msg.Content != "" {
		m.Content = jsonString(msg.Content)
	}
	for _, tc := range msg.ToolCalls {
		call := wireToolCall{ID: tc.ID, Type: "function"}
		call.Function.Name, call.Function.Arguments = tc.Function.Name, jsonString(tc.Function.Arguments)
		m.ToolCalls = append(m.ToolCalls, call)
	}
	wc.Choices = []wireChoice{{Message: m}}
	return wc
}

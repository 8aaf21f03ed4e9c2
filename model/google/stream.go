package google

import (
	"context"
	"fmt"

	"google.golang.org/genai"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/model"
)

// stream makes the call with streamGenerateContent, handing each text
// fragment to onDelta as its chunk arrives and assembling the chunks into
// the answer the plain call gives.
func (m *geminiModel) stream(ctx, callCtx context.Context, c *genai.Client, name string, contents []*genai.Content,
	cfg *genai.GenerateContentConfig, s *settings, structured bool, last *lastResponse, onDelta func(string)) (svc.ModelResponse, error) {
	idle := s.streamIdle
	if idle <= 0 {
		idle = DefaultStreamIdleTimeout
	}
	sctx, watch := model.WatchIdle(callCtx, idle)
	defer watch.Stop()
	watch.Touch()
	var a assembled
	for r, err := range c.Models.GenerateContentStream(sctx, name, contents, cfg) {
		if err != nil {
			switch {
			case ctx.Err() != nil:
				return svc.ModelResponse{}, fmt.Errorf("google model %s: %w", name, ctx.Err())
			case watch.Fired():
				status, _ := last.get()
				return svc.ModelResponse{}, &model.ProviderError{Provider: m.provider, Model: name, Status: status, Class: model.ClassTimeout,
					Message: fmt.Sprintf("no chunk for %v (stream_idle_timeout_ms)", idle)}
			}
			return svc.ModelResponse{}, m.callError(ctx, name, err, last)
		}
		watch.Touch()
		before := a.text.Len()
		if err := a.add(r); err != nil {
			return svc.ModelResponse{}, m.malformed(name, last, err.Error())
		}
		if t := a.text.String()[before:]; t != "" {
			onDelta(t)
		}
	}
	if ctx.Err() != nil {
		return svc.ModelResponse{}, fmt.Errorf("google model %s: %w", name, ctx.Err())
	}
	if !a.finished {
		status, _ := last.get()
		return svc.ModelResponse{}, &model.ProviderError{Provider: m.provider, Model: name, Status: status, Class: model.ClassTimeout,
			Message: "the stream ended before the answer finished"}
	}
	out, err := a.response(structured)
	if err != nil {
		return svc.ModelResponse{}, m.malformed(name, last, err.Error())
	}
	return out, nil
}

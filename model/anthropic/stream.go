package anthropic

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"

	"github.com/svc-dev/svc/model"
)

// DefaultStreamIdleTimeout bounds the wait for a stream's next event when
// model_settings do not say stream_idle_timeout_ms. The Messages API sends
// a ping event every few seconds while the model thinks, so a minute of
// silence is a stalled stream.
const DefaultStreamIdleTimeout = time.Minute

// generateStream makes the call streamed, handing each text_delta to
// onDelta as it arrives; the events are accumulated (the SDK's
// Message.Accumulate: tool inputs from their input_json_delta fragments,
// usage from message_start and message_delta) into the Message the plain
// call returns, read the same way. A stream silent for its idle timeout
// fails with ClassTimeout; one cut short before message_stop with
// ClassTimeout; an error event or a malformed one as the plain call's
// failures are classified.
func (m *anthropicModel) generateStream(ctx context.Context, name string, b *built, opts []option.RequestOption,
	s *settings, onDelta func(string)) (*anthropic.Message, *http.Response, error) {
	idle := s.streamIdle
	if idle <= 0 {
		idle = DefaultStreamIdleTimeout
	}
	sctx, watch := model.WatchIdle(ctx, idle)
	defer watch.Stop()
	var res *http.Response
	stream := m.client.Messages.NewStreaming(sctx, b.params, append(opts, option.WithResponseInto(&res))...)
	defer stream.Close()
	watch.Touch()
	var msg anthropic.Message
	stopped := false
	for stream.Next() {
		watch.Touch()
		ev := stream.Current()
		if err := msg.Accumulate(ev); err != nil {
			return nil, res, &model.ProviderError{Provider: Provider, Model: name, Status: status(res),
				Class: model.ClassServer, Message: "malformed stream: " + err.Error(), Err: err}
		}
		switch ev.Type {
		case "content_block_delta":
			if ev.Delta.Type == "text_delta" && ev.Delta.Text != "" {
				onDelta(ev.Delta.Text)
			}
		case "message_stop":
			stopped = true
		}
	}
	if err := stream.Err(); err != nil {
		if ctx.Err() == nil && watch.Fired() {
			return nil, res, &model.ProviderError{Provider: Provider, Model: name, Status: status(res), Class: model.ClassTimeout,
				Message: fmt.Sprintf("no stream event for %v (stream_idle_timeout_ms)", idle), Err: err}
		}
		return nil, res, callError(ctx, name, err, res)
	}
	if !stopped {
		return nil, res, &model.ProviderError{Provider: Provider, Model: name, Status: status(res), Class: model.ClassTimeout,
			Message: "the stream ended before message_stop"}
	}
	return &msg, res, nil
}

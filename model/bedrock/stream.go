package bedrock

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/model"
)

// stream makes the call with ConverseStream, handing each text delta to
// onDelta and assembling the events into the plain call's answer.
func (m *bedrockModel) stream(ctx, callCtx context.Context, c *bedrockruntime.Client, name string,
	in *bedrockruntime.ConverseInput, s *settings, onDelta func(string)) (svc.ModelResponse, error) {
	idle := s.streamIdle
	if idle <= 0 {
		idle = DefaultStreamIdleTimeout
	}
	sctx, watch := model.WatchIdle(callCtx, idle)
	defer watch.Stop()
	out, err := c.ConverseStream(sctx, &bedrockruntime.ConverseStreamInput{
		ModelId: in.ModelId, Messages: in.Messages, System: in.System, InferenceConfig: in.InferenceConfig, ToolConfig: in.ToolConfig,
	})
	if err != nil {
		return svc.ModelResponse{}, callError(ctx, name, err)
	}
	es := out.GetStream()
	defer es.Close()
	watch.Touch()
	var a assembled
	inputs := map[int32][]byte{} // tool-use input fragments by block index
	blocks := map[int32]int{}    // block index -> index in a.calls
	stopped := false
	for ev := range es.Events() {
		watch.Touch()
		switch e := ev.(type) {
		case *types.ConverseStreamOutputMemberContentBlockStart:
			if tu, ok := e.Value.Start.(*types.ContentBlockStartMemberToolUse); ok {
				blocks[aws.ToInt32(e.Value.ContentBlockIndex)] = len(a.calls)
				a.calls = append(a.calls, svc.ToolCall{ID: aws.ToString(tu.Value.ToolUseId), Name: aws.ToString(tu.Value.Name)})
			}
		case *types.ConverseStreamOutputMemberContentBlockDelta:
			i := aws.ToInt32(e.Value.ContentBlockIndex)
			switch d := e.Value.Delta.(type) {
			case *types.ContentBlockDeltaMemberText:
				if d.Value != "" {
					a.text.WriteString(d.Value)
					onDelta(d.Value)
				}
			case *types.ContentBlockDeltaMemberToolUse:
				inputs[i] = append(inputs[i], aws.ToString(d.Value.Input)...)
			}
		case *types.ConverseStreamOutputMemberMessageStop:
			stopped = true
		case *types.ConverseStreamOutputMemberMetadata:
			a.usage = e.Value.Usage
		}
	}
	if err := es.Err(); err != nil {
		switch {
		case ctx.Err() != nil:
			return svc.ModelResponse{}, fmt.Errorf("bedrock model %s: %w", name, ctx.Err())
		case watch.Fired():
			return svc.ModelResponse{}, &model.ProviderError{Provider: Provider, Model: name, Status: 200, Class: model.ClassTimeout,
				Message: fmt.Sprintf("no event for %v (stream_idle_timeout_ms)", idle)}
		}
		return svc.ModelResponse{}, callError(ctx, name, err)
	}
	if ctx.Err() != nil {
		return svc.ModelResponse{}, fmt.Errorf("bedrock model %s: %w", name, ctx.Err())
	}
	if watch.Fired() {
		return svc.ModelResponse{}, &model.ProviderError{Provider: Provider, Model: name, Status: 200, Class: model.ClassTimeout,
			Message: fmt.Sprintf("no event for %v (stream_idle_timeout_ms)", idle)}
	}
	if !stopped {
		return svc.ModelResponse{}, &model.ProviderError{Provider: Provider, Model: name, Status: 200, Class: model.ClassTimeout,
			Message: "the stream ended before the answer finished"}
	}
	for bi, ci := range blocks {
		raw := inputs[bi]
		if len(raw) == 0 {
			raw = []byte("{}")
		}
		if !json.Valid(raw) {
			return svc.ModelResponse{}, &model.ProviderError{Provider: Provider, Model: name, Status: 200, Class: model.ClassServer,
				Message: "malformed response: tool use input is not JSON"}
		}
		a.calls[ci].Arguments = compact(raw)
	}
	return a.response(), nil
}

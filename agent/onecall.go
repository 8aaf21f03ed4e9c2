package agent

import (
	"context"
	"encoding/json"
	"slices"
	"strings"

	svc "github.com/svc-dev/svc"
)

// OneCall is an agent whose run is one model call, split in two for a
// provider's batch API (a batch of mode provider): Request is the call a
// run of a task's input makes, Output the run's output from the call's
// answer. What the loop does around that call is done here too: the
// input and output schemas and the pre_process and post_process hooks;
// what it does after (the corrective call of an invalid answer, the
// fallback models) is not, since it would need another batch.
type OneCall struct {
	c *Compiled
	// ModelID is the primary model's "provider:name", and Model its
	// batch API.
	ModelID string
	Model   svc.BatchModel
}

// OneCall returns c as a OneCall, or a SpecValidationError naming why a
// run of c is not one model call a provider batch can make: tools
// (builtin ones such as spawn_agents included), MCP servers, the
// provider's server tools, or a model whose provider has no batch API.
func (c *Compiled) OneCall() (*OneCall, error) {
	refuse := func(why string) error {
		return &svc.Error{Kind: svc.KindSpecValidation, Agent: c.Def.Name,
			Message: "agent " + c.Def.Name + " cannot run in a provider batch (mode provider), whose runs are one model call each: " + why}
	}
	if len(c.Tools) > 0 {
		names := make([]string, 0, len(c.Tools))
		for n := range c.Tools {
			names = append(names, n)
		}
		slices.Sort(names)
		return nil, refuse("it has tools (" + strings.Join(names, ", ") + "), and a model that calls one needs a second call")
	}
	if len(c.Sources) > 0 || len(c.Def.MCPServers) > 0 {
		return nil, refuse("it has MCP servers, whose tools need more calls")
	}
	if len(c.serverTools) > 0 {
		return nil, refuse("it uses the provider's server tools (" + strings.Join(c.serverTools, ", ") + ")")
	}
	if len(c.Models) == 0 {
		return nil, refuse("it has no model")
	}
	bm, ok := c.Models[0].Model.(svc.BatchModel)
	if !ok {
		return nil, refuse("its model " + c.Models[0].ID + " has no batch API here (the openai and anthropic providers have)")
	}
	return &OneCall{c: c, ModelID: c.Models[0].ID, Model: bm}, nil
}

// Agent is the agent's name.
func (o *OneCall) Agent() string { return o.c.Def.Name }

// Like is the call without its messages: what every call of the agent
// shares (instructions, output schema, settings).
func (o *OneCall) Like() svc.ModelRequest {
	_, name, _ := svc.ParseModelID(o.ModelID)
	return svc.ModelRequest{Model: name, Instructions: o.c.Def.Instructions, OutputSchema: o.c.outputSchema, Settings: o.c.settings}
}

// Request is the model call a run of input makes: the input checked
// against the input schema and through pre_process, as the first user
// message. Its error fails that task alone.
func (o *OneCall) Request(ctx context.Context, input json.RawMessage) (svc.ModelRequest, error) {
	input = compact(input)
	if len(input) == 0 {
		input = jsonNull
	}
	if err := o.c.ValidateInput(input); err != nil {
		return svc.ModelRequest{}, err
	}
	if h := o.c.Def.PreProcess; h != nil {
		r := runner{c: o.c, inv: &Invocation{Agent: o.c}}
		v, err := r.hook(ctx, h, input, ReasonPreProcess)
		if err != nil {
			return svc.ModelRequest{}, err
		}
		input = v
	}
	req := o.Like()
	req.Messages = []svc.Message{{Role: svc.RoleUser, Content: input}}
	return req, nil
}

// Output is the run's output from the call's answer: checked against
// the output schema (an invalid answer is an OutputValidationError: no
// corrective call) and through post_process.
func (o *OneCall) Output(ctx context.Context, resp *svc.ModelResponse) (json.RawMessage, error) {
	if len(resp.ToolCalls) > 0 {
		return nil, &svc.Error{Kind: svc.KindOutputValidation, Reason: ReasonInvalidOutput, Agent: o.c.Def.Name,
			Message: "agent " + o.c.Def.Name + ": the model called tools the agent does not have"}
	}
	out := resp.Output
	if len(out) == 0 {
		out = jsonNull
	}
	if o.c.Out != nil {
		if err := o.c.Out.Validate(out); err != nil {
			return nil, &svc.Error{Kind: svc.KindOutputValidation, Reason: ReasonInvalidOutput, Agent: o.c.Def.Name, Err: err,
				Message: "agent " + o.c.Def.Name + ": output does not match output_type (a provider batch makes no corrective call)"}
		}
	}
	if h := o.c.Def.PostProcess; h != nil {
		r := runner{c: o.c, inv: &Invocation{Agent: o.c}}
		return r.hook(ctx, h, out, ReasonPostProcess)
	}
	return out, nil
}

// Cost is the call's cost at the provider's batch price
// (model.PriceTable.BatchCost); known is false when the agent's price
// table has no price for the model.
func (o *OneCall) Cost(resp *svc.ModelResponse) (usd float64, known bool) {
	return o.c.Prices.BatchCost(o.ModelID, resp.InputTokens, resp.CachedInputTokens, resp.OutputTokens)
}

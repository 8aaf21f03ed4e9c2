// Package testmodel is the deterministic "test" model provider: test:echo
// answers with its input and test:fail always fails, with model_settings
// that add latency, token counts, scripted failures, fixed answers and tool
// calls. It needs no network and is meant for tests, examples and
// benchmarks. Asked to stream (svc.ModelRequest.OnDelta), it hands its
// answer over word by word, stream_interval_ms apart.
package testmodel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/internal/settingval"
	"github.com/svc-dev/svc/schema"
)

// Names are the model names the provider knows.
var Names = []string{"echo", "fail"}

// New returns a new test model. Each instance keeps its own call count for
// fail_times, so one instance should serve one agent.
func New(name string) (svc.Model, error) {
	if !slices.Contains(Names, name) {
		return nil, svc.Errorf(svc.KindRegistry, "test model %q: want echo or fail", name)
	}
	return &model{name: name}, nil
}

type model struct {
	name  string
	calls atomic.Int64
}

// Generate answers per the package doc. Its failures are plain errors (the
// agent loop gives them their kind), except bad model_settings, which are
// SpecValidationErrors, and cancellation, which wraps ctx.Err().
//
// Generate keeps a small frame: a call sleeping its latency_ms holds its
// goroutine, whose stack is the frames below this one plus this one, and a
// million sleeping calls should fit in 4 KiB stacks. The settings are
// parsed (and checked) in a frame of their own before the sleep, and again
// after it by respond, rather than kept here.
func (m *model) Generate(ctx context.Context, req svc.ModelRequest) (svc.ModelResponse, error) {
	// Count before anything can fail, so "the first N calls" means calls
	// made, whatever becomes of them.
	call := m.calls.Add(1)
	d, err := latency(req.Settings)
	if err != nil {
		return svc.ModelResponse{}, err
	}
	if err := wait(ctx, d); err != nil {
		return svc.ModelResponse{}, m.interrupted(err)
	}
	if req.OnDelta != nil {
		return m.stream(ctx, call, &req)
	}
	return m.respond(call, &req)
}

// stream is respond for a caller that asked for a stream: the answer's
// text goes to req.OnDelta word by word (each word with the spaces after
// it), stream_interval_ms apart, before the answer is returned. The text
// of a JSON string answer is its content; of another answer, its JSON
// text. Tool calls are not streamed.
//
//go:noinline
func (m *model) stream(ctx context.Context, call int64, req *svc.ModelRequest) (svc.ModelResponse, error) {
	resp, err := m.respond(call, req)
	if err != nil || len(resp.ToolCalls) > 0 {
		return resp, err
	}
	s, _ := ParseSettings(req.Settings) // respond checked them
	text := string(resp.Output)
	var str string
	if json.Unmarshal(resp.Output, &str) == nil {
		text = str
	}
	for i, first := 0, true; i < len(text); first = false {
		if !first {
			if err := wait(ctx, s.StreamInterval); err != nil {
				return svc.ModelResponse{}, m.interrupted(err)
			}
		}
		j := i
		for j < len(text) && text[j] != ' ' {
			j++
		}
		for j < len(text) && text[j] == ' ' {
			j++
		}
		req.OnDelta(text[i:j])
		i = j
	}
	return resp, nil
}

// latency checks the settings and returns latency_ms.
//
//go:noinline
func latency(settings map[string]any) (time.Duration, error) {
	if len(settings) == 0 {
		return 0, nil
	}
	var s Settings
	err := parseSettings(settings, &s)
	return s.Latency, err
}

//go:noinline
func (m *model) interrupted(err error) error {
	return fmt.Errorf("test model %s: %w", m.name, err)
}

// respond builds the answer.
//
//go:noinline
func (m *model) respond(call int64, req *svc.ModelRequest) (svc.ModelResponse, error) {
	s, err := ParseSettings(req.Settings)
	if err != nil {
		return svc.ModelResponse{}, err
	}
	if m.name == "fail" {
		return svc.ModelResponse{}, errors.New("test model fail: this model always fails")
	}
	if call <= s.FailTimes {
		return svc.ModelResponse{}, fmt.Errorf("test model echo: call %d of the first %d fails (fail_times)", call, s.FailTimes)
	}
	input := firstInput(req.Messages)
	if s.FailOn != "" && strings.Contains(string(input), s.FailOn) {
		return svc.ModelResponse{}, fmt.Errorf("test model echo: input contains %q (fail_on)", s.FailOn)
	}

	var resp svc.ModelResponse
	var out []byte // the answer's JSON text, for the word count
	switch {
	case s.callsTools() && !hasToolResults(req.Messages):
		calls, err := toolCalls(req.Tools, s)
		if err != nil {
			return svc.ModelResponse{}, err
		}
		if len(calls) > 0 {
			resp.ToolCalls = calls
			if out, err = json.Marshal(calls); err != nil {
				return svc.ModelResponse{}, fmt.Errorf("test model echo: %w", err)
			}
			break
		}
		// Nothing to call: answer at once.
		resp.Output = answer(input, nil, s)
		out = resp.Output
	case s.callsTools():
		resp.Output = answer(input, toolResults(req.Messages), s)
		out = resp.Output
	default:
		resp.Output = answer(input, nil, s)
		out = resp.Output
	}

	if s.HasTokens {
		resp.OutputTokens, resp.TokensUsed = s.Tokens, s.Tokens
	} else {
		resp.InputTokens = words(input)
		resp.OutputTokens = words(out)
		resp.TokensUsed = resp.InputTokens + resp.OutputTokens
	}
	return resp, nil
}

// words counts what strings.Fields would return, without allocating.
func words(b []byte) int64 {
	n, in := int64(0), false
	for i := 0; i < len(b); {
		var space bool
		if c := b[i]; c < utf8.RuneSelf {
			space = c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
			i++
		} else {
			r, size := utf8.DecodeRune(b[i:])
			space = unicode.IsSpace(r)
			i += size
		}
		if !space && !in {
			n++
		}
		in = !space
	}
	return n
}

// answer is the final output: the fixed output if set, else the input, or
// with tool results, the input and the results.
func answer(input json.RawMessage, results map[string]json.RawMessage, s Settings) json.RawMessage {
	if s.Output != nil {
		return s.Output
	}
	if results == nil {
		return input
	}
	out, err := json.Marshal(struct {
		Echo  json.RawMessage            `json:"echo"`
		Tools map[string]json.RawMessage `json:"tools"`
	}{input, results})
	if err != nil {
		// Both parts are JSON the runtime already checked; a failure here is
		// a bug in the caller, and the output shows it.
		return json.RawMessage(`null`)
	}
	return out
}

// waiting counts the calls sleeping their latency_ms now, in every test
// model of the process.
var waiting atomic.Int64

// Waiting is the number of calls, across all test models of the process,
// sleeping their latency_ms now. Benchmarks read it to know that every run
// they started is parked in its model call at once.
func Waiting() int64 { return waiting.Load() }

// wait sleeps for d unless ctx ends first.
func wait(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	waiting.Add(1)
	defer waiting.Add(-1)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// firstInput is the task input: the content of the first user message.
// Later user messages (a validation error the agent loop appends) do not
// change it, so the answer is the same on every retry.
func firstInput(msgs []svc.Message) json.RawMessage {
	for _, msg := range msgs {
		if msg.Role == svc.RoleUser {
			if len(msg.Content) == 0 {
				break
			}
			return msg.Content
		}
	}
	return json.RawMessage(`null`)
}

func hasToolResults(msgs []svc.Message) bool {
	return slices.ContainsFunc(msgs, func(m svc.Message) bool { return m.Role == svc.RoleTool })
}

// toolResults maps tool names to the content of their results, matching
// tool messages to the calls that asked for them. A failed call's content
// (its error) goes in like any other.
func toolResults(msgs []svc.Message) map[string]json.RawMessage {
	names := map[string]string{}
	out := map[string]json.RawMessage{}
	for _, msg := range msgs {
		switch msg.Role {
		case svc.RoleAssistant:
			for _, c := range msg.ToolCalls {
				names[c.ID] = c.Name
			}
		case svc.RoleTool:
			name, ok := names[msg.ToolCallID]
			if !ok {
				name = msg.ToolCallID
			}
			content := msg.Content
			if len(content) == 0 {
				content = json.RawMessage(`null`)
			}
			out[name] = content
		}
	}
	return out
}

// toolCalls asks for each selected tool once, in the order the request
// lists them, with the arguments tool_arguments gives it, else arguments
// built from its input schema.
func toolCalls(tools []svc.ToolSpec, s Settings) ([]svc.ToolCall, error) {
	offered := map[string]bool{}
	for _, t := range tools {
		offered[t.Name] = true
	}
	for _, name := range s.CallTools {
		if !offered[name] {
			return nil, fmt.Errorf("test model echo: call_tools names tool %q, which the agent does not have", name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(s.ToolArguments)) {
		if !offered[name] {
			return nil, fmt.Errorf("test model echo: tool_arguments names tool %q, which the agent does not have", name)
		}
	}
	var calls []svc.ToolCall
	for _, t := range tools {
		if !s.CallAllTools && !slices.Contains(s.CallTools, t.Name) {
			continue
		}
		args, ok := s.ToolArguments[t.Name]
		if !ok {
			var err error
			if args, err = schema.Example(t.InputSchema); err != nil {
				return nil, fmt.Errorf("test model echo: arguments for tool %q: %w", t.Name, err)
			}
		}
		calls = append(calls, svc.ToolCall{ID: fmt.Sprintf("call_%d", len(calls)+1), Name: t.Name, Arguments: args})
	}
	return calls, nil
}

// CheckSettings reports, before any call, what Generate would refuse in
// an agent's model_settings: a key of the wrong type (ParseSettings), and
// call_tools or tool_arguments naming a tool the agent does not have.
// tools are the agent's tool names; when open, the agent has tools that
// are known only once it runs (an MCP server's), and a name outside tools
// is not refused. The message starts with the key at fault
// ("model_settings.tool_arguments.x: ..."), for the spec loader to report
// at its line.
func CheckSettings(settings map[string]any, tools []string, open bool) error {
	s, err := ParseSettings(settings)
	if err != nil {
		var se *svc.Error
		if errors.As(err, &se) {
			return svc.Errorf(svc.KindSpecValidation, "%s (test model)", strings.TrimPrefix(se.Message, "test model: "))
		}
		return err
	}
	if open {
		return nil
	}
	unknown := func(key, name string) error {
		have := "it has no tools"
		if len(tools) > 0 {
			have = "its tools: " + strings.Join(tools, ", ")
		}
		return svc.Errorf(svc.KindSpecValidation, "%s: the agent has no tool %q (%s)", key, name, have)
	}
	for i, name := range s.CallTools {
		if !slices.Contains(tools, name) {
			return unknown(fmt.Sprintf("model_settings.call_tools[%d]", i), name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(s.ToolArguments)) {
		if !slices.Contains(tools, name) {
			return unknown("model_settings.tool_arguments."+name, name)
		}
	}
	return nil
}

// CheckSettings is the package's CheckSettings: the runtime asks the
// models an agent resolved whether its settings would work, before it
// runs (supervisor.CheckAgent).
func (m *model) CheckSettings(settings map[string]any, tools []string, open bool) error {
	return CheckSettings(settings, tools, open)
}

// Settings are the model_settings the test model reads; other keys are
// ignored, so an agent may carry settings for its fallback models too.
type Settings struct {
	// Latency is latency_ms: how long each call takes (before the first
	// fragment, when the call streams).
	Latency time.Duration
	// StreamInterval is stream_interval_ms: the pause between the words of
	// a streamed answer.
	StreamInterval time.Duration
	// Tokens is tokens, the tokens each call reports, when HasTokens.
	Tokens    int64
	HasTokens bool
	// FailTimes is fail_times: the first FailTimes calls fail.
	FailTimes int64
	// FailOn is fail_on: a call whose input's JSON text contains it fails.
	FailOn string
	// Output is output: a fixed answer.
	Output json.RawMessage
	// CallAllTools and CallTools are call_tools: "all", or a list of names.
	CallAllTools bool
	CallTools    []string
	// ToolArguments is tool_arguments: the arguments (a JSON object) to
	// call a tool with instead of ones built from its schema, by tool
	// name. Each tool it names must be one call_tools selects.
	ToolArguments map[string]json.RawMessage
}

func (s Settings) callsTools() bool { return s.CallAllTools || len(s.CallTools) > 0 }

// ParseSettings reads the test model's keys from model_settings as YAML or
// JSON decoding leaves them: numbers may be any Go integer or float type or
// a json.Number. A wrong type is a SpecValidationError.
func ParseSettings(m map[string]any) (Settings, error) {
	var s Settings
	if err := parseSettings(m, &s); err != nil {
		return Settings{}, err
	}
	return s, nil
}

// parseSettings is ParseSettings into s. It keeps a small frame (the
// errors and the rarer keys are built in functions of their own), since a
// model call runs it on the stack of the goroutine that then sleeps.
func parseSettings(m map[string]any, s *Settings) error {
	if v, ok := m["latency_ms"]; ok && v != nil {
		f, ok := settingval.Number(v)
		if !ok || f < 0 || f > float64(math.MaxInt64/int64(time.Millisecond)) {
			return badSetting("latency_ms", "a non-negative number of milliseconds", v)
		}
		s.Latency = time.Duration(f * float64(time.Millisecond))
	}
	if v, ok := m["stream_interval_ms"]; ok && v != nil {
		if err := parseStreamInterval(v, s); err != nil {
			return err
		}
	}
	if v, ok := m["tokens"]; ok && v != nil {
		n, ok := settingval.Count(v)
		if !ok {
			return badSetting("tokens", "a non-negative integer", v)
		}
		s.Tokens, s.HasTokens = n, true
	}
	if v, ok := m["fail_times"]; ok && v != nil {
		n, ok := settingval.Count(v)
		if !ok {
			return badSetting("fail_times", "a non-negative integer", v)
		}
		s.FailTimes = n
	}
	if v, ok := m["fail_on"]; ok && v != nil {
		str, ok := v.(string)
		if !ok {
			return badSetting("fail_on", "a string", v)
		}
		s.FailOn = str
	}
	if v, ok := m["output"]; ok {
		if err := parseOutput(v, s); err != nil {
			return err
		}
	}
	if v, ok := m["call_tools"]; ok && v != nil {
		if err := parseCallTools(v, s); err != nil {
			return err
		}
	}
	if v, ok := m["tool_arguments"]; ok && v != nil {
		return parseToolArguments(v, s)
	}
	return nil
}

//go:noinline
func parseStreamInterval(v any, s *Settings) error {
	f, ok := settingval.Number(v)
	if !ok || f < 0 || f > float64(math.MaxInt64/int64(time.Millisecond)) {
		return badSetting("stream_interval_ms", "a non-negative number of milliseconds", v)
	}
	s.StreamInterval = time.Duration(f * float64(time.Millisecond))
	return nil
}

//go:noinline
func parseToolArguments(v any, s *Settings) error {
	args, err := toolArguments(v, *s)
	if err != nil {
		return err
	}
	s.ToolArguments = args
	return nil
}

//go:noinline
func badSetting(key, want string, v any) error {
	return svc.Errorf(svc.KindSpecValidation, "test model: model_settings.%s: want %s, got %v (%T)", key, want, v, v)
}

//go:noinline
func parseOutput(v any, s *Settings) error {
	raw, err := toJSON(v)
	if err != nil {
		return badSetting("output", "a JSON value", v)
	}
	s.Output = raw
	return nil
}

//go:noinline
func parseCallTools(v any, s *Settings) error {
	switch t := v.(type) {
	case string:
		if t != "all" {
			return badSetting("call_tools", `"all" or a list of tool names`, v)
		}
		s.CallAllTools = true
	case []string:
		s.CallTools = slices.Clone(t)
	case []any:
		for _, e := range t {
			name, ok := e.(string)
			if !ok {
				return badSetting("call_tools", `"all" or a list of tool names`, v)
			}
			s.CallTools = append(s.CallTools, name)
		}
	default:
		return badSetting("call_tools", `"all" or a list of tool names`, v)
	}
	return nil
}

// toolArguments reads tool_arguments: a mapping of tool names, each one
// call_tools selects, to argument objects.
func toolArguments(v any, s Settings) (map[string]json.RawMessage, error) {
	var m map[string]any
	switch t := v.(type) {
	case map[string]any:
		m = t
	case map[string]json.RawMessage:
		m = make(map[string]any, len(t))
		for k, raw := range t {
			m[k] = raw
		}
	default:
		return nil, svc.Errorf(svc.KindSpecValidation,
			"test model: model_settings.tool_arguments: want a mapping of tool names to argument objects, got %v (%T)", v, v)
	}
	out := make(map[string]json.RawMessage, len(m))
	for _, name := range slices.Sorted(maps.Keys(m)) {
		key := "model_settings.tool_arguments." + name
		if !s.CallAllTools && !slices.Contains(s.CallTools, name) {
			return nil, svc.Errorf(svc.KindSpecValidation,
				"test model: %s: tool %q is not one call_tools calls; add it to call_tools (or set call_tools: all)", key, name)
		}
		raw, err := toJSON(m[name])
		if err != nil || !isObject(raw) {
			return nil, svc.Errorf(svc.KindSpecValidation, "test model: %s: want the arguments as a mapping (a JSON object), got %v", key, m[name])
		}
		out[name] = raw
	}
	return out, nil
}

// isObject reports whether raw, valid JSON, is an object.
func isObject(raw json.RawMessage) bool {
	for _, c := range raw {
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		}
		return c == '{'
	}
	return false
}

// toJSON marshals a settings value; a json.RawMessage (from a Go caller)
// is taken as is.
func toJSON(v any) (json.RawMessage, error) {
	switch t := v.(type) {
	case json.RawMessage:
		if !json.Valid(t) {
			return nil, errors.New("invalid JSON")
		}
		return t, nil
	}
	return json.Marshal(v)
}

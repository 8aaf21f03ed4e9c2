package testmodel

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/internal/testutil"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func userMsg(content string) svc.Message {
	return svc.Message{Role: svc.RoleUser, Content: json.RawMessage(content)}
}

func request(input string, settings map[string]any) svc.ModelRequest {
	return svc.ModelRequest{Model: "echo", Messages: []svc.Message{userMsg(input)}, Settings: settings}
}

func mustNew(t *testing.T, name string) svc.Model {
	t.Helper()
	m, err := New(name)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestNew(t *testing.T) {
	for _, name := range []string{"echo", "fail"} {
		if _, err := New(name); err != nil {
			t.Errorf("New(%q): %v", name, err)
		}
	}
	_, err := New("gpt-4")
	if !errors.Is(err, svc.ErrRegistry) || !strings.Contains(err.Error(), `test model "gpt-4": want echo or fail`) {
		t.Errorf("New(gpt-4) = %v; want a RegistryError naming the choices", err)
	}
}

func TestEcho(t *testing.T) {
	for _, input := range []string{`{"text":"hello world"}`, `"plain text"`, `[1, 2,  3]`, `null`, `42`} {
		resp, err := mustNew(t, "echo").Generate(context.Background(), request(input, nil))
		if err != nil {
			t.Fatal(err)
		}
		if string(resp.Output) != input {
			t.Errorf("echo of %s = %s", input, resp.Output)
		}
		if len(resp.ToolCalls) != 0 {
			t.Errorf("echo asked for tools: %v", resp.ToolCalls)
		}
	}
}

func TestEchoWithoutUserMessage(t *testing.T) {
	resp, err := mustNew(t, "echo").Generate(context.Background(), svc.ModelRequest{})
	if err != nil || string(resp.Output) != "null" {
		t.Errorf("Generate with no messages = %s, %v; want null", resp.Output, err)
	}
}

func TestFail(t *testing.T) {
	_, err := mustNew(t, "fail").Generate(context.Background(), request(`"x"`, nil))
	if err == nil || !strings.Contains(err.Error(), "always fails") {
		t.Errorf("fail model returned %v", err)
	}
}

func TestTokens(t *testing.T) {
	tests := []struct {
		name     string
		input    string
		settings map[string]any
		in, out  int64
		total    int64
	}{
		// strings.Fields of `{"text":"hello big world"}`: 3 words.
		{"default counts words", `{"text":"hello big world"}`, nil, 3, 3, 6},
		{"fixed output", `"a b"`, map[string]any{"output": "x y z w"}, 2, 4, 6},
		{"tokens int", `"a b"`, map[string]any{"tokens": 7}, 0, 7, 7},
		{"tokens float64", `"a b"`, map[string]any{"tokens": 7.0}, 0, 7, 7},
		{"tokens int64", `"a b"`, map[string]any{"tokens": int64(9)}, 0, 9, 9},
		{"tokens json.Number", `"a b"`, map[string]any{"tokens": json.Number("11")}, 0, 11, 11},
		{"tokens zero", `"a b"`, map[string]any{"tokens": 0}, 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := mustNew(t, "echo").Generate(context.Background(), request(tt.input, tt.settings))
			if err != nil {
				t.Fatal(err)
			}
			if resp.InputTokens != tt.in || resp.OutputTokens != tt.out || resp.Tokens() != tt.total {
				t.Errorf("tokens in/out/total = %d/%d/%d; want %d/%d/%d",
					resp.InputTokens, resp.OutputTokens, resp.Tokens(), tt.in, tt.out, tt.total)
			}
		})
	}
}

func TestOutput(t *testing.T) {
	tests := []struct {
		output any
		want   string
	}{
		{map[string]any{"category": "billing", "score": 0.5}, `{"category":"billing","score":0.5}`},
		{"text", `"text"`},
		{[]any{1, "a"}, `[1,"a"]`},
		{nil, `null`},
		{json.RawMessage(`{"raw":true}`), `{"raw":true}`},
	}
	for _, tt := range tests {
		resp, err := mustNew(t, "echo").Generate(context.Background(), request(`"in"`, map[string]any{"output": tt.output}))
		if err != nil {
			t.Fatal(err)
		}
		if string(resp.Output) != tt.want {
			t.Errorf("output %v gave %s; want %s", tt.output, resp.Output, tt.want)
		}
	}
}

func TestFailTimes(t *testing.T) {
	for _, n := range []any{2, int64(2), 2.0, json.Number("2")} {
		m := mustNew(t, "echo")
		settings := map[string]any{"fail_times": n}
		for call := 1; call <= 4; call++ {
			_, err := m.Generate(context.Background(), request(`"x"`, settings))
			if failed := err != nil; failed != (call <= 2) {
				t.Errorf("fail_times %v (%T): call %d: err = %v", n, n, call, err)
			}
			if err != nil && !strings.Contains(err.Error(), "fail_times") {
				t.Errorf("error %q does not say why", err)
			}
		}
	}
}

func TestFailTimesPerInstance(t *testing.T) {
	settings := map[string]any{"fail_times": 1}
	a, b := mustNew(t, "echo"), mustNew(t, "echo")
	if _, err := a.Generate(context.Background(), request(`1`, settings)); err == nil {
		t.Error("first call of a succeeded")
	}
	if _, err := b.Generate(context.Background(), request(`1`, settings)); err == nil {
		t.Error("first call of b succeeded: instances share a counter")
	}
	if _, err := a.Generate(context.Background(), request(`1`, settings)); err != nil {
		t.Errorf("second call of a: %v", err)
	}
}

func TestFailTimesConcurrent(t *testing.T) {
	const calls, failures = 100, 37
	m := mustNew(t, "echo")
	settings := map[string]any{"fail_times": failures}
	var wg sync.WaitGroup
	var mu sync.Mutex
	failed := 0
	for range calls {
		wg.Go(func() {
			if _, err := m.Generate(context.Background(), request(`"x"`, settings)); err != nil {
				mu.Lock()
				failed++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if failed != failures {
		t.Errorf("%d of %d concurrent calls failed; want exactly %d", failed, calls, failures)
	}
}

func TestFailOn(t *testing.T) {
	settings := map[string]any{"fail_on": "boom"}
	m := mustNew(t, "echo")
	_, err := m.Generate(context.Background(), request(`{"text":"it went boom"}`, settings))
	if err == nil || !strings.Contains(err.Error(), `"boom"`) {
		t.Errorf("input with boom: err = %v", err)
	}
	resp, err := m.Generate(context.Background(), request(`{"text":"fine"}`, settings))
	if err != nil || string(resp.Output) != `{"text":"fine"}` {
		t.Errorf("input without boom = %s, %v", resp.Output, err)
	}
	// The key counts: it is part of the JSON text.
	if _, err := m.Generate(context.Background(), request(`{"boom":1}`, settings)); err == nil {
		t.Error("fail_on ignored a match in a key")
	}
}

func TestLatency(t *testing.T) {
	m := mustNew(t, "echo")
	start := time.Now()
	if _, err := m.Generate(context.Background(), request(`1`, map[string]any{"latency_ms": 30})); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Errorf("latency_ms 30 took only %v", d)
	}
}

// Waiting counts the calls sleeping their latency, and only while they
// sleep, whether the sleep ends on time or by cancellation.
func TestWaiting(t *testing.T) {
	before := Waiting()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 2)
	for _, ms := range []int{3_600_000, 50} {
		go func() {
			_, err := mustNew(t, "echo").Generate(ctx, request(`1`, map[string]any{"latency_ms": ms}))
			done <- err
		}()
	}
	testutil.Eventually(t, "two calls waiting", func() bool { return Waiting() == before+2 })
	if err := <-done; err != nil { // the 50 ms call
		t.Fatal(err)
	}
	testutil.Eventually(t, "one call waiting", func() bool { return Waiting() == before+1 })
	cancel()
	<-done
	testutil.Eventually(t, "no call waiting", func() bool { return Waiting() == before })
	// A call without latency never counts.
	if _, err := mustNew(t, "echo").Generate(context.Background(), request(`1`, nil)); err != nil || Waiting() != before {
		t.Errorf("after a call without latency: err %v, Waiting %d; want nil, %d", err, Waiting(), before)
	}
}

func TestLatencyCancel(t *testing.T) {
	for _, tt := range []struct {
		name   string
		ctx    func() (context.Context, context.CancelFunc)
		target error
	}{
		{"cancel", func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }, context.Canceled},
		{"deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), time.Millisecond)
		}, context.DeadlineExceeded},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := tt.ctx()
			defer cancel()
			done := make(chan error, 1)
			go func() {
				// An hour: only cancellation can end this call in time.
				_, err := mustNew(t, "echo").Generate(ctx, request(`1`, map[string]any{"latency_ms": 3_600_000}))
				done <- err
			}()
			if tt.target == context.Canceled {
				cancel()
			}
			select {
			case err := <-done:
				if !errors.Is(err, tt.target) {
					t.Errorf("err = %v; want %v", err, tt.target)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Generate did not return after cancellation")
			}
		})
	}
}

func TestBadSettings(t *testing.T) {
	tests := []struct {
		key string
		val any
	}{
		{"latency_ms", "fast"},
		{"latency_ms", -1},
		{"tokens", 1.5},
		{"tokens", "7"},
		{"tokens", -3},
		{"fail_times", true},
		{"fail_times", json.Number("x")},
		{"fail_on", 3},
		{"call_tools", "some"},
		{"call_tools", []any{"a", 1}},
		{"call_tools", 5},
		{"output", json.RawMessage(`{`)},
		{"output", func() {}},
	}
	for _, tt := range tests {
		_, err := mustNew(t, "echo").Generate(context.Background(), request(`1`, map[string]any{tt.key: tt.val}))
		if !errors.Is(err, svc.ErrSpecValidation) || !strings.Contains(err.Error(), tt.key) {
			t.Errorf("%s = %v (%T): err = %v; want a SpecValidationError naming the key", tt.key, tt.val, tt.val, err)
		}
	}
}

func TestParseSettings(t *testing.T) {
	s, err := ParseSettings(map[string]any{
		"latency_ms": 1.5, "tokens": uint8(4), "fail_times": int32(2), "fail_on": "x",
		"output": "o", "call_tools": []string{"a"}, "temperature": 0.2,
	})
	if err != nil {
		t.Fatal(err)
	}
	if s.Latency != 1500*time.Microsecond || !s.HasTokens || s.Tokens != 4 || s.FailTimes != 2 ||
		s.FailOn != "x" || string(s.Output) != `"o"` || len(s.CallTools) != 1 || s.CallAllTools {
		t.Errorf("ParseSettings = %+v", s)
	}
}

var (
	weatherSpec = svc.ToolSpec{Name: "weather", InputSchema: json.RawMessage(
		`{"type":"object","properties":{"city":{"type":"string","minLength":2},"days":{"type":"integer","minimum":1}},"required":["city","days"]}`)}
	clockSpec = svc.ToolSpec{Name: "clock", InputSchema: json.RawMessage(`{"type":"object","properties":{"timezone":{"type":"string"}}}`)}
	noSchema  = svc.ToolSpec{Name: "ping"}
)

func TestCallTools(t *testing.T) {
	tests := []struct {
		name      string
		callTools any
		wantCalls []svc.ToolCall
	}{
		{"all", "all", []svc.ToolCall{
			{ID: "call_1", Name: "weather", Arguments: json.RawMessage(`{"city":"aa","days":1}`)},
			{ID: "call_2", Name: "clock", Arguments: json.RawMessage(`{}`)},
			{ID: "call_3", Name: "ping", Arguments: json.RawMessage(`{}`)},
		}},
		{"list", []any{"ping", "weather"}, []svc.ToolCall{
			{ID: "call_1", Name: "weather", Arguments: json.RawMessage(`{"city":"aa","days":1}`)},
			{ID: "call_2", Name: "ping", Arguments: json.RawMessage(`{}`)},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := mustNew(t, "echo")
			req := request(`{"q":"hi"}`, map[string]any{"call_tools": tt.callTools})
			req.Tools = []svc.ToolSpec{weatherSpec, clockSpec, noSchema}
			resp, err := m.Generate(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if resp.Output != nil {
				t.Errorf("first call answered %s instead of calling tools", resp.Output)
			}
			got, _ := json.Marshal(resp.ToolCalls)
			want, _ := json.Marshal(tt.wantCalls)
			if string(got) != string(want) {
				t.Fatalf("tool calls = %s; want %s", got, want)
			}

			// The loop runs the tools (one fails) and calls again.
			req.Messages = append(req.Messages, svc.Message{Role: svc.RoleAssistant, ToolCalls: resp.ToolCalls})
			results := map[string]string{}
			for i, c := range resp.ToolCalls {
				msg := svc.Message{Role: svc.RoleTool, ToolCallID: c.ID, Content: json.RawMessage(`{"ok":` + string(rune('0'+i)) + `}`)}
				if c.Name == "ping" {
					msg.Content, msg.IsError = json.RawMessage(`"ping failed"`), true
				}
				req.Messages = append(req.Messages, msg)
				results[c.Name] = string(msg.Content)
			}
			resp, err = m.Generate(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.ToolCalls) != 0 {
				t.Fatalf("second call asked for tools again: %v", resp.ToolCalls)
			}
			var out struct {
				Echo  json.RawMessage            `json:"echo"`
				Tools map[string]json.RawMessage `json:"tools"`
			}
			if err := json.Unmarshal(resp.Output, &out); err != nil {
				t.Fatalf("answer %s: %v", resp.Output, err)
			}
			if string(out.Echo) != `{"q":"hi"}` {
				t.Errorf("echo = %s", out.Echo)
			}
			if len(out.Tools) != len(results) {
				t.Errorf("tools = %v; want %v", out.Tools, results)
			}
			for name, want := range results {
				if string(out.Tools[name]) != want {
					t.Errorf("tools[%s] = %s; want %s", name, out.Tools[name], want)
				}
			}
		})
	}
}

func TestCallToolsWithOutput(t *testing.T) {
	m := mustNew(t, "echo")
	req := request(`"in"`, map[string]any{"call_tools": "all", "output": map[string]any{"done": true}})
	req.Tools = []svc.ToolSpec{noSchema}
	resp, err := m.Generate(context.Background(), req)
	if err != nil || len(resp.ToolCalls) != 1 {
		t.Fatalf("first call = %+v, %v; want one tool call", resp, err)
	}
	req.Messages = append(req.Messages,
		svc.Message{Role: svc.RoleAssistant, ToolCalls: resp.ToolCalls},
		svc.Message{Role: svc.RoleTool, ToolCallID: "call_1", Content: json.RawMessage(`"pong"`)})
	resp, err = m.Generate(context.Background(), req)
	if err != nil || string(resp.Output) != `{"done":true}` {
		t.Errorf("answer = %s, %v; want the fixed output", resp.Output, err)
	}
}

func TestCallToolsWithoutTools(t *testing.T) {
	resp, err := mustNew(t, "echo").Generate(context.Background(), request(`"in"`, map[string]any{"call_tools": "all"}))
	if err != nil || string(resp.Output) != `"in"` || resp.ToolCalls != nil {
		t.Errorf("call_tools all with no tools = %+v, %v; want a plain echo", resp, err)
	}
}

func TestCallToolsErrors(t *testing.T) {
	m := mustNew(t, "echo")
	req := request(`"in"`, map[string]any{"call_tools": []any{"missing"}})
	req.Tools = []svc.ToolSpec{noSchema}
	if _, err := m.Generate(context.Background(), req); err == nil || !strings.Contains(err.Error(), `"missing"`) {
		t.Errorf("unknown tool in call_tools: err = %v", err)
	}
	req = request(`"in"`, map[string]any{"call_tools": "all"})
	req.Tools = []svc.ToolSpec{{Name: "impossible", InputSchema: json.RawMessage(`false`)}}
	if _, err := m.Generate(context.Background(), req); err == nil || !strings.Contains(err.Error(), `"impossible"`) {
		t.Errorf("tool whose schema admits nothing: err = %v", err)
	}
}

func TestRetryAfterValidationError(t *testing.T) {
	// The agent loop appends the rejected answer and a user message with
	// the validation error; the echo model answers the same again.
	m := mustNew(t, "echo")
	req := request(`{"n":1}`, nil)
	req.OutputSchema = json.RawMessage(`{"type":"string"}`)
	first, err := m.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	req.Messages = append(req.Messages,
		svc.Message{Role: svc.RoleAssistant, Content: first.Output},
		userMsg(`"your answer does not match the output schema: type"`))
	second, err := m.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if string(first.Output) != `{"n":1}` || string(second.Output) != string(first.Output) {
		t.Errorf("answers %s then %s; want the input both times", first.Output, second.Output)
	}
}

// tool_arguments gives the named tools fixed arguments (so a spec can make
// an agent call spawn_agents with children it chooses); the other tools
// call_tools selects keep arguments built from their schema.
func TestToolArguments(t *testing.T) {
	for _, tc := range []struct {
		name      string
		callTools any
		args      any
	}{
		{"yaml-decoded mapping", "all", map[string]any{"weather": map[string]any{"city": "Oslo", "days": 3}}},
		{"json object given as is", []any{"weather", "ping"}, map[string]any{"weather": json.RawMessage(`{"city":"Oslo","days":3}`)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := mustNew(t, "echo")
			req := request(`"in"`, map[string]any{"call_tools": tc.callTools, "tool_arguments": tc.args})
			req.Tools = []svc.ToolSpec{weatherSpec, noSchema}
			resp, err := m.Generate(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := json.Marshal(resp.ToolCalls)
			want := `[{"id":"call_1","name":"weather","arguments":{"city":"Oslo","days":3}},{"id":"call_2","name":"ping","arguments":{}}]`
			if string(got) != want {
				t.Fatalf("tool calls = %s; want %s", got, want)
			}
		})
	}
}

func TestToolArgumentsErrors(t *testing.T) {
	tests := []struct {
		name     string
		settings map[string]any
		want     string
	}{
		{"not a mapping", map[string]any{"call_tools": "all", "tool_arguments": []any{"weather"}},
			"model_settings.tool_arguments: want a mapping"},
		{"arguments not an object", map[string]any{"call_tools": "all", "tool_arguments": map[string]any{"weather": "Oslo"}},
			"model_settings.tool_arguments.weather: want the arguments as a mapping"},
		{"tool not in call_tools", map[string]any{"call_tools": []any{"ping"}, "tool_arguments": map[string]any{"weather": map[string]any{}}},
			`model_settings.tool_arguments.weather: tool "weather" is not one call_tools calls`},
		{"without call_tools", map[string]any{"tool_arguments": map[string]any{"weather": map[string]any{}}},
			`model_settings.tool_arguments.weather: tool "weather" is not one call_tools calls`},
	}
	for _, tt := range tests {
		_, err := mustNew(t, "echo").Generate(context.Background(), request(`1`, tt.settings))
		if !errors.Is(err, svc.ErrSpecValidation) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err = %v; want a SpecValidationError with %q", tt.name, err, tt.want)
		}
	}
	// With call_tools: all, a name the agent does not have fails the call
	// as an unknown call_tools name does.
	req := request(`1`, map[string]any{"call_tools": "all", "tool_arguments": map[string]any{"nope": map[string]any{}}})
	req.Tools = []svc.ToolSpec{noSchema}
	if _, err := mustNew(t, "echo").Generate(context.Background(), req); err == nil ||
		!strings.Contains(err.Error(), `tool_arguments names tool "nope", which the agent does not have`) {
		t.Errorf("unknown tool in tool_arguments: err = %v", err)
	}
}

// CheckSettings finds before any call what the calls would refuse.
func TestCheckSettings(t *testing.T) {
	tools := []string{"delegate", "spawn_agents"}
	for _, tc := range []struct {
		name     string
		settings map[string]any
		open     bool
		want     string // "" for no error
	}{
		{"known tools", map[string]any{"call_tools": []any{"spawn_agents"},
			"tool_arguments": map[string]any{"spawn_agents": map[string]any{"agents": []any{}}}}, false, ""},
		{"unknown tool_arguments name", map[string]any{"call_tools": "all",
			"tool_arguments": map[string]any{"spawn_agent": map[string]any{}}}, false,
			`model_settings.tool_arguments.spawn_agent: the agent has no tool "spawn_agent" (its tools: delegate, spawn_agents)`},
		{"unknown call_tools name", map[string]any{"call_tools": []any{"spawn_agents", "x"}}, false,
			`model_settings.call_tools[1]: the agent has no tool "x"`},
		{"unknown names with tools known only at run time", map[string]any{"call_tools": []any{"srv_x"}}, true, ""},
		{"a bad value", map[string]any{"latency_ms": "x"}, true, "model_settings.latency_ms: want a non-negative number"},
		{"no settings", nil, false, ""},
	} {
		err := CheckSettings(tc.settings, tools, tc.open)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (!errors.Is(err, svc.ErrSpecValidation) || !strings.HasPrefix(err.Error(), tc.want[:strings.Index(tc.want, ":")]) ||
			!strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: err = %v; want a SpecValidationError starting with the key and containing %q", tc.name, err, tc.want)
		}
	}
}

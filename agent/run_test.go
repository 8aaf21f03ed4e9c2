package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/agent"
	"github.com/svc-dev/svc/tools"
)

func TestRunEcho(t *testing.T) {
	c := mustCompile(t, svc.Agent{Name: "echo", Model: "test:echo"}, nil)
	in := `{"q":"hello world"}`
	out, err := agent.Run(context.Background(), invocation(c, in))
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if string(out.Output) != in {
		t.Errorf("Output = %s, want %s", out.Output, in)
	}
	if out.Model != "test:echo" || out.ModelCalls != 1 || out.TokensUsed <= 0 {
		t.Errorf("Outcome = %+v, want model test:echo, 1 call, some tokens", out)
	}

	c = mustCompile(t, svc.Agent{Name: "echo", Model: "test:echo", ModelSettings: map[string]any{"tokens": 7}}, nil)
	out, err = agent.Run(context.Background(), invocation(c, in))
	if err != nil || out.TokensUsed != 7 {
		t.Errorf("with tokens: 7, Run = %+v, %v", out, err)
	}
}

func TestRunRequest(t *testing.T) {
	m := &recorder{fn: answer(`"done"`)}
	c := mustCompile(t, svc.Agent{
		Name:          "req",
		Model:         "fake:big:model",
		Instructions:  "Be brief.",
		OutputType:    json.RawMessage(`{"type":"string"}`),
		Tools:         []svc.Tool{constTool("zeta", svc.AccessRead, "1"), constTool("alpha", svc.AccessRead, "2")},
		ModelSettings: map[string]any{"temperature": 0.5},
	}, map[string]svc.Model{"big:model": m})

	// Odd spacing: the model is sent the input without it, as a worker
	// (whose copy crossed a broker compactly) would send it, so the
	// prompt and its tokens do not depend on where the task ran.
	in := `{ "spaced" :  true, "s": "a  b" }`
	out, err := agent.Run(context.Background(), invocation(c, in))
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if string(out.Output) != `"done"` || out.Model != "fake:big:model" || out.TokensUsed != 5 {
		t.Errorf("Outcome = %+v", out)
	}
	reqs := m.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d model calls, want 1", len(reqs))
	}
	req := reqs[0]
	if req.Model != "big:model" {
		t.Errorf("req.Model = %q, want the name part big:model", req.Model)
	}
	if req.Instructions != "Be brief." {
		t.Errorf("req.Instructions = %q", req.Instructions)
	}
	if !reflect.DeepEqual(req.Tools, c.ToolSpecs) || req.Tools[0].Name != "alpha" {
		t.Errorf("req.Tools = %+v, want the sorted specs", req.Tools)
	}
	if string(req.OutputSchema) != `{"type":"string"}` {
		t.Errorf("req.OutputSchema = %s", req.OutputSchema)
	}
	if req.Settings["temperature"] != 0.5 {
		t.Errorf("req.Settings = %v", req.Settings)
	}
	want := []svc.Message{{Role: svc.RoleUser, Content: json.RawMessage(`{"spaced":true,"s":"a  b"}`)}}
	if !reflect.DeepEqual(req.Messages, want) {
		t.Errorf("req.Messages = %+v, want one user message with the input", req.Messages)
	}
}

func TestRunEmptyInputIsNull(t *testing.T) {
	m := &recorder{fn: answer(`1`)}
	c := mustCompile(t, svc.Agent{Name: "a", Model: "fake:m"}, map[string]svc.Model{"m": m})
	if _, err := agent.Run(context.Background(), invocation(c, "")); err != nil {
		t.Fatal(err)
	}
	if got := string(m.requests()[0].Messages[0].Content); got != "null" {
		t.Errorf("empty input reached the model as %q, want null", got)
	}
}

func TestFallback(t *testing.T) {
	errA, errB := errors.New("a is down"), errors.New("b is down")
	tests := []struct {
		name      string
		models    []string // primary then fallbacks
		wantCalls []string
		wantModel string
		wantErr   []string // substrings of a ModelError; nil for success
	}{
		{"primary answers", []string{"fake:a-ok", "fake:b-ok"}, []string{"a-ok"}, "fake:a-ok", nil},
		{"second answers", []string{"fake:a-fail", "fake:b-ok"}, []string{"a-fail", "b-ok"}, "fake:b-ok", nil},
		{"third answers", []string{"fake:a-fail", "fake:b-fail", "fake:c-ok"}, []string{"a-fail", "b-fail", "c-ok"}, "fake:c-ok", nil},
		{"test provider", []string{"test:fail", "fake:b-ok"}, []string{"b-ok"}, "fake:b-ok", nil},
		{"only model fails", []string{"fake:a-fail"}, []string{"a-fail"}, "",
			[]string{"agent fb: model failed: fake:a-fail: a is down"}},
		{"all fail", []string{"fake:a-fail", "test:fail", "fake:b-fail"}, []string{"a-fail", "b-fail"}, "",
			[]string{"agent fb: all 3 models failed: fake:a-fail: a is down; test:fail: ", "; fake:b-fail: b is down"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			log := &callLog{}
			models := map[string]svc.Model{
				"a-ok":   &recorder{name: "a-ok", log: log, fn: answer(`"a"`)},
				"b-ok":   &recorder{name: "b-ok", log: log, fn: answer(`"b"`)},
				"c-ok":   &recorder{name: "c-ok", log: log, fn: answer(`"c"`)},
				"a-fail": &recorder{name: "a-fail", log: log, fn: failing(errA)},
				"b-fail": &recorder{name: "b-fail", log: log, fn: failing(errB)},
			}
			c := mustCompile(t, svc.Agent{Name: "fb", Model: tt.models[0], FallbackModels: tt.models[1:]}, models)
			out, err := agent.Run(context.Background(), invocation(c, `"x"`))
			if got := log.get(); !slices.Equal(got, tt.wantCalls) {
				t.Errorf("models called %q, want %q", got, tt.wantCalls)
			}
			if out.Model != tt.wantModel {
				t.Errorf("Outcome.Model = %q, want %q", out.Model, tt.wantModel)
			}
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
				return
			}
			se := kindAndReason(t, err, svc.KindModel, agent.ReasonModelError)
			if se.Agent != "fb" || se.TaskID != "task-1" {
				t.Errorf("error names agent %q task %q", se.Agent, se.TaskID)
			}
			for _, s := range tt.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
			if !errors.Is(err, errA) && !errors.Is(err, errB) {
				t.Errorf("model errors not in the chain of %v", err)
			}
			if out.ModelCalls != len(tt.models) {
				t.Errorf("ModelCalls = %d, want %d", out.ModelCalls, len(tt.models))
			}
		})
	}
}

// callTool answers with one call to tool name.
func callTool(name, args string) svc.ModelResponse {
	return svc.ModelResponse{ToolCalls: []svc.ToolCall{{ID: "call-" + name, Name: name, Arguments: json.RawMessage(args)}}, TokensUsed: 5}
}

// Once a model has answered, it serves the rest of the invocation: the
// primary is not tried again even though it would now answer, and a later
// failure of the answering model is not handed to the others.
func TestFallbackSticky(t *testing.T) {
	for _, laterFails := range []bool{false, true} {
		log := &callLog{}
		primary := &recorder{name: "primary", log: log, fn: func(n int, _ svc.ModelRequest) (svc.ModelResponse, error) {
			if n == 0 {
				return svc.ModelResponse{}, errors.New("primary warming up")
			}
			return svc.ModelResponse{Output: json.RawMessage(`"primary"`)}, nil
		}}
		backup := &recorder{name: "backup", log: log, fn: func(n int, _ svc.ModelRequest) (svc.ModelResponse, error) {
			if n == 0 {
				return callTool("noop", `{}`), nil
			}
			if laterFails {
				return svc.ModelResponse{}, errors.New("backup broke")
			}
			return svc.ModelResponse{Output: json.RawMessage(`"backup"`)}, nil
		}}
		c := mustCompile(t, svc.Agent{Name: "sticky", Model: "fake:primary", FallbackModels: []string{"fake:backup"},
			Tools: []svc.Tool{constTool("noop", svc.AccessRead, `null`)}},
			map[string]svc.Model{"primary": primary, "backup": backup})
		out, err := agent.Run(context.Background(), invocation(c, `"x"`))
		if got, want := log.get(), []string{"primary", "backup", "backup"}; !slices.Equal(got, want) {
			t.Errorf("laterFails=%v: models called %q, want %q", laterFails, got, want)
		}
		if out.Model != "fake:backup" {
			t.Errorf("laterFails=%v: Outcome.Model = %q", laterFails, out.Model)
		}
		if !laterFails {
			if err != nil || string(out.Output) != `"backup"` {
				t.Errorf("Run = %s, %v", out.Output, err)
			}
			continue
		}
		kindAndReason(t, err, svc.KindModel, agent.ReasonModelError)
		if msg := err.Error(); !strings.Contains(msg, "fake:backup: backup broke") || strings.Contains(msg, "primary") {
			t.Errorf("error %q: want only the answering model's failure", msg)
		}
	}
}

// The pre-check reserves max_tokens plus a quarter token per byte of the
// prompt: a bigger prompt or a larger max_tokens reserves more.
func TestEstimateTokens(t *testing.T) {
	req := svc.ModelRequest{Instructions: strings.Repeat("x", 40), Messages: []svc.Message{{Role: svc.RoleUser, Content: json.RawMessage(`"` + strings.Repeat("y", 38) + `"`)}}}
	if got := agent.EstimateTokens(&req); got != 20 {
		t.Fatalf("estimate without max_tokens = %d, want 20 (80 bytes / 4)", got)
	}
	for _, mt := range []any{100, int64(100), float64(100)} {
		req.Settings = map[string]any{"max_tokens": mt}
		if got := agent.EstimateTokens(&req); got != 120 {
			t.Fatalf("estimate with max_tokens %T = %d, want 120", mt, got)
		}
	}
	req.Settings = map[string]any{"max_tokens": "lots"}
	if got := agent.EstimateTokens(&req); got != 20 {
		t.Fatalf("a max_tokens that is no number counts as none: %d", got)
	}
}

func TestBudget(t *testing.T) {
	budgetErr := svc.Errorf(svc.KindBudgetExceeded, "token budget 10 exceeded")
	toolThenAnswer := func(n int, _ svc.ModelRequest) (svc.ModelResponse, error) {
		if n == 0 {
			return callTool("noop", `{}`), nil
		}
		return svc.ModelResponse{Output: json.RawMessage(`"done"`), TokensUsed: 7}, nil
	}
	tests := []struct {
		name       string
		fallback   bool
		b          *budget
		wantCalls  []string
		wantErr    bool
		wantTokens int64
		wantModel  string
		modelCalls int
	}{
		{"two turns", false, &budget{}, []string{"reserve", "charge 5", "reserve", "charge 7"}, false, 12, "fake:m", 2},
		// A failed call gives its reservation back with a charge of 0.
		{"failed attempt reserves, is not charged", true, &budget{}, []string{"reserve", "charge 0", "reserve", "charge 5", "reserve", "charge 7"}, false, 12, "fake:m", 3},
		{"reserve refused at once", false, &budget{reserveErr: budgetErr, failAt: 1}, []string{"reserve"}, true, 0, "", 0},
		{"reserve refused on turn 2", false, &budget{reserveErr: budgetErr, failAt: 2}, []string{"reserve", "charge 5", "reserve"}, true, 5, "fake:m", 1},
		{"charge overdraws", false, &budget{chargeErr: budgetErr}, []string{"reserve", "charge 5"}, true, 5, "fake:m", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := &recorder{fn: toolThenAnswer}
			a := svc.Agent{Name: "budgeted", Model: "fake:m", Tools: []svc.Tool{constTool("noop", svc.AccessRead, `null`)}}
			if tt.fallback {
				a.Model, a.FallbackModels = "test:fail", []string{"fake:m"}
			}
			c := mustCompile(t, a, map[string]svc.Model{"m": m})
			inv := invocation(c, `"x"`)
			inv.Budget = tt.b
			out, err := agent.Run(context.Background(), inv)
			if got := tt.b.get(); !slices.Equal(got, tt.wantCalls) {
				t.Errorf("budget calls %q, want %q", got, tt.wantCalls)
			}
			if tt.wantErr {
				// Returned as is: the budget already emitted its event.
				if err != budgetErr {
					t.Errorf("Run error %v, want the budget's error itself", err)
				}
			} else if err != nil {
				t.Errorf("Run: %v", err)
			}
			if out.TokensUsed != tt.wantTokens || out.Model != tt.wantModel || out.ModelCalls != tt.modelCalls {
				t.Errorf("Outcome = %+v, want tokens %d model %q calls %d", out, tt.wantTokens, tt.wantModel, tt.modelCalls)
			}
		})
	}
}

// checkEvent checks the envelope and that the payload has exactly the
// contract's keys.
func checkEvent(t *testing.T, ev svc.RuntimeEvent, typ svc.EventType, toolName string) {
	t.Helper()
	if ev.EventType != typ {
		t.Fatalf("event %s, want %s", ev.EventType, typ)
	}
	if ev.AgentName != "tooled" || ev.TaskID != "task-1" || ev.TraceID != "trace-1" || ev.ParentTraceID != "parent-1" {
		t.Errorf("%s envelope: %+v", typ, ev)
	}
	if ev.Timestamp.IsZero() || ev.Timestamp.Location() != time.UTC {
		t.Errorf("%s timestamp %v, want a UTC time", typ, ev.Timestamp)
	}
	var keys []string
	for k := range ev.Payload {
		keys = append(keys, k)
	}
	want := slices.Clone(svc.PayloadKeys[typ])
	if typ == svc.EventToolCallFailed {
		want = append(want, "reason")
		if k := ev.Payload["reason"]; k != string(svc.KindToolExecution) && k != string(svc.KindTrustViolation) {
			t.Errorf("tool_call_failed reason %v, want a kind", k)
		}
	}
	slices.Sort(keys)
	slices.Sort(want)
	if !slices.Equal(keys, want) {
		t.Errorf("%s payload keys %q, want %q", typ, keys, want)
	}
	if ev.Payload["tool_name"] != toolName {
		t.Errorf("%s tool_name %v, want %s", typ, ev.Payload["tool_name"], toolName)
	}
	if _, ok := ev.Payload["duration_ms"]; ok {
		if d, isFloat := ev.Payload["duration_ms"].(float64); !isFloat || d < 0 {
			t.Errorf("%s duration_ms %#v, want a float64 ≥ 0", typ, ev.Payload["duration_ms"])
		}
	}
}

func TestTools(t *testing.T) {
	var (
		mu        sync.Mutex
		gotArgs   []string
		gotDepth  int
		gotParent string
	)
	add := &tool{name: "add", access: svc.AccessRead, fn: func(ctx context.Context, args json.RawMessage) (json.RawMessage, error) {
		mu.Lock()
		defer mu.Unlock()
		gotArgs = append(gotArgs, string(args))
		gotDepth, gotParent = svc.DepthFrom(ctx), svc.ParentTraceFrom(ctx)
		return json.RawMessage(`{"sum":3}`), nil
	}}
	flaky := &tool{name: "flaky", access: svc.AccessNetwork, fn: func(context.Context, json.RawMessage) (json.RawMessage, error) {
		return nil, errors.New("disk on fire")
	}}
	calls := []svc.ToolCall{
		{ID: "c1", Name: "add", Arguments: json.RawMessage(`{"a":1,"b":2}`)},
		{ID: "c2", Name: "flaky", Arguments: json.RawMessage(`{}`)},
		{ID: "c3", Name: "ghost", Arguments: json.RawMessage(`{}`)},
		{ID: "c4", Name: "add"}, // no arguments: the tool gets {}
	}
	m := &recorder{fn: func(n int, _ svc.ModelRequest) (svc.ModelResponse, error) {
		if n == 0 {
			return svc.ModelResponse{ToolCalls: calls, Output: json.RawMessage(`"let me check"`)}, nil
		}
		return svc.ModelResponse{Output: json.RawMessage(`"final"`)}, nil
	}}
	c := mustCompile(t, svc.Agent{Name: "tooled", Model: "fake:m", Tools: []svc.Tool{add, flaky}}, map[string]svc.Model{"m": m})
	ev := &events{}
	inv := invocation(c, `"go"`)
	inv.Emitter = ev
	out, err := agent.Run(context.Background(), inv)
	if err != nil || string(out.Output) != `"final"` || out.ModelCalls != 2 {
		t.Fatalf("Run = %+v, %v", out, err)
	}

	if want := []string{`{"a":1,"b":2}`, `{}`}; !slices.Equal(gotArgs, want) {
		t.Errorf("add got args %q, want %q", gotArgs, want)
	}
	if gotDepth != 2 || gotParent != "trace-1" {
		t.Errorf("tool ctx depth %d parent %q, want the invocation's depth 2 and trace trace-1", gotDepth, gotParent)
	}

	evs := ev.get()
	wantTypes := []svc.EventType{
		svc.EventToolCallStarted, svc.EventToolCallCompleted,
		svc.EventToolCallStarted, svc.EventToolCallFailed,
		svc.EventToolCallStarted, svc.EventToolCallFailed,
		svc.EventToolCallStarted, svc.EventToolCallCompleted,
	}
	if got := ev.types(); !slices.Equal(got, wantTypes) {
		t.Fatalf("events %q, want %q", got, wantTypes)
	}
	names := []string{"add", "add", "flaky", "flaky", "ghost", "ghost", "add", "add"}
	for i, e := range evs {
		checkEvent(t, e, wantTypes[i], names[i])
	}
	if evs[0].Payload["trust_level"] != "medium" {
		t.Errorf("tool_call_started trust_level %v, want the default medium", evs[0].Payload["trust_level"])
	}
	if tok, ok := evs[1].Payload["tokens_used"].(int64); !ok || tok != 0 {
		t.Errorf("tool_call_completed tokens_used %#v, want int64 0", evs[1].Payload["tokens_used"])
	}
	if e := evs[3].Payload["error"]; e != "disk on fire" {
		t.Errorf("tool_call_failed error %v", e)
	}
	if e, _ := evs[5].Payload["error"].(string); !strings.Contains(e, `unknown tool "ghost"`) {
		t.Errorf("unknown tool error %q", e)
	}

	// The second request carries the assistant's calls and one tool message
	// per call, in order.
	msgs := m.requests()[1].Messages
	if len(msgs) != 6 {
		t.Fatalf("second request has %d messages, want 6: %+v", len(msgs), msgs)
	}
	if msgs[1].Role != svc.RoleAssistant || !reflect.DeepEqual(msgs[1].ToolCalls, calls) || string(msgs[1].Content) != `"let me check"` {
		t.Errorf("assistant message %+v", msgs[1])
	}
	type toolMsg struct {
		id, content string
		isErr       bool
	}
	want := []toolMsg{
		{"c1", `{"sum":3}`, false},
		{"c2", `"disk on fire"`, true},
		{"c3", `"unknown tool \"ghost\" (available: add, flaky)"`, true},
		{"c4", `{"sum":3}`, false},
	}
	for i, w := range want {
		got := msgs[2+i]
		if got.Role != svc.RoleTool || got.ToolCallID != w.id || string(got.Content) != w.content || got.IsError != w.isErr {
			t.Errorf("tool message %d = {%s %s %s %v}, want %+v", i, got.Role, got.ToolCallID, got.Content, got.IsError, w)
		}
	}
}

func TestToolResults(t *testing.T) {
	tests := []struct {
		name    string
		fn      func(context.Context, json.RawMessage) (json.RawMessage, error)
		content string
		isErr   bool
	}{
		{"empty result is null", func(context.Context, json.RawMessage) (json.RawMessage, error) { return nil, nil }, `null`, false},
		{"invalid JSON", func(context.Context, json.RawMessage) (json.RawMessage, error) { return json.RawMessage(`{`), nil },
			`"tool \"t\" returned invalid JSON"`, true},
		{"panic", func(context.Context, json.RawMessage) (json.RawMessage, error) { panic("kaboom") },
			`"tool \"t\" panicked: kaboom"`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := &recorder{fn: func(n int, _ svc.ModelRequest) (svc.ModelResponse, error) {
				if n == 0 {
					return callTool("t", `{}`), nil
				}
				return svc.ModelResponse{Output: json.RawMessage(`1`)}, nil
			}}
			c := mustCompile(t, svc.Agent{Name: "a", Model: "fake:m",
				Tools: []svc.Tool{&tool{name: "t", access: svc.AccessRead, fn: tt.fn}}}, map[string]svc.Model{"m": m})
			inv := invocation(c, `1`)
			inv.Emitter = nil // nil is allowed and drops events
			if _, err := agent.Run(context.Background(), inv); err != nil {
				t.Fatalf("Run: %v", err)
			}
			got := m.requests()[1].Messages[2]
			if string(got.Content) != tt.content || got.IsError != tt.isErr {
				t.Errorf("tool message %s (error %v), want %s (%v)", got.Content, got.IsError, tt.content, tt.isErr)
			}
		})
	}
}

// A tool above the agent's trust level compiles, but calling it fails with
// a TrustViolationError the model sees; the tool never runs.
func TestTrustViolation(t *testing.T) {
	tests := []struct {
		trust   svc.TrustLevel
		access  svc.Access
		allowed bool
	}{
		{svc.TrustSandbox, svc.AccessRead, false},
		{svc.TrustLow, svc.AccessNetwork, false},
		{svc.TrustLow, svc.AccessWrite, false},
		{svc.TrustMedium, svc.AccessWrite, false},
		{svc.TrustLow, svc.AccessRead, true},
		{svc.TrustHigh, svc.AccessWrite, true},
	}
	for _, tt := range tests {
		t.Run(string(tt.trust)+"/"+tt.access.String(), func(t *testing.T) {
			danger := constTool("danger", tt.access, `"done it"`)
			m := &recorder{fn: func(n int, _ svc.ModelRequest) (svc.ModelResponse, error) {
				if n == 0 {
					return callTool("danger", `{}`), nil
				}
				return svc.ModelResponse{Output: json.RawMessage(`"ok"`)}, nil
			}}
			c := mustCompile(t, svc.Agent{Name: "tooled", Model: "fake:m", TrustLevel: tt.trust, Tools: []svc.Tool{danger}},
				map[string]svc.Model{"m": m})
			ev := &events{}
			inv := invocation(c, `1`)
			inv.Emitter = ev
			if _, err := agent.Run(context.Background(), inv); err != nil {
				t.Fatalf("Run: %v", err)
			}
			msg := m.requests()[1].Messages[2]
			evs := ev.get()
			if len(evs) != 2 {
				t.Fatalf("events %q", ev.types())
			}
			checkEvent(t, evs[0], svc.EventToolCallStarted, "danger")
			if evs[0].Payload["trust_level"] != string(tt.trust) {
				t.Errorf("trust_level %v", evs[0].Payload["trust_level"])
			}
			if tt.allowed {
				checkEvent(t, evs[1], svc.EventToolCallCompleted, "danger")
				if danger.calls.Load() != 1 || msg.IsError || string(msg.Content) != `"done it"` {
					t.Errorf("allowed call: %d calls, message %+v", danger.calls.Load(), msg)
				}
				return
			}
			checkEvent(t, evs[1], svc.EventToolCallFailed, "danger")
			if n := danger.calls.Load(); n != 0 {
				t.Errorf("tool ran %d times despite the trust gate", n)
			}
			violation := tools.Check(tt.trust, danger)
			if !errors.Is(violation, svc.ErrTrustViolation) {
				t.Fatalf("tools.Check = %v, want a TrustViolationError", violation)
			}
			var content string
			if err := json.Unmarshal(msg.Content, &content); err != nil {
				t.Fatalf("tool message content %s is not a JSON string", msg.Content)
			}
			if !msg.IsError || content != violation.Error() {
				t.Errorf("model saw %+v, want a failed tool result %q", msg, violation)
			}
			if evs[1].Payload["error"] != violation.Error() {
				t.Errorf("tool_call_failed error %v, want %q", evs[1].Payload["error"], violation)
			}
		})
	}
}

func TestOutputValidation(t *testing.T) {
	schemaText := `{"type":"object","required":["answer"],"properties":{"answer":{"type":"string"}}}`
	resp := func(out string) svc.ModelResponse {
		return svc.ModelResponse{Output: json.RawMessage(out), TokensUsed: 4}
	}
	tests := []struct {
		name      string
		answers   []svc.ModelResponse
		wantCalls int
		wantOut   string // "" when the run must fail with invalid_output
	}{
		{"valid at once", []svc.ModelResponse{resp(`{"answer":"yes"}`)}, 1, `{"answer":"yes"}`},
		{"valid on retry", []svc.ModelResponse{resp(`{"answer":1}`), resp(`{"answer":"fixed"}`)}, 2, `{"answer":"fixed"}`},
		{"empty then valid", []svc.ModelResponse{{}, resp(`{"answer":"x"}`)}, 2, `{"answer":"x"}`},
		{"invalid twice", []svc.ModelResponse{resp(`"text"`), resp(`{"nope":true}`), resp(`{"answer":"too late"}`)}, 2, ""},
		{"tools on retry", []svc.ModelResponse{resp(`[]`), callTool("noop", `{}`)}, 2, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := &recorder{fn: func(n int, _ svc.ModelRequest) (svc.ModelResponse, error) { return tt.answers[n], nil }}
			noop := constTool("noop", svc.AccessRead, `null`)
			c := mustCompile(t, svc.Agent{Name: "typed", Model: "fake:m", OutputType: json.RawMessage(schemaText),
				Tools: []svc.Tool{noop}}, map[string]svc.Model{"m": m})
			out, err := agent.Run(context.Background(), invocation(c, `"q"`))
			reqs := m.requests()
			if len(reqs) != tt.wantCalls || out.ModelCalls != tt.wantCalls {
				t.Fatalf("%d model calls (Outcome says %d), want %d", len(reqs), out.ModelCalls, tt.wantCalls)
			}
			if noop.calls.Load() != 0 {
				t.Error("a tool ran during the corrective call")
			}
			var tokens int64
			for _, a := range tt.answers[:tt.wantCalls] {
				tokens += a.Tokens()
			}
			if out.TokensUsed != tokens {
				t.Errorf("TokensUsed = %d, want %d", out.TokensUsed, tokens)
			}
			if tt.wantCalls == 2 {
				// The corrective request: the conversation, the invalid answer,
				// then a user message carrying the validation error.
				first := tt.answers[0].Output
				if len(first) == 0 {
					first = json.RawMessage("null")
				}
				verr := c.Out.Validate(first)
				msgs := reqs[1].Messages
				if len(msgs) != 3 || msgs[1].Role != svc.RoleAssistant || string(msgs[1].Content) != string(first) {
					t.Fatalf("corrective request messages %+v", msgs)
				}
				last := msgs[2]
				var note string
				if err := json.Unmarshal(last.Content, &note); err != nil || last.Role != svc.RoleUser {
					t.Fatalf("last message %+v: want a user message with a JSON string", last)
				}
				if !strings.Contains(note, verr.Error()) {
					t.Errorf("correction %q does not carry the validation error %q", note, verr)
				}
			}
			if tt.wantOut != "" {
				if err != nil || string(out.Output) != tt.wantOut {
					t.Errorf("Run = %s, %v; want %s", out.Output, err, tt.wantOut)
				}
				return
			}
			kindAndReason(t, err, svc.KindOutputValidation, agent.ReasonInvalidOutput)
			if out.Output != nil || out.Model != "fake:m" {
				t.Errorf("failed Outcome = %+v, want no output and the model", out)
			}
		})
	}
}

func TestHooks(t *testing.T) {
	hookErr := errors.New("hook says no")
	wrap := func(_ context.Context, v json.RawMessage) (json.RawMessage, error) {
		return json.RawMessage(`{"wrapped":` + string(v) + `}`), nil
	}
	fail := func(context.Context, json.RawMessage) (json.RawMessage, error) { return nil, hookErr }
	blank := func(context.Context, json.RawMessage) (json.RawMessage, error) { return nil, nil }
	garbage := func(context.Context, json.RawMessage) (json.RawMessage, error) { return json.RawMessage(`{oops`), nil }
	explode := func(context.Context, json.RawMessage) (json.RawMessage, error) { panic("hook bug") }

	tests := []struct {
		name        string
		pre, post   svc.Hook
		modelSees   string // "" when the model must not be called
		wantOut     string
		wantReason  string
		wantInChain error
	}{
		{"both transform", wrap, wrap, `{"wrapped":"in"}`, `{"wrapped":{"wrapped":"in"}}`, "", nil},
		{"pre nil output is null", blank, nil, `null`, `null`, "", nil},
		{"pre fails", fail, nil, "", "", agent.ReasonPreProcess, hookErr},
		{"pre invalid JSON", garbage, nil, "", "", agent.ReasonPreProcess, nil},
		{"pre panics", explode, nil, "", "", agent.ReasonPreProcess, nil},
		{"post fails", nil, fail, `"in"`, "", agent.ReasonPostProcess, hookErr},
		{"post panics", nil, explode, `"in"`, "", agent.ReasonPostProcess, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := &recorder{fn: func(_ int, req svc.ModelRequest) (svc.ModelResponse, error) {
				return svc.ModelResponse{Output: req.Messages[0].Content}, nil
			}}
			c := mustCompile(t, svc.Agent{Name: "hooked", Model: "fake:m", PreProcess: tt.pre, PostProcess: tt.post},
				map[string]svc.Model{"m": m})
			out, err := agent.Run(context.Background(), invocation(c, `"in"`))
			reqs := m.requests()
			if tt.modelSees == "" {
				if len(reqs) != 0 {
					t.Errorf("model called after a failed pre_process")
				}
			} else if len(reqs) != 1 || string(reqs[0].Messages[0].Content) != tt.modelSees {
				t.Errorf("model saw %+v, want input %s", reqs, tt.modelSees)
			}
			if tt.wantReason == "" {
				if err != nil || string(out.Output) != tt.wantOut {
					t.Errorf("Run = %s, %v; want %s", out.Output, err, tt.wantOut)
				}
				return
			}
			se := kindAndReason(t, err, svc.KindRuntime, tt.wantReason)
			if !strings.HasPrefix(se.Error(), "agent hooked: "+tt.wantReason+" hook") {
				t.Errorf("message %q", se)
			}
			if tt.wantInChain != nil && !errors.Is(err, tt.wantInChain) {
				t.Errorf("hook error not in the chain of %v", err)
			}
		})
	}
}

// slowModel signals when its first call starts, then waits for ctx.
type slowModel struct {
	started chan struct{}
	once    sync.Once
}

func (m *slowModel) Generate(ctx context.Context, _ svc.ModelRequest) (svc.ModelResponse, error) {
	m.once.Do(func() { close(m.started) })
	<-ctx.Done()
	return svc.ModelResponse{}, ctx.Err()
}

// runAsync runs inv and returns a channel with the result.
func runAsync(ctx context.Context, inv *agent.Invocation) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := agent.Run(ctx, inv)
		done <- err
	}()
	return done
}

func waitErr(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
		return nil
	}
}

func TestCancelDuringModelCall(t *testing.T) {
	log := &callLog{}
	slow := &slowModel{started: make(chan struct{})}
	backup := &recorder{name: "backup", log: log, fn: answer(`"backup"`)}
	c := mustCompile(t, svc.Agent{Name: "slow", Model: "fake:slow", FallbackModels: []string{"fake:backup"}},
		map[string]svc.Model{"slow": slow, "backup": backup})

	ctx, cancel := context.WithCancel(context.Background())
	done := runAsync(ctx, invocation(c, `1`))
	<-slow.started
	cancel()
	err := waitErr(t, done)
	if !errors.Is(err, context.Canceled) || svc.KindOf(err) != svc.KindCancelled {
		t.Errorf("error %v (kind %s), want context.Canceled in the chain and kind CancelledError", err, svc.KindOf(err))
	}
	if calls := log.get(); len(calls) != 0 {
		t.Errorf("fallback called after cancellation: %q", calls)
	}
}

func TestCancelTestModelLatency(t *testing.T) {
	c := mustCompile(t, svc.Agent{Name: "slow", Model: "test:echo", ModelSettings: map[string]any{"latency_ms": 600000}}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := runAsync(ctx, invocation(c, `1`))
	cancel()
	if err := waitErr(t, done); !errors.Is(err, context.Canceled) {
		t.Errorf("error %v, want context.Canceled in the chain", err)
	}
}

func TestDeadlineDuringModelCall(t *testing.T) {
	slow := &slowModel{started: make(chan struct{})}
	c := mustCompile(t, svc.Agent{Name: "slow", Model: "fake:slow"}, map[string]svc.Model{"slow": slow})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	err := waitErr(t, runAsync(ctx, invocation(c, `1`)))
	if !errors.Is(err, context.DeadlineExceeded) || svc.KindOf(err) != svc.KindTimeout {
		t.Errorf("error %v (kind %s), want DeadlineExceeded and TimeoutError", err, svc.KindOf(err))
	}
}

// A cancel cause that is a domain error (the runtime shutting down) gives
// the error its kind, and context.Canceled stays in the chain.
func TestCancelCause(t *testing.T) {
	slow := &slowModel{started: make(chan struct{})}
	c := mustCompile(t, svc.Agent{Name: "slow", Model: "fake:slow"}, map[string]svc.Model{"slow": slow})
	ctx, cancel := context.WithCancelCause(context.Background())
	done := runAsync(ctx, invocation(c, `1`))
	<-slow.started
	cancel(svc.ErrShuttingDown)
	err := waitErr(t, done)
	if !errors.Is(err, context.Canceled) || !errors.Is(err, svc.ErrShuttingDown) || svc.KindOf(err) != svc.KindShuttingDown {
		t.Errorf("error %v (kind %s)", err, svc.KindOf(err))
	}
}

func TestCancelDuringToolCall(t *testing.T) {
	started := make(chan struct{})
	hang := &tool{name: "hang", access: svc.AccessRead, fn: func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
		close(started)
		<-ctx.Done()
		return nil, ctx.Err()
	}}
	after := constTool("after", svc.AccessRead, `1`)
	m := &recorder{fn: func(int, svc.ModelRequest) (svc.ModelResponse, error) {
		return svc.ModelResponse{ToolCalls: []svc.ToolCall{{ID: "1", Name: "hang"}, {ID: "2", Name: "after"}}}, nil
	}}
	c := mustCompile(t, svc.Agent{Name: "tooled", Model: "fake:m", Tools: []svc.Tool{hang, after}}, map[string]svc.Model{"m": m})
	ev := &events{}
	inv := invocation(c, `1`)
	inv.Emitter = ev
	ctx, cancel := context.WithCancel(context.Background())
	done := runAsync(ctx, inv)
	<-started
	cancel()
	err := waitErr(t, done)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v, want context.Canceled in the chain", err)
	}
	if n := len(m.requests()); n != 1 {
		t.Errorf("model called %d times, want 1", n)
	}
	if after.calls.Load() != 0 {
		t.Error("the next tool ran after cancellation")
	}
	if got, want := ev.types(), []svc.EventType{svc.EventToolCallStarted, svc.EventToolCallFailed}; !slices.Equal(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}
}

func TestAlreadyCancelled(t *testing.T) {
	m := &recorder{fn: answer(`1`)}
	c := mustCompile(t, svc.Agent{Name: "a", Model: "fake:m"}, map[string]svc.Model{"m": m})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := agent.Run(ctx, invocation(c, `1`))
	if !errors.Is(err, context.Canceled) || len(m.requests()) != 0 {
		t.Errorf("Run on a cancelled ctx: %v, %d model calls", err, len(m.requests()))
	}
}

func TestMaxTurns(t *testing.T) {
	noop := constTool("noop", svc.AccessRead, `null`)
	m := &recorder{fn: func(int, svc.ModelRequest) (svc.ModelResponse, error) { return callTool("noop", `{}`), nil }}
	c := mustCompile(t, svc.Agent{Name: "loopy", Model: "fake:m", Tools: []svc.Tool{noop}}, map[string]svc.Model{"m": m})
	out, err := agent.Run(context.Background(), invocation(c, `1`))
	kindAndReason(t, err, svc.KindRuntime, agent.ReasonMaxTurns)
	if len(m.requests()) != agent.MaxTurns || out.ModelCalls != agent.MaxTurns {
		t.Errorf("%d model calls, want %d", len(m.requests()), agent.MaxTurns)
	}
	// The last turn's calls are not run: nothing would read their results.
	if n := noop.calls.Load(); n != agent.MaxTurns-1 {
		t.Errorf("tool ran %d times, want %d", n, agent.MaxTurns-1)
	}
	if out.TokensUsed != 5*agent.MaxTurns {
		t.Errorf("TokensUsed = %d", out.TokensUsed)
	}
}

func TestModelPanic(t *testing.T) {
	bad := &recorder{fn: func(int, svc.ModelRequest) (svc.ModelResponse, error) { panic("provider bug") }}
	good := &recorder{fn: answer(`"ok"`)}
	models := map[string]svc.Model{"bad": bad, "good": good}

	c := mustCompile(t, svc.Agent{Name: "p", Model: "fake:bad", FallbackModels: []string{"fake:good"}}, models)
	out, err := agent.Run(context.Background(), invocation(c, `1`))
	if err != nil || out.Model != "fake:good" {
		t.Errorf("with a fallback: %+v, %v", out, err)
	}

	c = mustCompile(t, svc.Agent{Name: "p", Model: "fake:bad"}, models)
	_, err = agent.Run(context.Background(), invocation(c, `1`))
	kindAndReason(t, err, svc.KindModel, agent.ReasonModelError)
	if !strings.Contains(err.Error(), "model panicked: provider bug") {
		t.Errorf("error %q", err)
	}
}

func TestCost(t *testing.T) {
	m := &recorder{fn: func(n int, _ svc.ModelRequest) (svc.ModelResponse, error) {
		if n == 0 {
			r := callTool("noop", `{}`)
			r.CostUSD = 0.25
			return r, nil
		}
		return svc.ModelResponse{Output: json.RawMessage(`1`), InputTokens: 10, OutputTokens: 3, CostUSD: 0.5}, nil
	}}
	c := mustCompile(t, svc.Agent{Name: "a", Model: "fake:m", Tools: []svc.Tool{constTool("noop", svc.AccessRead, `1`)}},
		map[string]svc.Model{"m": m})
	out, err := agent.Run(context.Background(), invocation(c, `1`))
	if err != nil || out.CostUSD != 0.75 || out.TokensUsed != 18 {
		t.Errorf("Run = %+v, %v; want cost 0.75, tokens 18", out, err)
	}
}

func TestRunWithoutAgent(t *testing.T) {
	for _, inv := range []*agent.Invocation{nil, {}} {
		if _, err := agent.Run(context.Background(), inv); svc.KindOf(err) != svc.KindRuntime {
			t.Errorf("Run(%v) = %v", inv, err)
		}
	}
}

// One compiled agent serves many concurrent runs.
func TestConcurrentRuns(t *testing.T) {
	m := svc.ModelFunc(func(_ context.Context, req svc.ModelRequest) (svc.ModelResponse, error) {
		if len(req.Messages) == 1 {
			return callTool("noop", `{}`), nil
		}
		return svc.ModelResponse{Output: req.Messages[0].Content}, nil
	})
	c := mustCompile(t, svc.Agent{Name: "tooled", Model: "fake:m", Tools: []svc.Tool{constTool("noop", svc.AccessRead, `1`)}},
		map[string]svc.Model{"m": m})
	ev := &events{}
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in := json.RawMessage(strings.Repeat("1", i+1))
			inv := invocation(c, string(in))
			inv.Emitter = ev
			out, err := agent.Run(context.Background(), inv)
			if err != nil || string(out.Output) != string(in) {
				t.Errorf("run %d: %s, %v", i, out.Output, err)
			}
		}()
	}
	wg.Wait()
	if n := len(ev.get()); n != 64 {
		t.Errorf("%d events, want 64", n)
	}
}

// End to end with the real pieces: tools.Func tools, test:echo calling
// every tool, and a trust gate refusing one of them.
func TestEchoCallsTools(t *testing.T) {
	type addIn struct {
		A int `json:"a"`
		B int `json:"b"`
	}
	type addOut struct {
		Sum int `json:"sum"`
	}
	add := tools.MustFunc("add", "Adds two numbers.", svc.AccessRead, func(_ context.Context, in addIn) (addOut, error) {
		return addOut{Sum: in.A + in.B}, nil
	})
	write := tools.MustFunc("write", "Writes.", svc.AccessWrite, func(context.Context, addIn) (addOut, error) {
		t.Error("write ran despite the trust gate")
		return addOut{}, nil
	})
	c := mustCompile(t, svc.Agent{Name: "tooled", Model: "test:echo", TrustLevel: svc.TrustLow,
		Tools: []svc.Tool{write, add}, ModelSettings: map[string]any{"call_tools": "all"}}, nil)
	ev := &events{}
	inv := invocation(c, `{"q":1}`)
	inv.Emitter = ev
	out, err := agent.Run(context.Background(), inv)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	var got struct {
		Echo  json.RawMessage            `json:"echo"`
		Tools map[string]json.RawMessage `json:"tools"`
	}
	if err := json.Unmarshal(out.Output, &got); err != nil {
		t.Fatalf("output %s: %v", out.Output, err)
	}
	if string(got.Echo) != `{"q":1}` || len(got.Tools) != 2 || !strings.Contains(string(got.Tools["add"]), `"sum"`) {
		t.Errorf("output %s", out.Output)
	}
	want := []svc.EventType{svc.EventToolCallStarted, svc.EventToolCallCompleted, svc.EventToolCallStarted, svc.EventToolCallFailed}
	if types := ev.types(); !slices.Equal(types, want) {
		t.Errorf("events %q, want %q", types, want)
	}
	if out.ModelCalls != 2 || out.Model != "test:echo" {
		t.Errorf("Outcome = %+v", out)
	}
}

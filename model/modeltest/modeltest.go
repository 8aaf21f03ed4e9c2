// Package modeltest is the contract suite every model provider passes, in
// the style of testing/fstest.TestFS: the test provider, and the real
// providers against a local HTTP server speaking their wire format
// through their SDK.
//
// A provider's tests call Run with a Provider: a function that makes a
// model whose every call does what a Script says (answer with text or
// tool calls, fail in a given way, or hang until the call is given up),
// the failures the provider can be made to show, and the model_settings
// it refuses. A real provider's Model starts a server on 127.0.0.1 that
// answers every request per the script and closes it when the test ends.
//
// The suite holds every provider to these rules, which the agent loop and
// its fallback_models rely on:
//
//   - Text: a final answer is Output, the text as a JSON string, and no
//     tool calls.
//   - ToolCalls: the calls come back in order, by name, with their
//     arguments as the JSON object sent and a non-empty id each, distinct.
//   - Usage: Tokens() is input plus output tokens; a provider that reports
//     them apart (SplitUsage) fills InputTokens and OutputTokens.
//   - Failures: a failed call's error is a *model.ProviderError of the
//     failure's class (RateLimited rate_limit 429, Overloaded overloaded,
//     ServerError server 5xx, AuthFailed auth 401, InvalidRequest
//     invalid_request 400, Malformed server), naming the provider and
//     model, carrying the server's message (except Malformed); rate
//     limits, overload, server errors and malformed answers allow
//     fallback, a bad key and a bad request do not, and are not retried.
//     A provider with no server (the test provider) shows Failed: an error
//     that is no context error and allows fallback. The agent loop turns
//     every one of them into a ModelError once its models are tried.
//   - Cancellation: a cancelled context ends a call that hangs (promptly:
//     within Wait), with an error wrapping context.Canceled that is no
//     ProviderError and allows no fallback; a context cancelled before
//     the call fails it without reaching the server. A context deadline
//     ends a hanging call with an error wrapping
//     context.DeadlineExceeded that allows fallback (a timeout).
//   - Settings refused: each of BadSettings fails the call with a
//     SpecValidationError before anything reaches the server.
//   - Concurrency: a model answers several calls at once.
package modeltest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/model"
)

// Wait bounds how long a cancelled or timed-out call may take to return;
// one that needs longer is broken, not slow.
const Wait = 10 * time.Second

// ErrorMessage is the message a scripted server puts in its error bodies:
// a provider's error must carry it.
const ErrorMessage = "modeltest: the scripted server refuses"

// Failure is a way a scripted call fails.
type Failure string

// Failures a Script can ask for.
const (
	// RateLimited answers 429 with a short Retry-After (a few ms), every
	// attempt.
	RateLimited Failure = "rate_limited"
	// Overloaded answers the provider's overload status (503, or 529 for
	// Anthropic) with a short Retry-After, every attempt.
	Overloaded Failure = "overloaded"
	// ServerError answers 500 with a short Retry-After, every attempt.
	ServerError Failure = "server_error"
	// AuthFailed answers 401: the key is wrong.
	AuthFailed Failure = "auth_failed"
	// InvalidRequest answers 400: the request is wrong.
	InvalidRequest Failure = "invalid_request"
	// Malformed answers 200 with a body that is no answer (not JSON).
	Malformed Failure = "malformed"
	// Failed is the failure of a provider without a server (the test
	// provider's test:fail): any error but a context's.
	Failed Failure = "failed"
)

// want is what the suite expects of a failure.
type want struct {
	class    model.Class
	status   int  // 0: any status (the provider's own choice, 5xx or 503/529)
	fallback bool // ProviderError.Fallback and model.CanFallback
	retried  bool // false: exactly one request reaches the server
	message  bool // the error carries ErrorMessage
}

var wants = map[Failure]want{
	RateLimited:    {class: model.ClassRateLimit, status: 429, fallback: true, retried: true, message: true},
	Overloaded:     {class: model.ClassOverloaded, fallback: true, retried: true, message: true},
	ServerError:    {class: model.ClassServer, status: 500, fallback: true, retried: true, message: true},
	AuthFailed:     {class: model.ClassAuth, status: 401, message: true},
	InvalidRequest: {class: model.ClassInvalid, status: 400, message: true},
	Malformed:      {class: model.ClassServer, fallback: true, retried: true},
}

// Answer is a scripted answer: Text, or ToolCalls (each Arguments a JSON
// object, or nil for {}), with the usage the provider reports.
type Answer struct {
	Text                      string
	ToolCalls                 []svc.ToolCall
	InputTokens, OutputTokens int64
}

// Script is what every call of a scripted model does: fail with Fail when
// it is set, else hang until the call is given up when Hang is set, else
// answer with Answer.
type Script struct {
	Answer Answer
	Fail   Failure
	Hang   bool
}

// Scripted is a model made for a Script.
type Scripted struct {
	Model svc.Model
	// Settings are model_settings every request must carry (the test
	// provider is scripted by them); nil for none.
	Settings map[string]any
	// Calls is the number of requests the provider's server has received;
	// nil for a provider without one.
	Calls func() int
}

// Provider is what the suite tests.
type Provider struct {
	// Name is the provider's name in model ids ("openai"), which its
	// ProviderErrors carry.
	Name string
	// Model returns a model (named ModelName) that follows s on every
	// call.
	Model func(t *testing.T, s Script) Scripted
	// Failures are the failures the provider can be scripted to show.
	Failures []Failure
	// SplitUsage says the provider reports input and output tokens apart.
	SplitUsage bool
	// BadSettings are model_settings the provider refuses.
	BadSettings []map[string]any
}

// ModelName is the name part of the model id a Provider's Model uses.
const ModelName = "modeltest-model"

// Tools are the tools every request of the suite offers.
var Tools = []svc.ToolSpec{
	{Name: "lookup", Description: "Looks a word up.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"word":{"type":"string"}},"required":["word"]}`)},
	{Name: "ping", Description: "Answers pong.", InputSchema: json.RawMessage(`{"type":"object","properties":{}}`)},
}

// Run runs the suite on p.
func Run(t *testing.T, p Provider) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, p Provider)
	}{
		{"Text", testText},
		{"ToolCalls", testToolCalls},
		{"Usage", testUsage},
		{"Failures", testFailures},
		{"Cancel", testCancel},
		{"CancelledBeforeCall", testCancelledBeforeCall},
		{"Deadline", testDeadline},
		{"SettingsRefused", testSettingsRefused},
		{"Concurrent", testConcurrent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, p) })
	}
}

// Request is the request the suite sends: a user message with text, the
// suite's Tools, and the scripted model's settings merged with extra.
func Request(s Scripted, text string, extra map[string]any) svc.ModelRequest {
	b, _ := json.Marshal(text)
	settings := map[string]any{}
	for k, v := range s.Settings {
		settings[k] = v
	}
	for k, v := range extra {
		settings[k] = v
	}
	return svc.ModelRequest{
		Model: ModelName, Instructions: "Answer briefly.",
		Messages: []svc.Message{{Role: svc.RoleUser, Content: b}},
		Tools:    Tools, Settings: settings,
	}
}

func generate(ctx context.Context, s Scripted) (svc.ModelResponse, error) {
	return s.Model.Generate(ctx, Request(s, "hello", nil))
}

func calls(s Scripted) int {
	if s.Calls == nil {
		return -1
	}
	return s.Calls()
}

func testText(t *testing.T, p Provider) {
	s := p.Model(t, Script{Answer: Answer{Text: "Sunny, 21 °C.", InputTokens: 3, OutputTokens: 4}})
	resp, err := generate(context.Background(), s)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	if len(resp.ToolCalls) != 0 {
		t.Errorf("ToolCalls = %+v; want none", resp.ToolCalls)
	}
	var text string
	if err := json.Unmarshal(resp.Output, &text); err != nil || text != "Sunny, 21 °C." {
		t.Errorf("Output = %s; want the text as a JSON string", resp.Output)
	}
	if n := calls(s); n != -1 && n != 1 {
		t.Errorf("the server got %d requests; want 1", n)
	}
}

func testToolCalls(t *testing.T, p Provider) {
	script := []svc.ToolCall{
		{Name: "lookup", Arguments: json.RawMessage(`{"word":"ephemeral"}`)},
		{Name: "ping", Arguments: json.RawMessage(`{}`)},
	}
	s := p.Model(t, Script{Answer: Answer{ToolCalls: script, InputTokens: 5, OutputTokens: 6}})
	resp, err := generate(context.Background(), s)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	if len(resp.ToolCalls) != len(script) {
		t.Fatalf("ToolCalls = %+v; want %d calls", resp.ToolCalls, len(script))
	}
	ids := map[string]bool{}
	for i, c := range resp.ToolCalls {
		if c.Name != script[i].Name {
			t.Errorf("call %d is %q; want %q", i, c.Name, script[i].Name)
		}
		if !sameJSON(c.Arguments, script[i].Arguments) {
			t.Errorf("call %d arguments %s; want %s", i, c.Arguments, script[i].Arguments)
		}
		if c.ID == "" || ids[c.ID] {
			t.Errorf("call %d id %q: want a non-empty id of its own", i, c.ID)
		}
		ids[c.ID] = true
	}
}

func testUsage(t *testing.T, p Provider) {
	for _, a := range []Answer{
		{Text: "x", InputTokens: 11, OutputTokens: 7},
		{ToolCalls: []svc.ToolCall{{Name: "ping", Arguments: json.RawMessage(`{}`)}}, InputTokens: 20, OutputTokens: 2},
	} {
		s := p.Model(t, Script{Answer: a})
		resp, err := generate(context.Background(), s)
		if err != nil {
			t.Fatalf("Generate: %v", err)
		}
		if got, want := resp.Tokens(), a.InputTokens+a.OutputTokens; got != want {
			t.Errorf("Tokens() = %d; want %d (input %d + output %d)", got, want, a.InputTokens, a.OutputTokens)
		}
		if p.SplitUsage && (resp.InputTokens != a.InputTokens || resp.OutputTokens != a.OutputTokens) {
			t.Errorf("input/output tokens = %d/%d; want %d/%d", resp.InputTokens, resp.OutputTokens, a.InputTokens, a.OutputTokens)
		}
	}
}

func testFailures(t *testing.T, p Provider) {
	if len(p.Failures) == 0 {
		t.Fatal("the provider declares no failures to script")
	}
	for _, f := range p.Failures {
		t.Run(string(f), func(t *testing.T) {
			s := p.Model(t, Script{Fail: f})
			_, err := generate(context.Background(), s)
			if err == nil {
				t.Fatal("Generate succeeded; want an error")
			}
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("error %v is a context's; want the provider's failure", err)
			}
			if f == Failed {
				if !model.CanFallback(err) {
					t.Errorf("CanFallback(%v) = false; want a failed model to allow its fallbacks", err)
				}
				return
			}
			w, ok := wants[f]
			if !ok {
				t.Fatalf("no rule for failure %q", f)
			}
			var pe *model.ProviderError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v (%T) is no *model.ProviderError", err, err)
			}
			if pe.Class != w.class || (w.status != 0 && pe.Status != w.status) {
				t.Errorf("class %s, status %d; want %s, %d (error %v)", pe.Class, pe.Status, w.class, w.status, err)
			}
			if pe.Provider != p.Name || pe.Model != ModelName {
				t.Errorf("error names %s:%s; want %s:%s", pe.Provider, pe.Model, p.Name, ModelName)
			}
			if w.message && !strings.Contains(pe.Message, ErrorMessage) {
				t.Errorf("message %q; want the server's, %q", pe.Message, ErrorMessage)
			}
			if pe.Fallback() != w.fallback || model.CanFallback(err) != w.fallback {
				t.Errorf("Fallback() = %v, CanFallback = %v; want %v", pe.Fallback(), model.CanFallback(err), w.fallback)
			}
			if n := calls(s); !w.retried && n != -1 && n != 1 {
				t.Errorf("the server got %d requests; want 1 (a %s is not retried)", n, f)
			}
		})
	}
}

// hang runs a call of a hanging script under ctx and returns its error,
// failing the test when it does not return within Wait.
func hang(ctx context.Context, t *testing.T, s Scripted) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := s.Model.Generate(ctx, Request(s, "hello", nil))
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(Wait):
		t.Fatalf("the call did not return within %v of its context ending", Wait)
		return nil
	}
}

func testCancel(t *testing.T, p Provider) {
	s := p.Model(t, Script{Hang: true})
	ctx, cancel := context.WithCancel(context.Background())
	// Cancel once the call is under way: at the server when there is one.
	go func() {
		deadline := time.Now().Add(Wait)
		for s.Calls != nil && s.Calls() == 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(20 * time.Millisecond)
		cancel()
	}()
	err := hang(ctx, t, s)
	cancel()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v; want one wrapping context.Canceled", err)
	}
	var pe *model.ProviderError
	if errors.As(err, &pe) {
		t.Errorf("error is a ProviderError %+v; a cancelled call must not try fallbacks", pe)
	}
	if model.CanFallback(err) {
		t.Error("CanFallback(a cancelled call) = true")
	}
	if svc.KindOf(err) != svc.KindCancelled {
		t.Errorf("kind %s; want %s", svc.KindOf(err), svc.KindCancelled)
	}
	if n := calls(s); n != -1 && n != 1 {
		t.Errorf("the server got %d requests; want 1 (no retry after a cancel)", n)
	}
}

func testCancelledBeforeCall(t *testing.T, p Provider) {
	s := p.Model(t, Script{Answer: Answer{Text: "ok"}})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := generate(ctx, s)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v; want one wrapping context.Canceled", err)
	}
	if n := calls(s); n > 0 {
		t.Errorf("the server got %d requests; want none", n)
	}
}

func testDeadline(t *testing.T, p Provider) {
	s := p.Model(t, Script{Hang: true})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := hang(ctx, t, s)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v; want one wrapping context.DeadlineExceeded", err)
	}
	if !model.CanFallback(err) {
		t.Error("CanFallback(a timed-out call) = false; want a timeout to allow fallbacks")
	}
	if svc.KindOf(err) != svc.KindTimeout {
		t.Errorf("kind %s; want %s", svc.KindOf(err), svc.KindTimeout)
	}
}

func testSettingsRefused(t *testing.T, p Provider) {
	if len(p.BadSettings) == 0 {
		t.Fatal("the provider declares no settings it refuses")
	}
	s := p.Model(t, Script{Answer: Answer{Text: "ok"}})
	for _, bad := range p.BadSettings {
		_, err := s.Model.Generate(context.Background(), Request(s, "hello", bad))
		if !errors.Is(err, svc.ErrSpecValidation) {
			t.Errorf("settings %v: error %v; want a SpecValidationError", bad, err)
		}
	}
	if n := calls(s); n > 0 {
		t.Errorf("the server got %d requests; want none for refused settings", n)
	}
}

func testConcurrent(t *testing.T, p Provider) {
	const n = 8
	s := p.Model(t, Script{Answer: Answer{Text: "ok", InputTokens: 1, OutputTokens: 1}})
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			_, err := s.Model.Generate(context.Background(), Request(s, fmt.Sprint("call ", i), nil))
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("Generate: %v", err)
		}
	}
	if got := calls(s); got != -1 && got != n {
		t.Errorf("the server got %d requests; want %d", got, n)
	}
}

// sameJSON reports whether a and b are the same JSON value.
func sameJSON(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return string(xb) == string(yb)
}

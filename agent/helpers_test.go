package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/agent"
	"github.com/svc-dev/svc/model"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// recorder is a hand-written model: fn decides each answer from the call
// number (0-based); every request is kept, with its messages copied, and
// every call is appended to the shared log under the model's name.
type recorder struct {
	name string
	log  *callLog
	fn   func(n int, req svc.ModelRequest) (svc.ModelResponse, error)

	mu   sync.Mutex
	reqs []svc.ModelRequest
}

func (r *recorder) Generate(ctx context.Context, req svc.ModelRequest) (svc.ModelResponse, error) {
	r.mu.Lock()
	n := len(r.reqs)
	req.Messages = slices.Clone(req.Messages)
	r.reqs = append(r.reqs, req)
	r.mu.Unlock()
	if r.log != nil {
		r.log.add(r.name)
	}
	return r.fn(n, req)
}

func (r *recorder) requests() []svc.ModelRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.reqs)
}

type callLog struct {
	mu    sync.Mutex
	calls []string
}

func (l *callLog) add(s string) {
	l.mu.Lock()
	l.calls = append(l.calls, s)
	l.mu.Unlock()
}

func (l *callLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.calls)
}

// answer is a model function that always gives output.
func answer(output string) func(int, svc.ModelRequest) (svc.ModelResponse, error) {
	return func(int, svc.ModelRequest) (svc.ModelResponse, error) {
		return svc.ModelResponse{Output: json.RawMessage(output), InputTokens: 3, OutputTokens: 2}, nil
	}
}

// failing is a model function that always fails with err.
func failing(err error) func(int, svc.ModelRequest) (svc.ModelResponse, error) {
	return func(int, svc.ModelRequest) (svc.ModelResponse, error) { return svc.ModelResponse{}, err }
}

// registry returns model.Default() plus a "fake" provider serving models
// by name, so agents can mix test:* and hand-written models.
func registry(models map[string]svc.Model) *model.Registry {
	reg := model.Default()
	reg.Register("fake", func(name string) (svc.Model, error) {
		m, ok := models[name]
		if !ok {
			return nil, svc.Errorf(svc.KindRegistry, "fake model %q: not defined by the test", name)
		}
		return m, nil
	})
	return reg
}

func mustCompile(t testing.TB, a svc.Agent, models map[string]svc.Model) *agent.Compiled {
	t.Helper()
	c, err := agent.Compile(a, registry(models))
	if err != nil {
		t.Fatalf("Compile(%s): %v", a.Name, err)
	}
	return c
}

// tool is a hand-written svc.Tool.
type tool struct {
	name   string
	access svc.Access
	schema json.RawMessage
	fn     func(ctx context.Context, args json.RawMessage) (json.RawMessage, error)
	calls  atomic.Int32
}

func (t *tool) Name() string                 { return t.name }
func (t *tool) Description() string          { return "the " + t.name + " tool" }
func (t *tool) InputSchema() json.RawMessage { return t.schema }
func (t *tool) Access() svc.Access           { return t.access }
func (t *tool) Call(ctx context.Context, args json.RawMessage) (json.RawMessage, error) {
	t.calls.Add(1)
	return t.fn(ctx, args)
}

func constTool(name string, access svc.Access, result string) *tool {
	return &tool{name: name, access: access, schema: json.RawMessage(`{"type":"object"}`),
		fn: func(context.Context, json.RawMessage) (json.RawMessage, error) { return json.RawMessage(result), nil }}
}

// events collects emitted events.
type events struct {
	mu  sync.Mutex
	evs []svc.RuntimeEvent
}

func (e *events) Emit(ev svc.RuntimeEvent) {
	e.mu.Lock()
	e.evs = append(e.evs, ev)
	e.mu.Unlock()
}

func (e *events) get() []svc.RuntimeEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.evs)
}

func (e *events) types() []svc.EventType {
	var out []svc.EventType
	for _, ev := range e.get() {
		out = append(out, ev.EventType)
	}
	return out
}

// budget records its calls and fails when told to.
type budget struct {
	mu       sync.Mutex
	calls    []string
	reserves int
	// reserveErr is returned by the failAt-th Reserve (1-based) and later ones.
	reserveErr error
	failAt     int
	chargeErr  error
}

func (b *budget) Reserve(int64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls = append(b.calls, "reserve")
	b.reserves++
	if b.reserveErr != nil && b.reserves >= b.failAt {
		return b.reserveErr
	}
	return nil
}

func (b *budget) Charge(tokens int64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls = append(b.calls, fmt.Sprintf("charge %d", tokens))
	return b.chargeErr
}

func (b *budget) get() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.calls)
}

func invocation(c *agent.Compiled, input string) *agent.Invocation {
	return &agent.Invocation{
		Agent:         c,
		Input:         json.RawMessage(input),
		TaskID:        "task-1",
		TraceID:       "trace-1",
		ParentTraceID: "parent-1",
		Depth:         2,
		Emitter:       svc.NopEmitter{},
	}
}

func kindAndReason(t *testing.T, err error, kind svc.Kind, reason string) *svc.Error {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %s (%s)", kind, reason)
	}
	se, ok := err.(*svc.Error)
	if !ok {
		t.Fatalf("error %v is %T, want *svc.Error", err, err)
	}
	if se.Kind != kind || se.Reason != reason {
		t.Fatalf("error %q: kind %s reason %q, want %s %q", err, se.Kind, se.Reason, kind, reason)
	}
	return se
}

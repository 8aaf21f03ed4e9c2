package examples_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/model"
	"github.com/svc-dev/svc/model/providers"
	"github.com/svc-dev/svc/spec"
	"github.com/svc-dev/svc/supervisor"
	"github.com/svc-dev/svc/supervisor/spawn"
	"github.com/svc-dev/svc/tools"
)

// fakeAPI answers every POST with body and records the request bodies.
type fakeAPI struct {
	mu     sync.Mutex
	bodies []map[string]any
	header http.Header
	answer string
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	f.mu.Lock()
	f.bodies = append(f.bodies, m)
	f.header = r.Header.Clone()
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, f.answer)
}

// The provider examples load as `svc serve --specs examples/models` loads
// them, and the OpenAI and Anthropic agents run end to end through the
// real SDK clients against local servers speaking each wire format.
func TestModelExamples(t *testing.T) {
	openai := &fakeAPI{answer: `{"id":"c1","object":"chat.completion","created":1,"model":"gpt-4o-mini",
		"choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"It is noon."}}],
		"usage":{"prompt_tokens":1000,"completion_tokens":500,"total_tokens":1500}}`}
	anthropic := &fakeAPI{answer: `{"id":"m1","type":"message","role":"assistant","model":"claude-sonnet-4-5",
		"stop_reason":"tool_use","content":[{"type":"tool_use","id":"t1","name":"final_answer",
		"input":{"category":"billing","confidence":0.8}}],"usage":{"input_tokens":200,"output_tokens":20}}`}
	os := httptest.NewServer(openai)
	defer os.Close()
	as := httptest.NewServer(anthropic)
	defer as.Close()
	t.Setenv("OPENAI_BASE_URL", os.URL+"/v1")
	t.Setenv("OPENAI_API_KEY", "sk-test")
	t.Setenv("ANTHROPIC_BASE_URL", as.URL)
	t.Setenv("ANTHROPIC_API_KEY", "ak-test")

	models := providers.Default()
	set, err := spec.Load("models", spec.Env{
		Tools:      tools.Builtins(tools.BuiltinOptions{}),
		Builtins:   append([]string{spawn.AgentsTool}, model.ServerTools...),
		CheckModel: func(id string) error { _, err := models.Resolve(id); return err },
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Agents) != 9 {
		t.Fatalf("loaded %d agents, want the nine examples", len(set.Agents))
	}
	rt, err := supervisor.New(supervisor.Config{Options: set.Options, Models: models})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rt.Shutdown(ctx)
	}()
	if err := rt.Register(set.Agents...); err != nil {
		t.Fatal(err)
	}

	res, err := rt.Run(t.Context(), "assistant_openai", svc.TaskSpec{Input: json.RawMessage(`"what time is it?"`)})
	if err != nil || !res.Success || string(res.Output) != `"It is noon."` {
		t.Fatalf("assistant_openai: %+v, %v", res, err)
	}
	if res.Metadata.Model != "openai:gpt-4o-mini" || res.Metadata.TokensUsed != 1500 || res.Metadata.CostUSD <= 0 || res.Metadata.CostUnknown {
		t.Errorf("assistant_openai metadata = %+v, want the model, 1500 tokens and a known cost", res.Metadata)
	}
	body := openai.bodies[0]
	if body["model"] != "gpt-4o-mini" || body["temperature"] != 0.2 || openai.header.Get("Authorization") != "Bearer sk-test" {
		t.Errorf("OpenAI request: %v, auth %q", body, openai.header.Get("Authorization"))
	}
	if tl, _ := body["tools"].([]any); len(tl) != 1 || !strings.Contains(js(tl[0]), `"current_time"`) {
		t.Errorf("OpenAI request tools = %v, want current_time", body["tools"])
	}

	res, err = rt.Run(t.Context(), "assistant_anthropic", svc.TaskSpec{Input: json.RawMessage(`{"text":"I was charged twice"}`)})
	if err != nil || !res.Success || js(json.RawMessage(res.Output)) != `{"category":"billing","confidence":0.8}` {
		t.Fatalf("assistant_anthropic: %+v, %v", res, err)
	}
	if anthropic.header.Get("X-Api-Key") != "ak-test" || anthropic.bodies[0]["max_tokens"] != 1024.0 {
		t.Errorf("Anthropic request: %v, key %q", anthropic.bodies[0], anthropic.header.Get("X-Api-Key"))
	}
}

package google_test

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/llmsim"
	"github.com/svc-dev/svc/model/google"
	"github.com/svc-dev/svc/model/modeltest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestSuite runs the model provider contract suite on the provider,
// through the genai SDK, against llmsim speaking the Gemini API.
func TestSuite(t *testing.T) {
	modeltest.Run(t, modeltest.Provider{
		Name:  google.Provider,
		Model: scripted,
		Failures: []modeltest.Failure{
			modeltest.RateLimited, modeltest.Overloaded, modeltest.ServerError,
			modeltest.AuthFailed, modeltest.InvalidRequest, modeltest.Malformed,
		},
		SplitUsage: true,
		BadSettings: []map[string]any{
			{"temperature": "hot"},
			{"max_tokens": 1.5},
			{"max_tokens": -1},
			{"seed": "x"},
			{"stop": 5},
			{"top_k": []any{1}},
			{"thinking_budget": "lots"},
			{"timeout": "soon"},
			{"max_retries": -1},
			{"base_url": "localhost:8080"},
			{"api_key": 42},
			{"stream": "yes"},
			{"stream_idle_timeout_ms": 0},
		},
	})
}

func scripted(t *testing.T, s modeltest.Script) modeltest.Scripted {
	t.Helper()
	sim := start(t, llmsim.Config{Scenario: &llmsim.Scenario{Rules: []llmsim.Rule{modeltest.SimRule(t, s, "503")}}})
	m := newModel(t, sim, modeltest.ModelName)
	return modeltest.Scripted{Model: m, Calls: func() int { return sim.Stats()["g-key/"+modeltest.ModelName] }}
}

func start(t *testing.T, cfg llmsim.Config) *llmsim.Server {
	t.Helper()
	sim := llmsim.New(cfg)
	if err := sim.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	return sim
}

func newModel(t *testing.T, sim *llmsim.Server, name string) svc.Model {
	t.Helper()
	m, err := google.NewWithConfig(name, google.Config{BaseURL: sim.URL(), APIKey: "g-key", RetryDelay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// simModel is newModel for the shared llmsim checks.
func simModel(t *testing.T, cfg llmsim.Config) svc.Model {
	return newModel(t, start(t, cfg), "gemini-2.5-flash")
}

// A prompt over the model's context window is a context-length error
// (modeltest), read from Gemini's 400 "input token count exceeds".
func TestContextWindowErrorThroughSDK(t *testing.T) {
	modeltest.ContextWindowErrorThroughSDK(t, simModel, "gemini-2.5-flash")
}

package openai_test

import (
	"encoding/json"
	"strings"
	"testing"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/llmsim"
	"github.com/svc-dev/svc/model/modeltest"
	"github.com/svc-dev/svc/model/openai"
)

// The provider contract suite through openai-go's Azure support, against
// llmsim answering on Azure's URL shape
// (/openai/deployments/{deployment}/chat/completions?api-version=...,
// key in api-key).
func TestAzureSuite(t *testing.T) {
	modeltest.Run(t, modeltest.Provider{
		Name:  openai.AzureProvider,
		Model: azureScripted,
		Failures: []modeltest.Failure{
			modeltest.RateLimited, modeltest.Overloaded, modeltest.ServerError,
			modeltest.AuthFailed, modeltest.InvalidRequest, modeltest.Malformed,
		},
		SplitUsage:  true,
		BadSettings: []map[string]any{{"temperature": "hot"}, {"max_tokens": -1}, {"base_url": "localhost:8080"}},
	})
}

func azureScripted(t *testing.T, s modeltest.Script) modeltest.Scripted {
	t.Helper()
	sim := llmsim.New(llmsim.Config{Scenario: &llmsim.Scenario{Rules: []llmsim.Rule{modeltest.SimRule(t, s, "503")}}})
	if err := sim.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	t.Setenv("AZURE_OPENAI_ENDPOINT", sim.URL())
	t.Setenv("AZURE_OPENAI_API_KEY", "az-key")
	m, err := openai.NewAzure(modeltest.ModelName)
	if err != nil {
		t.Fatal(err)
	}
	return modeltest.Scripted{Model: m, Calls: func() int { return sim.Stats()["az-key/"+modeltest.ModelName] }}
}

// NewAzure reads the endpoint, key and API version from the environment,
// calls the deployment named in the model id (llmsim counts calls by the
// deployment in the path and refuses a request without api-version), and
// streams; without an endpoint or key a call fails before any request,
// naming the variable to set.
func TestAzureFromEnvironment(t *testing.T) {
	sim := llmsim.New(llmsim.Config{Keys: []string{"az-key"}})
	if err := sim.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	t.Setenv("AZURE_OPENAI_API_VERSION", "2025-01-01-preview")

	for _, tc := range []struct{ endpoint, key, want string }{
		{"", "az-key", "AZURE_OPENAI_ENDPOINT"},
		{sim.URL(), "", "AZURE_OPENAI_API_KEY"},
	} {
		t.Setenv("AZURE_OPENAI_ENDPOINT", tc.endpoint)
		t.Setenv("AZURE_OPENAI_API_KEY", tc.key)
		m, err := openai.NewAzure("prod-gpt4o")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Generate(t.Context(), ask("hi")); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "azure:") {
			t.Errorf("endpoint %q key %q: %v; want an azure error naming %s", tc.endpoint, tc.key, err, tc.want)
		}
	}
	if n := len(sim.Stats()); n != 0 {
		t.Fatalf("llmsim saw %v before any configured call", sim.Stats())
	}

	t.Setenv("AZURE_OPENAI_ENDPOINT", sim.URL())
	t.Setenv("AZURE_OPENAI_API_KEY", "az-key")
	m, err := openai.NewAzure("prod-gpt4o")
	if err != nil {
		t.Fatal(err)
	}
	var deltas []string
	req := ask("hello from azure")
	req.OnDelta = func(s string) { deltas = append(deltas, s) }
	resp, err := m.Generate(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	var out string
	_ = json.Unmarshal(resp.Output, &out)
	if out != "hello from azure" || strings.Join(deltas, "") != out || len(deltas) < 2 {
		t.Errorf("streamed %q in %d deltas; want the echo in pieces", out, len(deltas))
	}
	if resp.InputTokens == 0 {
		t.Error("no usage from the stream")
	}
	if n := sim.Stats()["az-key/prod-gpt4o"]; n != 1 {
		t.Errorf("llmsim saw %v; want one call to deployment prod-gpt4o with the Azure key", sim.Stats())
	}
}

// llmsim answers Azure's 404 to a request without api-version, as Azure
// does, so the test above proves the SDK sent one.
func TestLLMSimAzureNeedsAPIVersion(t *testing.T) {
	sim := llmsim.New(llmsim.Config{})
	if err := sim.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	m, err := openai.NewWithConfig("d", openai.Config{BaseURL: sim.URL() + "/openai/deployments/d", APIKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Generate(t.Context(), svc.ModelRequest{Messages: []svc.Message{{Role: svc.RoleUser, Content: json.RawMessage(`"x"`)}},
		Settings: map[string]any{"max_retries": 0}})
	if err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("no api-version: %v; want a 404", err)
	}
}

func azureSim(t *testing.T, cfg llmsim.Config) svc.Model {
	sim := llmsim.New(cfg)
	if err := sim.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	t.Setenv("AZURE_OPENAI_ENDPOINT", sim.URL())
	t.Setenv("AZURE_OPENAI_API_KEY", "az-key")
	m, err := openai.NewAzure("gpt-4o-mini")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// Azure's context-length 400 is a context-length error, and its answers'
// x-ratelimit headers are read, as OpenAI's (modeltest).
func TestAzureContextWindowAndRateLimitHeaders(t *testing.T) {
	modeltest.ContextWindowErrorThroughSDK(t, azureSim, "gpt-4o-mini")
	modeltest.RateLimitHeadersThroughSDK(t, azureSim, "gpt-4o-mini")
}

package examples_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/llmsim"
	"github.com/svc-dev/svc/model/providers"
	"github.com/svc-dev/svc/spec"
	"github.com/svc-dev/svc/supervisor"
	"github.com/svc-dev/svc/supervisor/spawn"
	"github.com/svc-dev/svc/tools"
)

// The llmsim example of docs/models.md runs as shown: the agent of
// examples/llmsim, its base_url moved from the documented port 8700 to a
// free one, answers through llmsim with the scenario's scripted reply.
func TestLLMSimExample(t *testing.T) {
	sc, err := llmsim.LoadScenario("llmsim/scenario.yaml")
	if err != nil {
		t.Fatal(err)
	}
	sim := llmsim.New(llmsim.Config{Scenario: sc})
	if err := sim.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	defer sim.Close()

	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "agents"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"runtime.yaml", "agents/assistant.yaml"} {
		b, err := os.ReadFile(filepath.Join("llmsim", f))
		if err != nil {
			t.Fatal(err)
		}
		if f == "agents/assistant.yaml" && !strings.Contains(string(b), "http://127.0.0.1:8700/v1") {
			t.Fatal("the example no longer points at llmsim's documented address")
		}
		b = []byte(strings.ReplaceAll(string(b), "http://127.0.0.1:8700", sim.URL()))
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	models := providers.Default()
	set, err := spec.Load(dir, spec.Env{
		Tools:      tools.Builtins(tools.BuiltinOptions{}),
		Builtins:   []string{spawn.AgentsTool},
		CheckModel: func(id string) error { _, err := models.Resolve(id); return err },
	})
	if err != nil {
		t.Fatal(err)
	}
	rt, err := supervisor.New(supervisor.Config{Options: set.Options, Models: models})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rt.Shutdown(t.Context()) }()
	if err := rt.Register(set.Agents...); err != nil {
		t.Fatal(err)
	}
	res, err := rt.Run(t.Context(), "assistant", svc.TaskSpec{Input: json.RawMessage(`"what time is it?"`)})
	if err != nil || !res.Success || string(res.Output) != `"It is noon."` {
		t.Fatalf("assistant: %+v, %v", res, err)
	}
	if got := sim.Stats()["sk-llmsim/gpt-4o-mini"]; got != 1 {
		t.Fatalf("llmsim stats %v, want one call with the spec's key", sim.Stats())
	}
}

package testmodel_test

import (
	"encoding/json"
	"testing"

	"github.com/svc-dev/svc/model/modeltest"
	"github.com/svc-dev/svc/model/testmodel"
)

// TestSuite runs the model provider contract suite on the test provider,
// scripted by its model_settings: output, call_tools with
// tool_arguments, tokens, latency_ms (to hang), and test:fail.
func TestSuite(t *testing.T) {
	modeltest.Run(t, modeltest.Provider{
		Name:     "test",
		Model:    scripted,
		Failures: []modeltest.Failure{modeltest.Failed},
		BadSettings: []map[string]any{
			{"latency_ms": "fast"},
			{"tokens": -3},
			{"fail_times": true},
			{"fail_on": 3},
			{"call_tools": []any{"lookup", 1}},
			{"output": json.RawMessage(`{`)},
		},
	})
}

func scripted(t *testing.T, s modeltest.Script) modeltest.Scripted {
	t.Helper()
	name, settings := "echo", map[string]any{}
	switch {
	case s.Fail == modeltest.Failed:
		name = "fail"
	case s.Fail != "":
		t.Fatalf("the test provider cannot fail with %s", s.Fail)
	case s.Hang:
		settings["latency_ms"] = 3_600_000 // an hour: until the call is given up
	default:
		a := s.Answer
		settings["tokens"] = a.InputTokens + a.OutputTokens
		if len(a.ToolCalls) == 0 {
			settings["output"] = a.Text
			break
		}
		var names []any
		args := map[string]any{}
		for _, c := range a.ToolCalls {
			names = append(names, c.Name)
			var v any
			if err := json.Unmarshal(c.Arguments, &v); err != nil {
				t.Fatalf("arguments of %s: %v", c.Name, err)
			}
			args[c.Name] = v
		}
		settings["call_tools"], settings["tool_arguments"] = names, args
	}
	m, err := testmodel.New(name)
	if err != nil {
		t.Fatal(err)
	}
	return modeltest.Scripted{Model: m, Settings: settings}
}

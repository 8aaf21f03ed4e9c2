package svc

import (
	"errors"
	"testing"
)

// A replay finds a step by the key it computes again, so the key must be a
// pure function of the path and index, and distinct across both.
func TestStepKey(t *testing.T) {
	if a, b := StepKey("agent/a", 0), StepKey("agent/a", 0); a != b {
		t.Fatalf("StepKey not deterministic: %q vs %q", a, b)
	}
	seen := map[string]bool{}
	for _, p := range []string{"agent/a", "agent/b"} {
		for i := range 3 {
			k := StepKey(p, i)
			if seen[k] {
				t.Fatalf("StepKey(%q, %d) = %q collides", p, i, k)
			}
			seen[k] = true
		}
	}
}

func TestCheckSteps(t *testing.T) {
	ok := RunStep{Kind: StepToolCall, Key: "a#0", Data: []byte(`{"x":1}`)}
	if err := CheckSteps([]RunStep{ok}); err != nil {
		t.Fatalf("CheckSteps(valid) = %v", err)
	}
	for name, steps := range map[string][]RunStep{
		"none":     nil,
		"kind":     {{Kind: "nap", Key: "a#0", Data: []byte(`1`)}},
		"key":      {ok, {Kind: StepModelCall, Data: []byte(`1`)}},
		"data":     {{Kind: StepGroupNode, Key: "n", Data: []byte(`{`)}},
		"nil data": {{Kind: StepGroupNode, Key: "n"}},
	} {
		if err := CheckSteps(steps); !errors.Is(err, ErrSpecValidation) {
			t.Errorf("%s: CheckSteps = %v, want a SpecValidationError", name, err)
		}
	}
}

func TestStepLogFullIs413Kind(t *testing.T) {
	if err := StepLogFull("r", 10, 5, 12); !errors.Is(err, ErrPayloadTooLarge) {
		t.Fatalf("StepLogFull = %v, want a PayloadTooLargeError", err)
	}
}

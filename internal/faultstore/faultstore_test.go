package faultstore_test

import (
	"errors"
	"testing"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/internal/faultstore"
	"github.com/svc-dev/svc/stores/memstore"
)

// A Resumable forwards the step log and Recover to the store it wraps,
// and fails them on demand without reaching it.
func TestResumable(t *testing.T) {
	ctx := t.Context()
	var s svc.RunStore = faultstore.NewResumable(memstore.New())
	r, ok := s.(svc.ResumableStore)
	if !ok {
		t.Fatal("a Resumable is not a svc.ResumableStore")
	}
	if _, ok := svc.RunStore(faultstore.New(memstore.New())).(svc.ResumableStore); ok {
		t.Error("a plain Store is a svc.ResumableStore: a runtime over it would resume")
	}
	if err := r.Create(ctx, svc.RunRecord{RunID: "a", Target: "echo", Kind: svc.TargetAgent, Task: []byte(`{"input":"x"}`)}); err != nil {
		t.Fatal(err)
	}
	step := svc.RunStep{Kind: svc.StepModelCall, Key: svc.StepKey("a", 0), Data: []byte(`1`)}
	if seq, err := r.AppendSteps(ctx, "a", step); err != nil || seq != 1 {
		t.Fatalf("AppendSteps = %d, %v", seq, err)
	}
	if steps, err := r.Steps(ctx, "a", 0); err != nil || len(steps) != 1 || r.MaxStepBytes() != svc.DefaultMaxStepBytes {
		t.Fatalf("Steps = %+v, %v; MaxStepBytes %d", steps, err, r.MaxStepBytes())
	}

	fs := s.(*faultstore.Resumable)
	fs.Fail(faultstore.Recover, 1, nil)
	fs.Fail(faultstore.AppendSteps, 1, nil)
	fs.Fail(faultstore.Steps, 1, nil)
	if _, _, err := r.Recover(ctx); !errors.Is(err, faultstore.ErrFault) {
		t.Errorf("Recover with a fault: %v", err)
	}
	if _, err := r.AppendSteps(ctx, "a", step); !errors.Is(err, faultstore.ErrFault) {
		t.Errorf("AppendSteps with a fault: %v", err)
	}
	if _, err := r.Steps(ctx, "a", 0); !errors.Is(err, faultstore.ErrFault) {
		t.Errorf("Steps with a fault: %v", err)
	}
	if rec, _ := r.Get(ctx, "a"); rec.Resumed != 0 || rec.Steps != 1 {
		t.Errorf("the failed calls reached the store: %+v", rec)
	}
	claimed, n, err := r.Recover(ctx)
	if err != nil || len(claimed) != 1 || claimed[0].Resumed != 1 || n != 0 {
		t.Errorf("Recover after the fault = %+v, %d, %v; want a claimed, resumed 1", claimed, n, err)
	}
	if fs.Calls(faultstore.Recover) != 2 || fs.Failed(faultstore.Recover) != 1 {
		t.Errorf("Recover calls %d, failed %d; want 2, 1", fs.Calls(faultstore.Recover), fs.Failed(faultstore.Recover))
	}
}

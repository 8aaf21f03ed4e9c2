//go:build !race

package agent_test

import (
	"context"
	"encoding/json"
	"testing"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/agent"
)

// The loop itself must stay cheap for an agent without tools or schemas:
// the conversation's one message is its only allocation, as the runtime
// runs it (RunInto, into an Outcome it owns); Run adds the Outcome it
// returns, which the loop's state points at. (Not under -race, whose
// instrumentation allocates.)
func TestRunAllocations(t *testing.T) {
	c := mustCompile(t, svc.Agent{Name: "echo", Model: "fake:m"}, map[string]svc.Model{"m": constModel{}})
	inv := &agent.Invocation{Agent: c, Input: json.RawMessage(`{"q":1}`), Emitter: svc.NopEmitter{}}
	ctx := context.Background()
	var out agent.Outcome
	for name, c := range map[string]struct {
		run  func() error
		most float64
	}{
		"RunInto": {func() error { return agent.RunInto(ctx, inv, &out) }, 1},
		"Run":     {func() error { _, err := agent.Run(ctx, inv); return err }, 2},
	} {
		allocs := testing.AllocsPerRun(1000, func() {
			if err := c.run(); err != nil {
				t.Fatal(err)
			}
		})
		if allocs > c.most {
			t.Errorf("%s allocates %v times per call, want at most %v", name, allocs, c.most)
		}
	}
}

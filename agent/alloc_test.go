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
// the conversation's one message is its only allocation. (Not under -race,
// whose instrumentation allocates.)
func TestRunAllocations(t *testing.T) {
	c := mustCompile(t, svc.Agent{Name: "echo", Model: "fake:m"}, map[string]svc.Model{"m": constModel{}})
	inv := &agent.Invocation{Agent: c, Input: json.RawMessage(`{"q":1}`), Emitter: svc.NopEmitter{}}
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := agent.Run(ctx, inv); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 1 {
		t.Errorf("Run allocates %v times per call, want at most 1", allocs)
	}
}

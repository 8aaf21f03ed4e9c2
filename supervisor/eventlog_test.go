package supervisor_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/emitters/emittertest"
	"github.com/svc-dev/svc/supervisor"
)

// The LogEventEmitter is on by default in a runtime with a Logger (the
// spec: default, always on), beside the configured Emitter; NoEventLog
// turns it off and leaves the Emitter its events.
func TestEventLogDefaultOn(t *testing.T) {
	for _, off := range []bool{false, true} {
		core, logs := observer.New(zap.InfoLevel)
		rec := &emittertest.Recorder{}
		rt, err := supervisor.New(supervisor.Config{Logger: zap.New(core), Emitter: rec, NoEventLog: off})
		if err != nil {
			t.Fatal(err)
		}
		if err := rt.Register(svc.Agent{Name: "echo", Model: "test:echo"}); err != nil {
			t.Fatal(err)
		}
		res, err := rt.Run(context.Background(), "echo", svc.TaskSpec{Input: json.RawMessage(`"hi"`)})
		if err != nil || !res.Success {
			t.Fatalf("Run = %+v, %v", res, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		if err := rt.Shutdown(ctx); err != nil { // writes out the log's queue
			t.Fatal(err)
		}
		cancel()
		logged := logs.FilterMessage(string(svc.EventAgentCompleted)).FilterField(zap.String("agent", "echo")).Len()
		recorded := 0
		for _, ev := range rec.Events() {
			if ev.EventType == svc.EventAgentCompleted {
				recorded++
			}
		}
		want := 1
		if off {
			want = 0
		}
		if logged != want || recorded != 1 {
			t.Errorf("NoEventLog=%v: %d agent_completed log lines (want %d), %d recorded (want 1)", off, logged, want, recorded)
		}
	}
}

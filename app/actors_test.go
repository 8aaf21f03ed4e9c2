package app

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/goleak"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/actors/msg"
	"github.com/svc-dev/svc/supervisor"
)

// TestActorSystem: a process given the host's actor system runs its
// actors there, under the prefix; the host's actors run agents by
// message; Shutdown leaves the system and the host's actors running, and
// once the host stops its system nothing is left.
func TestActorSystem(t *testing.T) {
	before := goleak.IgnoreCurrent()
	host := supervisor.NewActorSystem(nil)
	hostActor := host.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		if s, ok := c.Message().(string); ok {
			c.Respond("host: " + s)
		}
	}))
	a, err := New(Options{NoListen: true, Store: "memory", Events: "none", ActorSystem: host, ActorPrefix: "embedded",
		Agents: []svc.Agent{{Name: "go_echo", Model: "test:echo"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	pid := a.Runtime().PID()
	if pid.Id != "embedded/api" {
		t.Errorf("runtime PID %s, want embedded/api", pid.Id)
	}
	reply, err := host.Root.RequestFuture(pid, &msg.RunAgent{Ref: "1", Agent: "go_echo", Task: svc.TaskSpec{Input: json.RawMessage(`"x"`)}}, 20*time.Second).Result()
	if res, ok := reply.(*msg.AgentResult); err != nil || !ok || string(res.Result.Output) != `"x"` {
		t.Fatalf("run by message: %#v %v", reply, err)
	}
	shutdown(t, a)
	for _, m := range host.ProcessRegistry.LocalPIDs.LocalPIDs {
		for _, id := range m.Keys() {
			if strings.HasPrefix(id, "embedded/") {
				t.Errorf("actor %s left after Shutdown", id)
			}
		}
	}
	if got, err := host.Root.RequestFuture(hostActor, "ping", 5*time.Second).Result(); err != nil || got != "host: ping" {
		t.Fatalf("host actor after the process stopped: %v %v", got, err)
	}
	host.Shutdown()
	goleak.VerifyNone(t, before)
}

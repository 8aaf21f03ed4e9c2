package supervisor_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/agent"
	"github.com/svc-dev/svc/emitters/emittertest"
	"github.com/svc-dev/svc/group"
	"github.com/svc-dev/svc/supervisor"
)

// spanOf returns the one span id of agent's events, checking they share it.
func spanOf(t *testing.T, rec *emittertest.Recorder, agent string) (span, parent string) {
	t.Helper()
	for _, ev := range rec.Events() {
		if ev.AgentName != agent || ev.EventType == svc.EventGroupStarted || ev.EventType == svc.EventGroupCompleted {
			continue
		}
		if ev.SpanID == "" {
			t.Fatalf("%s %s has no span id", agent, ev.EventType)
		}
		if span == "" {
			span, parent = ev.SpanID, ev.ParentSpanID
		} else if ev.SpanID != span || ev.ParentSpanID != parent {
			t.Fatalf("%s: %s has span %s/%s, its invocation %s/%s", agent, ev.EventType, ev.SpanID, ev.ParentSpanID, span, parent)
		}
	}
	if span == "" {
		t.Fatalf("no events of %s", agent)
	}
	return span, parent
}

// Every event of an invocation (spawned, tool calls, completed) carries
// its span id; a spawned child, a group node and a team's delegate name
// the invocation or group run that started them as their parent span.
func TestSpanIDs(t *testing.T) {
	t.Run("spawn", func(t *testing.T) {
		s := &script{fn: spawner(map[string]string{"boss": `{"agents":[{"name":"kid","instructions":"kid"}]}`})}
		rec := &emittertest.Recorder{}
		rt := newRuntime(t, svc.Options{}, rec, s.registry(), boss(nil))
		if _, err := rt.Run(context.Background(), "boss", svc.TaskSpec{Input: json.RawMessage(`1`)}); err != nil {
			t.Fatal(err)
		}
		bossSpan, bossParent := spanOf(t, rec, "boss")
		kidSpan, kidParent := spanOf(t, rec, "kid")
		if bossParent != "" || kidParent != bossSpan || kidSpan == bossSpan {
			t.Errorf("boss %s (parent %q), kid %s (parent %q)", bossSpan, bossParent, kidSpan, kidParent)
		}
	})
	t.Run("group", func(t *testing.T) {
		rec := &emittertest.Recorder{}
		g := mustGroup(t, group.New("pipe").Node("a", "one").Node("b", "two").Edge("a", "b"))
		rt := groupRuntime(t, rec, []svc.Agent{echo("one", nil), echo("two", nil)}, g)
		if _, err := rt.RunGroup(context.Background(), "pipe", svc.TaskSpec{Input: json.RawMessage(`1`)}); err != nil {
			t.Fatal(err)
		}
		gs := rec.OfType(svc.EventGroupStarted)
		if len(gs) != 1 || gs[0].SpanID == "" || rec.OfType(svc.EventGroupCompleted)[0].SpanID != gs[0].SpanID {
			t.Fatalf("group events %+v", rec.Events())
		}
		for _, a := range []string{"one", "two"} {
			if _, parent := spanOf(t, rec, a); parent != gs[0].SpanID {
				t.Errorf("%s's parent span %q, want the group's %q", a, parent, gs[0].SpanID)
			}
		}
	})
	t.Run("team", func(t *testing.T) {
		rec := &emittertest.Recorder{}
		lead := svc.Agent{Name: "lead", Model: "test:echo", TrustLevel: svc.TrustLow, ModelSettings: map[string]any{"call_tools": "all"}}
		team := group.Team("crew", "lead", []string{"researcher"}, 3)
		rt := groupRuntime(t, rec, []svc.Agent{lead, fixed("researcher", `"facts"`, nil)}, team)
		if _, err := rt.RunGroup(context.Background(), "crew", svc.TaskSpec{Input: json.RawMessage(`"topic"`)}); err != nil {
			t.Fatal(err)
		}
		gs := rec.OfType(svc.EventGroupStarted)
		leadSpan, leadParent := spanOf(t, rec, "lead")
		_, resParent := spanOf(t, rec, "researcher")
		if len(gs) != 1 || leadParent != gs[0].SpanID || resParent != leadSpan {
			t.Errorf("team %+v, lead %s (parent %s), researcher's parent %s", gs, leadSpan, leadParent, resParent)
		}
	})
	t.Run("gather", func(t *testing.T) {
		rec := &emittertest.Recorder{}
		rt := newRuntime(t, svc.Options{}, rec, nil, echo("echo", nil))
		if _, err := rt.Gather(context.Background(), "echo", []svc.TaskSpec{{Input: json.RawMessage(`1`)}, {Input: json.RawMessage(`2`)}}, 2); err != nil {
			t.Fatal(err)
		}
		bs := rec.OfType(svc.EventBatchStarted)
		spans := map[string]bool{}
		for _, ev := range rec.OfType(svc.EventAgentSpawned) {
			spans[ev.SpanID] = true
			if ev.ParentSpanID != bs[0].SpanID {
				t.Errorf("invocation's parent span %q, want the batch's %q", ev.ParentSpanID, bs[0].SpanID)
			}
		}
		if len(spans) != 2 || bs[0].SpanID == "" {
			t.Errorf("spans %v, batch %+v", spans, bs)
		}
	})
}

// Config.Execute replaces the local agent loop for every attempt, and
// Config.Backend is what events and results report: the seam a publisher
// uses to send invocations through a broker.
func TestExecuteSeam(t *testing.T) {
	rec := &emittertest.Recorder{}
	var seen []string
	rt, err := supervisor.New(supervisor.Config{Emitter: rec, Backend: "broker:test",
		Execute: func(ctx context.Context, inv *agent.Invocation) (agent.Outcome, error) {
			seen = append(seen, inv.Agent.Def.Name+"/"+inv.TaskID)
			if inv.SpanID == "" || inv.TraceID == "" {
				return agent.Outcome{}, errors.New("no span or trace")
			}
			return agent.Outcome{Output: json.RawMessage(`"remote"`), Model: "test:echo", TokensUsed: 3}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close() })
	if err := rt.Register(echo("echo", nil)); err != nil {
		t.Fatal(err)
	}
	res, err := rt.Run(context.Background(), "echo", svc.TaskSpec{ID: "t1", Input: json.RawMessage(`1`)})
	if err != nil || !res.Success || string(res.Output) != `"remote"` || res.Metadata.Backend != "broker:test" || res.Metadata.TokensUsed != 3 {
		t.Fatalf("result %+v, %v", res, err)
	}
	if len(seen) != 1 || seen[0] != "echo/t1" {
		t.Errorf("Execute saw %v", seen)
	}
	for _, ev := range rec.Events() {
		if b, ok := ev.Payload["backend"]; ok && b != "broker:test" {
			t.Errorf("%s backend %v", ev.EventType, b)
		}
	}
}

package supervisor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/emitters/emittertest"
	"github.com/svc-dev/svc/model"
	"github.com/svc-dev/svc/supervisor"
)

// A runtime's rate_limits apply to its agents' model calls: with one call
// at a time allowed, a run at priority high submitted after a gather has
// queued its calls goes next, ahead of the gather's waiting tasks; a bad
// priority is refused before anything runs; the limit's figures count the
// calls (Runtime.RateLimits).
func TestRateLimitPriority(t *testing.T) {
	var mu sync.Mutex
	var order []string
	reg := model.NewRegistry()
	reg.Register("slow", func(string) (svc.Model, error) {
		return svc.ModelFunc(func(ctx context.Context, req svc.ModelRequest) (svc.ModelResponse, error) {
			select {
			case <-time.After(50 * time.Millisecond):
			case <-ctx.Done():
				return svc.ModelResponse{}, ctx.Err()
			}
			in := req.Messages[len(req.Messages)-1].Content
			mu.Lock()
			order = append(order, string(in))
			mu.Unlock()
			return svc.ModelResponse{Output: json.RawMessage(in), InputTokens: 1, OutputTokens: 1}, nil
		}), nil
	})
	o := opts(func(o *svc.Options) { o.RateLimits = map[string]svc.RateLimit{"one": {MaxConcurrent: 1}} })
	rt := newRuntime(t, o, nil, reg, svc.Agent{Name: "w", Model: "slow:m", ModelSettings: map[string]any{"rate_limit": "one"}})

	if _, err := rt.Run(t.Context(), "w", svc.TaskSpec{Input: json.RawMessage(`"x"`), Priority: "urgent"}); svc.KindOf(err) != svc.KindSpecValidation {
		t.Fatalf("priority urgent: %v, want a SpecValidationError", err)
	}
	// position runs first, waits until queue calls wait, then runs a
	// last run of priority prio, and returns where that run's call came
	// in the order the model saw the calls.
	position := func(first func(), queue int, prio string) int {
		mu.Lock()
		order = nil
		mu.Unlock()
		var wg sync.WaitGroup
		wg.Go(first)
		deadline := time.Now().Add(10 * time.Second)
		for queued(rt) < queue {
			if time.Now().After(deadline) {
				t.Fatalf("the calls did not queue: %+v", rt.RateLimits())
			}
			time.Sleep(time.Millisecond)
		}
		if _, err := rt.Run(t.Context(), "w", svc.TaskSpec{Input: json.RawMessage(`"last"`), Priority: prio}); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		for i, in := range order {
			if in == `"last"` {
				return i
			}
		}
		t.Fatalf("the last run's call never came: %v", order)
		return -1
	}
	// Five runs of their own, queued: a high-priority run goes ahead of
	// them (next, or second if one was admitted as it came).
	runs := func() {
		var wg sync.WaitGroup
		for i := range 5 {
			wg.Go(func() {
				if _, err := rt.Run(t.Context(), "w", svc.TaskSpec{Input: json.RawMessage(fmt.Sprintf(`"r%d"`, i))}); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
	}
	if pos := position(runs, 4, "high"); pos > 2 {
		t.Errorf("a high-priority run's call came %d of 6 after five queued runs; want it among the first three", pos+1)
	}
	// A gather is one request: a run that comes after it takes turns with
	// it instead of waiting for the whole batch.
	gather := func() {
		tasks := make([]svc.TaskSpec, 6)
		for i := range tasks {
			tasks[i] = svc.TaskSpec{Input: json.RawMessage(fmt.Sprintf(`"g%d"`, i))}
		}
		if _, err := rt.Gather(svc.WithRequestID(t.Context(), "batch"), "w", tasks, 6); err != nil {
			t.Error(err)
		}
	}
	if pos := position(gather, 4, ""); pos > 2 {
		t.Errorf("a run's call came %d of 7 after a gather's six queued; want it among the first three (turns across requests)", pos+1)
	}
	st := rt.RateLimits()
	if len(st) != 1 || st[0].Name != "one" || st[0].Calls != 13 || st[0].Queued != 0 {
		t.Errorf("rate limits %+v; want the one limit, with the 13 calls", st)
	}
}

// queued is the calls waiting under rt's limits.
func queued(rt *supervisor.Runtime) int {
	n := 0
	for _, s := range rt.RateLimits() {
		n += s.Queued
	}
	return n
}

// A call that waits over a second for its turn is told: a rate_limited
// event naming the limit, the wait and why.
func TestRateLimitedEvent(t *testing.T) {
	rec := &emittertest.Recorder{}
	o := opts(func(o *svc.Options) { o.RateLimits = map[string]svc.RateLimit{"pace": {RequestsPerMinute: 40}} })
	rt := newRuntime(t, o, rec, nil, svc.Agent{Name: "w", Model: "test:echo", ModelSettings: map[string]any{"rate_limit": "pace"}})
	var wg sync.WaitGroup
	for range 2 { // one a 1.5 s at 40 a minute: the second waits
		wg.Go(func() {
			if _, err := rt.Run(t.Context(), "w", svc.TaskSpec{Input: json.RawMessage(`"x"`)}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	var got []svc.RuntimeEvent
	for _, ev := range rec.Events() {
		if ev.EventType == svc.EventRateLimited {
			got = append(got, ev)
		}
	}
	if len(got) != 1 {
		t.Fatalf("%d rate_limited events, want 1: %+v", len(got), got)
	}
	p := got[0].Payload
	if p["rate_limit"] != "pace" || p["reason"] != "paced" || got[0].AgentName != "w" {
		t.Errorf("rate_limited %+v", got[0])
	}
	if ms, _ := p["wait_ms"].(int64); ms < 1000 {
		t.Errorf("wait_ms %v, want over a second", p["wait_ms"])
	}
	emittertest.CheckPayload(t, got[0])
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/http/client"
)

// The Go client's RunStream against the real server: the deltas in order,
// whose text is the answer, then the same result Run returns; a failed run
// is the same *svc.Error the plain Run returns.
func TestClientRunStream(t *testing.T) {
	t.Parallel()
	s := startServe(t, nil, "--specs", streamingSpecs(t), "--delta-interval-ms", "0")
	c, err := client.New(s.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	var text strings.Builder
	var deltas int
	var result *svc.AgentResult
	task := svc.TaskSpec{ID: "t1", Input: json.RawMessage(`"x"`), RequestID: "req-stream"}
	for ev, err := range c.RunStream(ctx, "writer", task) {
		if err != nil {
			t.Fatalf("RunStream: %v", err)
		}
		if result != nil {
			t.Fatalf("an event after the result: %+v", ev)
		}
		if ev.Result != nil {
			result = ev.Result
			continue
		}
		d := ev.Delta
		if d.Agent != "writer" || d.TaskID != "t1" || d.Index != deltas || d.SpanID == "" || d.TraceID != "req-stream" {
			t.Fatalf("delta %d: %+v", deltas, d)
		}
		deltas++
		text.WriteString(d.Text)
	}
	if result == nil || !result.Success || string(result.Output) != `"`+writerAnswer+`"` || result.Metadata.TraceID != "req-stream" {
		t.Fatalf("result %+v", result)
	}
	if text.String() != writerAnswer || deltas != 6 {
		t.Errorf("%d deltas make %q, want the 6 words of %q", deltas, text.String(), writerAnswer)
	}

	// Stopping early ends the iteration without a further call of the loop.
	var n int
	for range c.RunStream(ctx, "writer", task) {
		n++
		break
	}
	if n != 1 {
		t.Errorf("a loop that stops at once ran %d times", n)
	}

	// Errors: the typed error of the plain run, from the error frame.
	for _, tc := range []struct {
		agent string
		task  svc.TaskSpec
		kind  svc.Kind
	}{
		{"writer", svc.TaskSpec{Input: json.RawMessage(`"x"`), TokenBudget: 1}, svc.KindBudgetExceeded},
		{"nope", svc.TaskSpec{Input: json.RawMessage(`"x"`)}, ""},
	} {
		_, plainErr := c.Run(ctx, tc.agent, tc.task)
		var want *svc.Error
		if !errors.As(plainErr, &want) || (tc.kind != "" && want.Kind != tc.kind) {
			t.Fatalf("Run(%s): %v, want a *svc.Error of kind %q", tc.agent, plainErr, tc.kind)
		}
		var got error
		var events int
		for ev, err := range c.RunStream(ctx, tc.agent, tc.task) {
			events++
			if got != nil {
				t.Errorf("RunStream(%s): %+v, %v after the error", tc.agent, ev, err)
			}
			if err != nil {
				got = err
			} else if ev.Result != nil {
				t.Errorf("RunStream(%s): a result %+v, want an error", tc.agent, ev.Result)
			}
		}
		var se *svc.Error
		if !errors.As(got, &se) || se.Kind != want.Kind || se.Message != want.Message || se.Agent != want.Agent {
			t.Errorf("RunStream(%s) error %#v, want Run's %#v", tc.agent, got, want)
		}
		if tc.kind == svc.KindBudgetExceeded && !errors.Is(got, svc.ErrBudgetExceeded) {
			t.Errorf("RunStream(%s) error %v does not match ErrBudgetExceeded", tc.agent, got)
		}
		// An unknown agent has no deltas; the budgeted run streamed its
		// answer before the budget was checked, so it may have some.
		if tc.agent == "nope" && events != 1 {
			t.Errorf("RunStream(nope) yielded %d events before and with its error, want the error alone", events)
		}
	}
}

// RunEventsWithDeltas on the Go client: a followed submitted run's stored
// events, the same as RunEvents gives, with its deltas (Seq 0) merged in
// before agent_completed.
func TestClientRunEventsWithDeltas(t *testing.T) {
	s := startServe(t, nil, "--specs", streamingSpecs(t))
	c, err := client.New(s.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	run, err := c.SubmitRun(ctx, "writer", svc.TaskSpec{Input: json.RawMessage(`"x"`)}, "")
	if err != nil {
		t.Fatal(err)
	}
	ch, err := c.RunEventsWithDeltas(ctx, run.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	var stored []svc.RunEvent
	var completed bool
	for ev := range ch {
		if ev.Type == svc.RunDelta {
			if ev.Seq != 0 || ev.RunID != run.ID || ev.Agent != "writer" || completed {
				t.Errorf("delta %+v (after agent_completed: %v)", ev, completed)
			}
			text.WriteString(ev.Text)
			continue
		}
		if ev.Type == svc.RunAgentCompleted {
			completed = true
		}
		stored = append(stored, ev)
	}
	if text.String() != writerAnswer {
		t.Errorf("deltas make %q, want %q", text.String(), writerAnswer)
	}
	plain, err := c.RunEvents(ctx, run.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	var again []svc.RunEvent
	for ev := range plain {
		if ev.Type == svc.RunDelta {
			t.Errorf("RunEvents gave a delta: %+v", ev)
		}
		again = append(again, ev)
	}
	if len(again) != len(stored) || len(stored) == 0 {
		t.Fatalf("with deltas %d stored events, without %d", len(stored), len(again))
	}
	for i := range stored {
		if stored[i].Seq != again[i].Seq || stored[i].Type != again[i].Type {
			t.Errorf("event %d: %+v with deltas, %+v without", i, stored[i], again[i])
		}
	}
}

package supervisor_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/emitters/emittertest"
	"github.com/svc-dev/svc/group"
	"github.com/svc-dev/svc/model"
	"github.com/svc-dev/svc/stores/sqlitestore"
	"github.com/svc-dev/svc/supervisor"
	"github.com/svc-dev/svc/tools"
)

// calls counts the calls of the "count" provider's models and of the
// tools of the resume tests, and makes the calls named in hang wait for
// their context: the process "dies" during them.
type calls struct {
	mu   sync.Mutex
	n    map[string]int
	hang map[string]bool
	hit  chan string // each call's name, as it starts
}

func newCalls(hang ...string) *calls {
	c := &calls{n: map[string]int{}, hang: map[string]bool{}, hit: make(chan string, 100)}
	for _, h := range hang {
		c.hang[h] = true
	}
	return c
}

func (c *calls) call(ctx context.Context, name string) error {
	c.mu.Lock()
	c.n[name]++
	hang := c.hang[name]
	c.mu.Unlock()
	c.hit <- name
	if hang {
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

func (c *calls) count(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[name]
}

func (c *calls) waitFor(t *testing.T, name string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case got := <-c.hit:
			if got == name {
				return
			}
		case <-deadline:
			t.Fatalf("no call of %s", name)
		}
	}
}

// countModels is a registry whose "count:NAME" models append NAME to the
// last message's JSON string (a pipeline's output names its nodes in
// order) or, for NAME "tooly", call the tool "act" once and then answer
// with what it returned.
func countModels(c *calls) *model.Registry {
	reg := model.Default()
	reg.Register("count", func(name string) (svc.Model, error) {
		return svc.ModelFunc(func(ctx context.Context, req svc.ModelRequest) (svc.ModelResponse, error) {
			key := name
			if name == "tooly" {
				key = "tooly#" + string(rune('0'+len(req.Messages)))
			}
			if err := c.call(ctx, key); err != nil {
				return svc.ModelResponse{}, err
			}
			last := req.Messages[len(req.Messages)-1]
			if name == "tooly" {
				if len(req.Messages) == 1 {
					return svc.ModelResponse{ToolCalls: []svc.ToolCall{{ID: "1", Name: "act", Arguments: json.RawMessage(`{}`)}},
						InputTokens: 3, OutputTokens: 2}, nil
				}
				return svc.ModelResponse{Output: last.Content, InputTokens: 5, OutputTokens: 1}, nil
			}
			var s string
			_ = json.Unmarshal(last.Content, &s)
			out, _ := json.Marshal(s + "+" + name)
			return svc.ModelResponse{Output: out, InputTokens: 4, OutputTokens: 2}, nil
		}), nil
	})
	return reg
}

// life is one process's runtime on the store file at path.
type life struct {
	rt    *supervisor.Runtime
	store *sqlitestore.Store
	rec   *emittertest.Recorder
}

func startLife(t *testing.T, path string, c *calls, groups []svc.Group, agents ...svc.Agent) *life {
	t.Helper()
	st, err := sqlitestore.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	rec := &emittertest.Recorder{}
	rt, err := supervisor.New(supervisor.Config{Store: st, Emitter: rec, Models: countModels(c),
		Options: opts(func(o *svc.Options) { o.TimeoutSeconds = 60 })})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Register(agents...); err != nil {
		t.Fatal(err)
	}
	if err := rt.RegisterGroups(groups...); err != nil {
		t.Fatal(err)
	}
	rt.ResumeRuns(context.Background())
	return &life{rt: rt, store: st, rec: rec}
}

// die ends the life as a deploy does when its runs outlast the grace
// period: the runs are cut where they are, and the store is closed.
func (l *life) die(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = l.rt.Shutdown(ctx)
	if err := l.store.Close(); err != nil {
		t.Fatal(err)
	}
}

func (l *life) end(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.rt.Shutdown(ctx); err != nil {
		t.Errorf("shutdown: %v", err)
	}
	_ = l.store.Close()
}

func countAgent(name string) svc.Agent { return svc.Agent{Name: name, Model: "count:" + name} }

// A pipeline cut during its second node resumes in the next process: the
// first node is not run again, the second is (it was in flight), and the
// result is the one an uncut run gives.
func TestResumePipeline(t *testing.T) {
	path := filepath.Join(t.TempDir(), "runs.db")
	g := mustGroup(t, group.New("pipe").Node("a", "a").Node("b", "b").Node("c", "c").Edge("a", "b").Edge("b", "c"))
	agents := []svc.Agent{countAgent("a"), countAgent("b"), countAgent("c")}

	c := newCalls("b")
	l1 := startLife(t, path, c, []svc.Group{g}, agents...)
	id, err := l1.rt.Submit(context.Background(), svc.SubmitRequest{Target: "pipe", Task: svc.TaskSpec{Input: json.RawMessage(`"in"`)}})
	if err != nil {
		t.Fatal(err)
	}
	c.waitFor(t, "b")
	l1.die(t)
	if got, err := readState(path, id); err != nil || got != svc.RunRunning {
		t.Fatalf("after the cut the run is %s (%v), want running: it must stay resumable", got, err)
	}

	c.mu.Lock()
	c.hang = map[string]bool{}
	c.mu.Unlock()
	l2 := startLife(t, path, c, []svc.Group{g}, agents...)
	defer l2.end(t)
	rec, evs := waitEnd(t, l2.rt, l2.store, id)
	if rec.State != svc.RunCompleted {
		t.Fatalf("resumed run ended %s: %s", rec.State, rec.Result)
	}
	var res svc.AgentResult
	if err := json.Unmarshal(rec.Result, &res); err != nil {
		t.Fatal(err)
	}
	if string(res.Output) != `"in+a+b+c"` {
		t.Fatalf("output %s, want the uncut run's \"in+a+b+c\"", res.Output)
	}
	if a, b, cc := c.count("a"), c.count("b"), c.count("c"); a != 1 || b != 2 || cc != 1 {
		t.Fatalf("model calls a=%d b=%d c=%d, want 1, 2 (in flight at the cut), 1", a, b, cc)
	}
	if rec.Resumed != 1 {
		t.Errorf("resumed = %d, want 1", rec.Resumed)
	}
	st, _ := l2.rt.RunStatus(context.Background(), id)
	if st.Resumed != 1 || st.Steps < 2 {
		t.Errorf("status %+v: want resumed 1 and the steps recorded", st)
	}
	// The history goes on: one run_resumed, and node a's events once.
	var resumed, aDone, aStarted, bStarted int
	for _, ev := range evs {
		switch {
		case ev.Type == svc.RunRunResumed:
			resumed++
		case ev.Type == svc.RunAgentCompleted && ev.Agent == "a":
			aDone++
		case ev.Type == svc.RunAgentStarted && ev.Agent == "a":
			aStarted++
		case ev.Type == svc.RunAgentStarted && ev.Agent == "b":
			bStarted++
		}
	}
	// b was in flight: started once, though it ran twice.
	if resumed != 1 || aDone != 1 || aStarted != 1 || bStarted != 1 {
		t.Fatalf("history has run_resumed %d, a started %d, a completed %d, b started %d; want 1 each: %+v", resumed, aStarted, aDone, bStarted, evs)
	}
	if got := l2.rec.OfType(svc.EventRunResumed); len(got) != 1 || got[0].Payload["run_id"] != id {
		t.Fatalf("run_resumed events %+v", got)
	} else {
		emittertest.CheckPayload(t, got[0])
	}
	if n := len(l2.rec.OfType(svc.EventAgentSpawned)); n != 1 {
		t.Errorf("second life spawned %d agents, want 1 (c): a is replayed, b's spawn was emitted before", n)
	}
}

// An agent loop cut during its second model call replays its first call
// and its tool call; a tool declared not idempotent that was in flight is
// not called again, and the model is told its outcome is unknown.
func TestResumeAgentLoop(t *testing.T) {
	for _, tc := range []struct {
		name       string
		idempotent bool
		hang       string // the call in flight at the cut
	}{
		{"second model call", true, "tooly#3"},
		{"tool in flight, idempotent", true, "act"},
		{"tool in flight, not idempotent", false, "act"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "runs.db")
			c := newCalls(tc.hang)
			act := tools.MustFunc("act", "acts", svc.AccessRead, func(ctx context.Context, _ struct{}) (string, error) {
				if err := c.call(ctx, "act"); err != nil {
					return "", err
				}
				return "done", nil
			})
			if !tc.idempotent {
				act = tools.NotIdempotent(act)
			}
			agent := svc.Agent{Name: "tooly", Model: "count:tooly", Tools: []svc.Tool{act}}
			l1 := startLife(t, path, c, nil, agent)
			id, err := l1.rt.Submit(context.Background(), svc.SubmitRequest{Target: "tooly", Task: svc.TaskSpec{Input: json.RawMessage(`"go"`)}})
			if err != nil {
				t.Fatal(err)
			}
			c.waitFor(t, tc.hang)
			l1.die(t)

			c.mu.Lock()
			c.hang = map[string]bool{}
			c.mu.Unlock()
			l2 := startLife(t, path, c, nil, agent)
			defer l2.end(t)
			rec, _ := waitEnd(t, l2.rt, l2.store, id)
			if rec.State != svc.RunCompleted {
				t.Fatalf("resumed run ended %s: %s", rec.State, rec.Result)
			}
			var res svc.AgentResult
			_ = json.Unmarshal(rec.Result, &res)
			if c.count("tooly#1") != 1 {
				t.Errorf("first model call made %d times, want 1", c.count("tooly#1"))
			}
			switch {
			case tc.hang == "tooly#3":
				if c.count("act") != 1 || c.count("tooly#3") != 2 || string(res.Output) != `"done"` {
					t.Errorf("act %d, second call %d, output %s; want 1, 2, \"done\"", c.count("act"), c.count("tooly#3"), res.Output)
				}
			case tc.idempotent:
				if c.count("act") != 2 || string(res.Output) != `"done"` {
					t.Errorf("act %d, output %s; want 2 (made again), \"done\"", c.count("act"), res.Output)
				}
			default:
				if c.count("act") != 1 || !strings.Contains(string(res.Output), "outcome of this call is unknown") {
					t.Errorf("act %d, output %s; want 1 and the model told the outcome is unknown", c.count("act"), res.Output)
				}
			}
		})
	}
}

// A claimed run whose agent is gone from the specs fails (interrupted),
// naming it, rather than hanging or running something else.
func TestResumeTargetGone(t *testing.T) {
	path := filepath.Join(t.TempDir(), "runs.db")
	c := newCalls("a")
	l1 := startLife(t, path, c, nil, countAgent("a"))
	id, err := l1.rt.Submit(context.Background(), svc.SubmitRequest{Target: "a", Task: svc.TaskSpec{Input: json.RawMessage(`"x"`)}})
	if err != nil {
		t.Fatal(err)
	}
	c.waitFor(t, "a")
	l1.die(t)
	l2 := startLife(t, path, c, nil, countAgent("other"))
	defer l2.end(t)
	rec, err := l2.store.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != svc.RunFailed || rec.Reason != svc.ReasonInterrupted || !strings.Contains(string(rec.Result), `\"a\"`) {
		t.Fatalf("run %s %s %s: want failed, interrupted, naming agent a", rec.State, rec.Reason, rec.Result)
	}
}

func readState(path, id string) (svc.RunState, error) {
	st, err := sqlitestore.Open(path)
	if err != nil {
		return "", err
	}
	defer st.Close()
	rec, err := st.Get(context.Background(), id)
	return rec.State, err
}

// A run whose previous lives died at the worst moments: one after its
// agent's completion was stored but before its result (the agent's
// completion must not be reported twice), and one right after claiming
// the run, before writing its run_resumed (the history still gets one
// run_resumed per resume).
func TestResumeAfterCompletionStored(t *testing.T) {
	path := filepath.Join(t.TempDir(), "runs.db")
	st, err := sqlitestore.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	task, _ := json.Marshal(svc.TaskSpec{ID: "t1", Input: json.RawMessage(`"x"`), RequestID: "r1"})
	now := time.Now().UTC()
	if err := st.Create(ctx, svc.RunRecord{RunID: "run1", Target: "a", Kind: svc.TargetAgent, TraceID: "r1", CreatedAt: now, Task: task}); err != nil {
		t.Fatal(err)
	}
	if err := st.SetState(ctx, "run1", svc.RunRunning, "", nil); err != nil {
		t.Fatal(err)
	}
	for _, typ := range []svc.RunEventType{svc.RunAgentStarted, svc.RunAgentCompleted} {
		if _, err := st.Append(ctx, "run1", svc.RunEvent{Type: typ, Agent: "a", TaskID: "t1", Timestamp: now}); err != nil {
			t.Fatal(err)
		}
	}
	// A life that claimed the run and died before writing anything.
	if claimed, _, err := st.Recover(ctx); err != nil || len(claimed) != 1 {
		t.Fatalf("recover: %v %v", claimed, err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	c := newCalls()
	l := startLife(t, path, c, nil, countAgent("a"))
	defer l.end(t)
	rec, evs := waitEnd(t, l.rt, l.store, "run1")
	if rec.State != svc.RunCompleted || rec.Resumed != 2 {
		t.Fatalf("run %s, resumed %d: want completed, 2", rec.State, rec.Resumed)
	}
	var completed, resumed int
	for _, ev := range evs {
		switch ev.Type {
		case svc.RunAgentCompleted:
			completed++
		case svc.RunRunResumed:
			resumed++
		}
	}
	if completed != 1 || resumed != 2 {
		t.Fatalf("history has agent_completed %d, run_resumed %d; want 1 and 2: %+v", completed, resumed, evs)
	}
	if n := len(l.rec.OfType(svc.EventAgentCompleted)); n != 0 {
		t.Errorf("agent_completed emitted %d times; the history had it", n)
	}
}

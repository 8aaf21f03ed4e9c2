package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/http/client"
	"github.com/svc-dev/svc/internal/testutil"
)

// fanout is an agent that calls spawn_agents once, asking for n runs of
// the registered agent leaf, then answers. (Not new agents: those would
// inherit its model_settings, and spawn in turn.)
func fanout(name string, n int) string {
	kids := make([]string, n)
	for i := range kids {
		kids[i] = fmt.Sprintf("{name: leaf, input: %d}", i)
	}
	return fmt.Sprintf("version: 1\nname: %s\nmodel: test:echo\nbuiltin_tools: [spawn_agents]\nmodel_settings:\n"+
		"  call_tools: [spawn_agents]\n  tool_arguments:\n    spawn_agents: {agents: [%s]}\n", name, strings.Join(kids, ", "))
}

// Issue 33 part 7 with the real binary: a spawn_agents call asking for more
// children than max_spawn_children (runtime.yaml here, 2) ends its run
// with a SpawnCapError: 422 problem+json for a run, the failed result of
// a submitted run, the typed error in the Go client; a call within the
// limit runs; --max-spawn-children raises the limit.
func TestServeSpawnCap(t *testing.T) {
	t.Parallel()
	dir := writeSpecs(t, map[string]string{
		"runtime.yaml":       "version: 1\nmax_spawn_children: 2\n",
		"agents/three.yaml":  fanout("three", 3),
		"agents/two.yaml":    fanout("two", 2),
		"agents/plenty.yaml": fanout("plenty", 33),
		"agents/leaf.yaml":   "version: 1\nname: leaf\nmodel: test:echo\n",
	})
	s := startServe(t, nil, "--specs", dir)
	ctx := context.Background()

	resp, body := do(t, ctx, http.MethodPost, s.url+"/agents/three/run", `{"input":"go"}`, nil)
	p := decodeProblem(t, resp, body, http.StatusUnprocessableEntity)
	if p.Error != string(svc.KindSpawnCap) || p.Agent != "three" ||
		!strings.Contains(p.Message, "asked for 3 agents") || !strings.Contains(p.Message, "max_spawn_children is 2") {
		t.Errorf("problem %+v, want a SpawnCapError of agent three naming 3 and the limit 2", p)
	}

	resp, body = do(t, ctx, http.MethodPost, s.url+"/agents/two/run", `{"input":"go"}`, nil)
	var res svc.AgentResult
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &res) != nil || !res.Success {
		t.Fatalf("two children, at the limit: %d %s", resp.StatusCode, body)
	}
	if kids := spawnedAll(t, res.Output); len(kids) != 2 || !kids[0].Success || !kids[1].Success {
		t.Errorf("two children's results: %+v", kids)
	}
	// Only those two children ever started: three's refusal came before
	// any of its own (its events were stored before two's).
	leaves := func() int {
		code, b := getEvents(t, s.url, svc.EventAgentSpawned)
		var evs []svc.RuntimeEvent
		if code != http.StatusOK || json.Unmarshal(b, &evs) != nil {
			t.Fatalf("GET /events: %d %s", code, b)
		}
		n := 0
		for _, ev := range evs {
			if ev.AgentName == "leaf" {
				n++
			}
		}
		return n
	}
	testutil.Within(t, 20*time.Second, "two's children stored", func() bool { return leaves() >= 2 })
	if n := leaves(); n != 2 {
		t.Errorf("%d children spawned, want two's 2 and none of three's", n)
	}

	// A submitted run fails with the kind; the Go client rebuilds it.
	resp, body = do(t, ctx, http.MethodPost, s.url+"/submit", `{"target":"three","task":{"input":"go"}}`, nil)
	var sub struct {
		RunID string `json:"run_id"`
	}
	if resp.StatusCode != http.StatusAccepted || json.Unmarshal(body, &sub) != nil {
		t.Fatalf("submit: %d %s", resp.StatusCode, body)
	}
	var final svc.AgentResult
	testutil.Within(t, 20*time.Second, "the submitted run ends", func() bool {
		resp, body := get(t, s.url+"/runs/"+sub.RunID+"/result", nil)
		return resp.StatusCode == http.StatusOK && json.Unmarshal(body, &final) == nil
	})
	if final.Success || final.Error == nil || final.Error.Type != string(svc.KindSpawnCap) {
		t.Errorf("submitted run's result: %+v", final)
	}
	c, err := client.New(s.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := c.Run(ctx, "three", svc.TaskSpec{Input: json.RawMessage(`1`)}); !errors.Is(err, svc.ErrSpawnCap) {
		t.Errorf("Go client: %v, want a SpawnCapError", err)
	}

	// The flag wins over runtime.yaml; 33 is past the default of 32.
	s2 := startServe(t, nil, "--specs", dir, "--max-spawn-children", "3")
	if !strings.Contains(s2.stderr.String(), "max_spawn_children=3") {
		t.Errorf("the serving log does not show max_spawn_children=3:\n%s", s2.stderr.String())
	}
	if resp, body := do(t, ctx, http.MethodPost, s2.url+"/agents/three/run", `{"input":"go"}`, nil); resp.StatusCode != http.StatusOK {
		t.Errorf("three children with --max-spawn-children 3: %d %s", resp.StatusCode, body)
	}
	resp, body = do(t, ctx, http.MethodPost, s2.url+"/agents/plenty/run", `{"input":"go"}`, nil)
	if p := decodeProblem(t, resp, body, http.StatusUnprocessableEntity); !strings.Contains(p.Message, "max_spawn_children is 3") {
		t.Errorf("problem %+v", p)
	}
	s3 := startServe(t, nil, "--specs", dir, "--max-spawn-children", "40")
	if resp, body := do(t, ctx, http.MethodPost, s3.url+"/agents/plenty/run", `{"input":"go"}`, nil); resp.StatusCode != http.StatusOK {
		t.Errorf("33 children with --max-spawn-children 40: %d %s", resp.StatusCode, body)
	}
}

// spawnedAll decodes every child's result from a spawner's answer.
func spawnedAll(t *testing.T, output json.RawMessage) []spawnResult {
	t.Helper()
	var out struct {
		Tools struct {
			SpawnAgents []spawnResult `json:"spawn_agents"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(output, &out); err != nil {
		t.Fatalf("spawner output %s: %v", output, err)
	}
	return out.Tools.SpawnAgents
}

func getEvents(t *testing.T, url string, typ svc.EventType) (int, []byte) {
	t.Helper()
	resp, body := get(t, url+"/events?limit=1000&event_type="+string(typ), nil)
	return resp.StatusCode, body
}

// budgetEvents are the stored budget_exceeded events, oldest first, once
// there are n.
func budgetEvents(t *testing.T, url string, n int) []svc.RuntimeEvent {
	t.Helper()
	var evs []svc.RuntimeEvent
	testutil.Within(t, 20*time.Second, fmt.Sprintf("%d budget_exceeded events stored", n), func() bool {
		code, body := getEvents(t, url, svc.EventBudgetExceeded)
		evs = nil
		return code == http.StatusOK && json.Unmarshal(body, &evs) == nil && len(evs) >= n
	})
	if len(evs) != n {
		t.Fatalf("%d budget_exceeded events, want %d: %+v", len(evs), n, evs)
	}
	for i, j := 0, len(evs)-1; i < j; i, j = i+1, j-1 {
		evs[i], evs[j] = evs[j], evs[i]
	}
	return evs
}

// checkBudgetEvent checks one budget_exceeded: its scope, used, and its
// overshoot (-1: none, a refusal).
func checkBudgetEvent(t *testing.T, ev svc.RuntimeEvent, scope string, used, overshoot float64) {
	t.Helper()
	p := ev.Payload
	o, has := p["overshoot"]
	if p["scope"] != scope || p["used"] != used || (overshoot < 0) == has || (has && o != overshoot) {
		t.Errorf("budget_exceeded %s task %s payload %v, want scope %s, used %v, overshoot %v", ev.AgentName, ev.TaskID, p, scope, used, overshoot)
	}
}

// Issue 33 part 8 with the real binary: the run whose post-charge crosses
// the runtime's token_budget (25; each run spends 10) keeps its result,
// whether run, submitted or a gather's task, and its budget_exceeded says
// by how much it went past; the next run is refused up front with 429
// BudgetExceededError; a task's own cap (token_budget) still fails the run
// that crosses it.
func TestServeBudgetLastRunKeepsResult(t *testing.T) {
	t.Parallel()
	dir := writeSpecs(t, map[string]string{
		"runtime.yaml":      "version: 1\ntoken_budget: 25\n",
		"agents/spend.yaml": "version: 1\nname: spend\nmodel: test:echo\nmodel_settings: {tokens: 10}\n",
	})
	s := startServe(t, nil, "--specs", dir)
	ctx := context.Background()
	run := func(body string) (*http.Response, []byte) {
		return do(t, ctx, http.MethodPost, s.url+"/agents/spend/run", body, nil)
	}
	ok := func(what, body string, want string) {
		t.Helper()
		resp, b := run(body)
		var res svc.AgentResult
		if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &res) != nil || !res.Success || string(res.Output) != want {
			t.Fatalf("%s: %d %s, want success with output %s", what, resp.StatusCode, b, want)
		}
	}
	refused := func(what string, resp *http.Response, b []byte) {
		t.Helper()
		if p := decodeProblem(t, resp, b, http.StatusTooManyRequests); p.Error != string(svc.KindBudgetExceeded) {
			t.Errorf("%s: %+v, want a BudgetExceededError", what, p)
		}
	}
	reset := func() {
		t.Helper()
		if resp, b := do(t, ctx, http.MethodPost, s.url+"/runtime/budget/reset", "", nil); resp.StatusCode != http.StatusOK {
			t.Fatalf("reset: %d %s", resp.StatusCode, b)
		}
	}

	// A run: 10, 20, then 30 of 25: the third keeps its answer.
	ok("run 1", `{"id":"r1","input":1}`, "1")
	ok("run 2", `{"id":"r2","input":2}`, "2")
	ok("run 3, crossing the budget", `{"id":"r3","input":3}`, "3")
	resp, b := run(`{"id":"r4","input":4}`)
	refused("run 4, after the budget was spent", resp, b)
	evs := budgetEvents(t, s.url, 2)
	if evs[0].TaskID != "r3" || evs[1].TaskID != "r4" {
		t.Errorf("budget_exceeded tasks %s, %s; want r3 (the crossing), r4 (the refusal)", evs[0].TaskID, evs[1].TaskID)
	}
	checkBudgetEvent(t, evs[0], "runtime", 30, 5)
	checkBudgetEvent(t, evs[1], "runtime", 30, -1)

	// A submitted run crossing it keeps its result; the next submission
	// is refused.
	reset()
	ok("run 5", `{"input":5}`, "5")
	ok("run 6", `{"input":6}`, "6")
	resp, b = do(t, ctx, http.MethodPost, s.url+"/submit", `{"target":"spend","task":{"id":"s1","input":7}}`, nil)
	var sub struct {
		RunID string `json:"run_id"`
	}
	if resp.StatusCode != http.StatusAccepted || json.Unmarshal(b, &sub) != nil {
		t.Fatalf("submit: %d %s", resp.StatusCode, b)
	}
	var res svc.AgentResult
	testutil.Within(t, 20*time.Second, "the submitted run ends", func() bool {
		resp, body := get(t, s.url+"/runs/"+sub.RunID+"/result", nil)
		return resp.StatusCode == http.StatusOK && json.Unmarshal(body, &res) == nil
	})
	if !res.Success || string(res.Output) != "7" || res.Metadata.TokensUsed != 10 {
		t.Errorf("the submitted run crossing the budget: %+v", res)
	}
	resp, b = get(t, s.url+"/runs/"+sub.RunID+"/status", nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"completed"`) {
		t.Errorf("status of the submitted run: %d %s", resp.StatusCode, b)
	}
	resp, b = do(t, ctx, http.MethodPost, s.url+"/submit", `{"target":"spend","task":{"input":8}}`, nil)
	refused("a submission after the budget was spent", resp, b)
	evs = budgetEvents(t, s.url, 4)
	if evs[2].TaskID != "s1" {
		t.Errorf("crossing event of task %s, want s1", evs[2].TaskID)
	}
	checkBudgetEvent(t, evs[2], "runtime", 30, 5)

	// In a gather, one task at a time: the third crosses and keeps its
	// result, the fourth is refused at its pre-check.
	reset()
	resp, b = do(t, ctx, http.MethodPost, s.url+"/agents/spend/gather",
		`{"tasks":[{"input":1},{"input":2},{"id":"g3","input":3},{"id":"g4","input":4}],"max_concurrency":1}`, nil)
	var out []svc.AgentResult
	if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &out) != nil || len(out) != 4 {
		t.Fatalf("gather: %d %s", resp.StatusCode, b)
	}
	for i, r := range out[:3] {
		if !r.Success || string(r.Output) != fmt.Sprint(i+1) {
			t.Errorf("gather task %d: %+v, want its answer", i+1, r)
		}
	}
	if out[3].Success || out[3].Error == nil || out[3].Error.Type != string(svc.KindBudgetExceeded) {
		t.Errorf("gather task 4, after the budget was spent: %+v", out[3])
	}
	evs = budgetEvents(t, s.url, 6)
	if evs[4].TaskID != "g3" || evs[5].TaskID != "g4" {
		t.Errorf("gather's budget_exceeded tasks %s, %s; want g3, g4", evs[4].TaskID, evs[5].TaskID)
	}
	checkBudgetEvent(t, evs[4], "runtime", 30, 5)
	checkBudgetEvent(t, evs[5], "runtime", 30, -1)

	// A task's own cap still fails the run that crosses it (the runtime's
	// budget, reset, is not crossed: 10 of 25).
	reset()
	resp, b = run(`{"id":"capped","input":1,"token_budget":4}`)
	refused("a run past its own token_budget", resp, b)
	evs = budgetEvents(t, s.url, 7)
	if evs[6].TaskID != "capped" {
		t.Errorf("cap event of task %s, want capped", evs[6].TaskID)
	}
	checkBudgetEvent(t, evs[6], "run", 10, 6)
	ok("a run after the capped one", `{"input":9}`, "9")
}

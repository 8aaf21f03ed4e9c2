//go:build soak

package soak

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/servertest"
	"github.com/svc-dev/svc/llmsim"
)

// resumeKey is the API key the resume loop's agents send to llmsim.
const resumeKey = "sk-soak"

// repeatGrace is how long after a model call's answer a kill may still
// excuse the call being made again: the step is recorded once the answer
// is in (a store write of milliseconds, more under load), and a kill
// before that leaves the step unrecorded. A step recorded longer before
// the kill must never be paid for again.
const repeatGrace = 250 * time.Millisecond

// TestResumeLoop is the kill loop of durable runs: four clients submit
// runs of agents on llmsim whose every model call takes
// SOAK_RESUME_STEP (default 1s): one agent alone, and a pipeline of three,
// each task with its own input; the server gets SIGKILL 0.5-3 s into the
// round and is started again on the same store. Every run accepted (202)
// must then end completed (resumed, not interrupted) with its input
// echoed as its output, its stream must report each agent's completion
// once, and no model call may be made twice for the same task unless the
// first was cut by a kill (or answered within repeatGrace of one).
// SOAK_KILL_ROUNDS (default 20) and SOAK_KILL_STORES (default
// sqlite,pebble,redis) as for TestKillLoop.
func TestResumeLoop(t *testing.T) {
	rounds := envInt(t, "SOAK_KILL_ROUNDS", 20)
	step := envDuration(t, "SOAK_RESUME_STEP", time.Second)
	stores := map[string]func(t *testing.T, dataDir string) string{
		"sqlite": func(_ *testing.T, dir string) string { return "sqlite:" + filepath.Join(dir, "runs.db") },
		"pebble": func(_ *testing.T, dir string) string { return "pebble:" + filepath.Join(dir, "runs.pebble") },
		"redis":  func(t *testing.T, _ string) string { return servertest.Redis(t) },
	}
	names := "sqlite,pebble,redis"
	if v := envString("SOAK_KILL_STORES"); v != "" {
		names = v
	}
	for _, name := range strings.Split(names, ",") {
		storeFor, ok := stores[name]
		if !ok {
			t.Fatalf("SOAK_KILL_STORES: unknown store %q (want sqlite, pebble, redis)", name)
		}
		t.Run(name, func(t *testing.T) {
			dataDir := t.TempDir()
			resumeLoop(t, name, rounds, step, dataDir, storeFor(t, dataDir))
		})
	}
}

// simCall is one model call as llmsim's front saw it.
type simCall struct {
	start, end time.Time
	aborted    bool // the client went away before the answer was complete
}

// countingSim is llmsim behind a front that logs every call by model and
// task (the last user message: each task's input is its own).
type countingSim struct {
	sim *llmsim.Server
	srv *http.Server
	ln  net.Listener
	wg  sync.WaitGroup

	mu    sync.Mutex
	calls map[string][]*simCall // "model|input"
}

func startCountingSim(t *testing.T, sc *llmsim.Scenario) *countingSim {
	t.Helper()
	cs := &countingSim{sim: llmsim.New(llmsim.Config{Scenario: sc}), calls: map[string][]*simCall{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cs.ln = ln
	cs.srv = &http.Server{Handler: cs, ReadHeaderTimeout: 10 * time.Second}
	cs.wg.Add(1)
	go func() {
		defer cs.wg.Done()
		_ = cs.srv.Serve(ln)
	}()
	t.Cleanup(func() {
		_ = cs.sim.Close() // releases the calls still waiting out their delay
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := cs.srv.Shutdown(ctx); err != nil {
			_ = cs.srv.Close()
		}
		cs.wg.Wait()
	})
	return cs
}

func (cs *countingSim) URL() string { return "http://" + cs.ln.Addr().String() }

func (cs *countingSim) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		cs.sim.ServeHTTP(w, r)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var in struct {
		Model    string `json:"model"`
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	_ = json.Unmarshal(body, &in)
	last := ""
	for _, m := range in.Messages {
		if m.Role == "user" {
			var s string
			if json.Unmarshal(m.Content, &s) != nil {
				s = string(m.Content)
			}
			last = s
		}
	}
	c := &simCall{start: time.Now()}
	key := in.Model + "|" + last
	cs.mu.Lock()
	cs.calls[key] = append(cs.calls[key], c)
	cs.mu.Unlock()
	r.Body = io.NopCloser(bytes.NewReader(body))
	cs.sim.ServeHTTP(w, r)
	cs.mu.Lock()
	c.end, c.aborted = time.Now(), r.Context().Err() != nil
	cs.mu.Unlock()
}

// resumeStats are the figures of one store's resume loop.
type resumeStats struct {
	kills, submitted, accepted, completed, resumed int
	calls, repeats, cutByKill, withinGrace         int
	problems                                       []string
}

func (st *resumeStats) bad(format string, args ...any) {
	st.problems = append(st.problems, fmt.Sprintf(format, args...))
}

// resumeTargets are what the loop submits: target, kind and the models a
// run of it calls, in order.
var resumeTargets = []struct {
	target, kind string
	models       []string
}{
	{"r_solo", "agent", []string{"m-solo"}},
	{"r_chain", "group", []string{"m-c1", "m-c2", "m-c3"}},
}

func resumeLoop(t *testing.T, store string, rounds int, step time.Duration, dataDir, storeSpec string) {
	var rules []llmsim.Rule
	for _, tg := range resumeTargets {
		for _, m := range tg.models {
			rules = append(rules, llmsim.Rule{Match: llmsim.Match{Model: m}, DelayMs: int(step.Milliseconds())})
		}
	}
	sim := startCountingSim(t, &llmsim.Scenario{Rules: rules})
	specs := writeResumeSpecs(t, sim.URL())
	c := &http.Client{Timeout: 30 * time.Second}
	defer c.CloseIdleConnections()
	st := resumeStats{}
	var (
		kills   []killSpan        // each SIGKILL, from sent to the process gone
		pending map[string]string // run id → its input, accepted in the round just killed
		targets = map[string]int{}
	)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	for round := 0; round <= rounds; round++ {
		flags := []string{"--store", storeSpec}
		if store == "redis" {
			// A restarted node is a new node of the shared store: it claims
			// the runs of the killed one once that one's lease expires.
			flags = append(flags, "--node-lease", "2s")
		}
		s := startServer(t, dataDir, specs, flags...)
		checkResumed(t, c, s.url, pending, &st)
		if round == rounds {
			s.stop(t, 30*time.Second)
			break
		}
		pending = map[string]string{}
		resumeLoad(s.url, rng, store, round, &st, pending, targets, func() {
			time.Sleep(time.Duration(500+rng.IntN(2500)) * time.Millisecond)
			k := killSpan{sent: time.Now()}
			s.kill()
			k.gone = time.Now()
			kills = append(kills, k)
		})
		st.kills++
	}

	// Every repeated call of a task's model must have been cut by a kill,
	// or answered just before one.
	sim.mu.Lock()
	for key, calls := range sim.calls {
		st.calls += len(calls)
		sort.Slice(calls, func(i, j int) bool { return calls[i].start.Before(calls[j].start) })
		for _, c := range calls[:len(calls)-1] {
			st.repeats++
			switch {
			case c.aborted:
				st.cutByKill++
			case killedWithin(kills, c.end, repeatGrace):
				st.withinGrace++
			default:
				st.bad("%s: the call answered at %s was made again (calls %s; kills %s)",
					key, c.end.Format("15:04:05.000"), describeCalls(calls), describeKills(kills))
			}
		}
	}
	sim.mu.Unlock()

	t.Logf("RESUME-LOOP store=%s step=%v kills=%d submitted=%d accepted=%d completed=%d resumed=%d targets=%v model_calls=%d repeated=%d (cut by the kill %d, answered within %v before it %d) problems=%d",
		store, step, st.kills, st.submitted, st.accepted, st.completed, st.resumed, targets, st.calls, st.repeats, st.cutByKill, repeatGrace, st.withinGrace, len(st.problems))
	for i, p := range st.problems {
		if i == 20 {
			t.Errorf("… and %d more", len(st.problems)-20)
			break
		}
		t.Error(p)
	}
	if st.accepted == 0 {
		t.Error("no run was accepted: the loop checked nothing")
	}
}

// killSpan is one SIGKILL: sent, and the process seen gone.
type killSpan struct{ sent, gone time.Time }

// killedWithin reports whether a call answered at end may have gone
// unrecorded because of a kill: one sent at most d after end, while the
// process was still alive at end (an answer to a dying process is lost).
func killedWithin(kills []killSpan, end time.Time, d time.Duration) bool {
	for _, k := range kills {
		if !end.After(k.gone) && k.sent.Sub(end) <= d {
			return true
		}
	}
	return false
}

func describeCalls(calls []*simCall) string {
	var b strings.Builder
	for _, c := range calls {
		fmt.Fprintf(&b, "[%s-%s aborted=%v]", c.start.Format("15:04:05.000"), c.end.Format("15:04:05.000"), c.aborted)
	}
	return b.String()
}

func describeKills(kills []killSpan) string {
	var b strings.Builder
	for _, k := range kills {
		fmt.Fprintf(&b, "[%s-%s]", k.sent.Format("15:04:05.000"), k.gone.Format("15:04:05.000"))
	}
	return b.String()
}

// writeResumeSpecs writes the loop's agents, all on llmsim at simURL.
func writeResumeSpecs(t *testing.T, simURL string) string {
	t.Helper()
	dir := t.TempDir()
	agent := func(name, model string) string {
		return fmt.Sprintf("version: 1\nname: %s\nmodel: openai:%s\ninstructions: Repeat the input.\n"+
			"model_settings: {base_url: %s/v1, api_key: %s}\n", name, model, simURL, resumeKey)
	}
	files := map[string]string{
		"runtime.yaml":        "version: 1\ntimeout_seconds: 300\n",
		"agents/r_solo.yaml":  agent("r_solo", "m-solo"),
		"agents/r_c1.yaml":    agent("r_c1", "m-c1"),
		"agents/r_c2.yaml":    agent("r_c2", "m-c2"),
		"agents/r_c3.yaml":    agent("r_c3", "m-c3"),
		"groups/r_chain.yaml": "version: 1\nname: r_chain\nnodes:\n  a: {agent: r_c1}\n  b: {agent: r_c2}\n  c: {agent: r_c3}\nedges:\n  - {from: a, to: b}\n  - {from: b, to: c}\n",
	}
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// resumeLoad submits runs from four clients, each with its own input,
// until kill has killed the server; pending gets the accepted runs.
func resumeLoad(url string, rng *rand.Rand, store string, round int, st *resumeStats, pending map[string]string, targets map[string]int, kill func()) {
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	ctx, cancel := context.WithCancel(context.Background())
	c := &http.Client{Timeout: 10 * time.Second}
	seeds := make([]uint64, 4)
	for i := range seeds {
		seeds[i] = rng.Uint64()
	}
	for client, seed := range seeds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, 4))
			for n := 0; ctx.Err() == nil; n++ {
				tg := resumeTargets[r.IntN(len(resumeTargets))]
				input := fmt.Sprintf("%s %s round %d client %d task %d", tg.target, store, round, client, n)
				mu.Lock()
				st.submitted++
				mu.Unlock()
				code, body, err := do(ctx, c, http.MethodPost, url+"/submit",
					map[string]any{"target": tg.target, "kind": tg.kind, "task": map[string]any{"input": input}})
				var sub struct {
					RunID string `json:"run_id"`
				}
				if err != nil || code != http.StatusAccepted || json.Unmarshal(body, &sub) != nil || sub.RunID == "" {
					time.Sleep(10 * time.Millisecond) // refused while dying: no accepted run
					continue
				}
				mu.Lock()
				pending[sub.RunID] = input
				targets[tg.target]++
				st.accepted++
				mu.Unlock()
				time.Sleep(time.Duration(20+r.IntN(80)) * time.Millisecond)
			}
		}()
	}
	kill()
	cancel()
	wg.Wait()
	c.CloseIdleConnections()
}

// checkResumed waits (at most two minutes) for the runs of the round just
// killed to end, and checks each: completed, its input as its output, each
// agent's completion reported once, at most one run_resumed.
func checkResumed(t *testing.T, c *http.Client, url string, pending map[string]string, st *resumeStats) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	open := map[string]bool{}
	for id := range pending {
		open[id] = true
	}
	for len(open) > 0 && ctx.Err() == nil {
		for id := range open {
			code, body, err := do(ctx, c, http.MethodGet, url+"/runs/"+id+"/status", nil)
			var status struct {
				State string `json:"state"`
			}
			if err == nil && code == http.StatusOK && json.Unmarshal(body, &status) == nil &&
				(status.State == "completed" || status.State == "failed" || status.State == "cancelled") {
				delete(open, id)
			}
		}
		if len(open) > 0 {
			time.Sleep(200 * time.Millisecond)
		}
	}
	for id, input := range pending {
		if open[id] {
			st.bad("run %s (%q) not finished two minutes after the restart", id, input)
			continue
		}
		checkOneResumed(ctx, c, url, id, input, st)
	}
}

func checkOneResumed(ctx context.Context, c *http.Client, url, id, input string, st *resumeStats) {
	bad := func(format string, args ...any) { st.bad("run %s (%q): "+format, append([]any{id, input}, args...)...) }
	code, body, err := do(ctx, c, http.MethodGet, url+"/runs/"+id+"/status", nil)
	var status struct {
		State   string `json:"state"`
		Reason  string `json:"reason"`
		Resumed int    `json:"resumed"`
	}
	if err != nil || code != http.StatusOK || json.Unmarshal(body, &status) != nil {
		bad("GET status: %d %v %s", code, err, body)
		return
	}
	if status.State != "completed" {
		bad("ended %s (%s), want completed: %s", status.State, status.Reason, body)
		return
	}
	st.completed++
	statusBody := string(body)
	switch status.Resumed {
	case 0:
	case 1:
		st.resumed++
	default:
		bad("resumed %d after one kill: %s", status.Resumed, body)
	}
	code, body, err = do(ctx, c, http.MethodGet, url+"/runs/"+id+"/result", nil)
	var res struct {
		Success bool            `json:"success"`
		Output  json.RawMessage `json:"output"`
	}
	want, _ := json.Marshal(input)
	if err != nil || code != http.StatusOK || json.Unmarshal(body, &res) != nil || !res.Success || string(res.Output) != string(want) {
		bad("result %d %v %s, want success with output %s", code, err, body, want)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/runs/"+id+"/stream", nil)
	if err != nil {
		bad("%v", err)
		return
	}
	resp, err := c.Do(req)
	if err != nil {
		bad("GET stream: %v", err)
		return
	}
	defer resp.Body.Close()
	completions := map[string]int{}
	var frames []string
	resumes := 0
	if err := readSSE(resp.Body, func(f frame) bool {
		frames = append(frames, f.id+":"+f.event)
		var ev struct {
			Agent string `json:"agent"`
		}
		_ = json.Unmarshal([]byte(f.data), &ev)
		switch f.event {
		case "agent_completed":
			completions[ev.Agent]++
		case "run_resumed":
			resumes++
		}
		return true
	}); err != nil {
		bad("stream did not end: %v after %v", err, frames)
		return
	}
	for agent, n := range completions {
		if n != 1 {
			bad("agent_completed %d times for %s: %v", n, agent, frames)
		}
	}
	for _, tg := range resumeTargets {
		if strings.HasPrefix(input, tg.target+" ") && len(completions) != len(tg.models) {
			bad("%d agents completed, want the %d of %s: %v", len(completions), len(tg.models), tg.target, frames)
		}
	}
	if resumes != status.Resumed {
		bad("%d run_resumed events, status says resumed %d: %v; status %s", resumes, status.Resumed, frames, statusBody)
	}
	last := ""
	if len(frames) > 0 {
		_, last, _ = strings.Cut(frames[len(frames)-1], ":")
	}
	if last != "agent_completed" && last != "group_completed" {
		bad("stream %v does not end with the run's completion", frames)
	}
}

//go:build soak

package soak

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/servertest"
)

// TestKillLoop submits runs to svc serve from several clients, kills the
// server with SIGKILL at a random moment, restarts it on the same store and
// checks every run it accepted (202): the run is terminal, its status,
// result and stream agree, and a terminal run stays as it was through every
// later kill. SOAK_KILL_ROUNDS (default 20) sets the kills per store and
// SOAK_KILL_STORES (default sqlite,pebble,redis) the stores.
func TestKillLoop(t *testing.T) {
	rounds := envInt(t, "SOAK_KILL_ROUNDS", 20)
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
			killLoop(t, name, rounds, dataDir, storeFor(t, dataDir))
		})
	}
}

// seen is what a check found of one run, kept to prove it never changes.
type seen struct {
	state, reason string
	result        string // the /result body (empty for a cancelled run)
}

// killStats are the figures of one store's loop.
type killStats struct {
	kills, submitted, accepted, cancels, checked, rechecked int
	states                                                  map[string]int
	problems                                                []string
}

func killLoop(t *testing.T, store string, rounds int, dataDir, storeSpec string) {
	specs := writeSpecs(t)
	c := &http.Client{Timeout: 30 * time.Second}
	defer c.CloseIdleConnections()
	st := killStats{states: map[string]int{}}
	final := map[string]seen{}    // run id → what the first check after its round found
	var pending map[string]string // run id → target, accepted in the round just killed
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	for round := 0; round <= rounds; round++ {
		flags := []string{"--store", storeSpec}
		if store == "redis" {
			// A restarted node is a new node of the shared store: the runs
			// the killed one left are claimed once its lease expires (15 s
			// by default, longer than the check below waits).
			flags = append(flags, "--node-lease", "2s")
		}
		s := startServer(t, dataDir, specs, flags...)
		for id, target := range pending {
			st.checked++
			if got, ok := checkRun(t, c, s.url, id, target, &st); ok {
				final[id] = got
				st.states[stateKey(got)]++
			}
		}
		if round == rounds {
			// The last start: every run of every round is read again and must be
			// as it was first found, through all the kills since.
			for id, want := range final {
				st.rechecked++
				got, ok := checkRun(t, c, s.url, id, "", &st)
				if ok && got != want {
					st.problems = append(st.problems, fmt.Sprintf("run %s changed after later restarts: was %+v, now %+v", id, want, got))
				}
			}
			s.stop(t, 30*time.Second)
			break
		}
		pending = load(s.url, rng, &st, func() { // kill at a random moment of the load
			time.Sleep(time.Duration(100+rng.IntN(2900)) * time.Millisecond)
			s.kill()
		})
		st.kills++
	}
	t.Logf("KILL-LOOP store=%s kills=%d submitted=%d accepted=%d cancels=%d checked=%d rechecked=%d states=%v inconsistencies=%d",
		store, st.kills, st.submitted, st.accepted, st.cancels, st.checked, st.rechecked, st.states, len(st.problems))
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

func stateKey(s seen) string {
	if s.reason == "interrupted" {
		return "failed/interrupted"
	}
	return s.state
}

// load submits runs from four clients (and cancels some) until kill has
// killed the server, and returns the runs accepted with a 202.
func load(url string, rng *rand.Rand, st *killStats, kill func()) map[string]string {
	var (
		mu       sync.Mutex
		accepted = map[string]string{}
		wg       sync.WaitGroup
	)
	ctx, cancel := context.WithCancel(context.Background())
	c := &http.Client{Timeout: 10 * time.Second}
	seeds := make([]uint64, 4)
	for i := range seeds {
		seeds[i] = rng.Uint64()
	}
	for _, seed := range seeds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, 2))
			for n := 0; ctx.Err() == nil; n++ {
				target, kind, input := pickSubmit(r, n)
				mu.Lock()
				st.submitted++
				mu.Unlock()
				code, body, err := do(ctx, c, http.MethodPost, url+"/submit",
					map[string]any{"target": target, "kind": kind, "task": map[string]any{"input": input}})
				if err != nil || code != http.StatusAccepted {
					time.Sleep(10 * time.Millisecond) // refused while dying: no accepted run
					continue
				}
				var sub struct {
					RunID string `json:"run_id"`
				}
				if json.Unmarshal(body, &sub) != nil || sub.RunID == "" {
					continue
				}
				mu.Lock()
				accepted[sub.RunID] = target
				st.accepted++
				mu.Unlock()
				if r.IntN(5) == 0 { // a fifth are cancelled a moment later
					time.Sleep(time.Duration(r.IntN(300)) * time.Millisecond)
					if code, _, err := do(ctx, c, http.MethodPost, url+"/runs/"+sub.RunID+"/cancel", nil); err == nil && code == http.StatusNoContent {
						mu.Lock()
						st.cancels++
						mu.Unlock()
					}
				}
				time.Sleep(time.Duration(r.IntN(50)) * time.Millisecond)
			}
		}()
	}
	kill()
	cancel()
	wg.Wait()
	c.CloseIdleConnections()
	return accepted
}

// pickSubmit chooses what a client submits: slow agent runs (some failing),
// fast ones, the three-step chain and a fan-out with a failing item.
func pickSubmit(r *rand.Rand, n int) (target, kind string, input any) {
	switch r.IntN(5) {
	case 0:
		return "echo", "agent", map[string]any{"n": n}
	case 1:
		return "slow", "agent", "bad input " + strconv.Itoa(n)
	case 2:
		return "chain", "group", map[string]any{"n": n}
	case 3:
		return "fanout", "group", map[string]any{"items": []string{"a", "b", "bad", "d"}}
	default:
		return "slow", "agent", map[string]any{"n": n}
	}
}

// terminalFrames are the frame types a run's stream may end with, by state.
var terminalFrames = map[string][]string{
	"completed": {"agent_completed", "group_completed"},
	"failed":    {"agent_failed", "group_completed", "run_failed"},
	"cancelled": {"run_cancelled"},
}

// checkRun reads one run after a restart and records in st every way in
// which its status, result and stream disagree. target is "" when unknown.
func checkRun(t *testing.T, c *http.Client, url, id, target string, st *killStats) (seen, bool) {
	t.Helper()
	bad := func(format string, args ...any) (seen, bool) {
		st.problems = append(st.problems, fmt.Sprintf("run %s (%s): ", id, target)+fmt.Sprintf(format, args...))
		return seen{}, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var status struct {
		RunID    string `json:"run_id"`
		State    string `json:"state"`
		Reason   string `json:"reason"`
		Progress *struct {
			Total, Completed, Failed, Running int
		} `json:"progress"`
	}
	// After a restart nothing runs any more: every run must be terminal at
	// once, but allow a moment for a slow store.
	for deadline := time.Now().Add(10 * time.Second); ; {
		code, body, err := do(ctx, c, http.MethodGet, url+"/runs/"+id+"/status", nil)
		if err != nil || code != http.StatusOK {
			return bad("GET status: %d %v %s", code, err, body)
		}
		if err := json.Unmarshal(body, &status); err != nil {
			return bad("status body %s: %v", body, err)
		}
		if _, ok := terminalFrames[status.State]; ok {
			break
		}
		if time.Now().After(deadline) {
			return bad("still %q 10s after the restart: %s", status.State, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if status.RunID != id {
		return bad("status names run %q", status.RunID)
	}
	if p := status.Progress; p != nil && p.Running != 0 {
		return bad("%s with %d running in its progress", status.State, p.Running)
	}
	got := seen{state: status.State, reason: status.Reason}

	code, body, err := do(ctx, c, http.MethodGet, url+"/runs/"+id+"/result", nil)
	if err != nil {
		return bad("GET result: %v", err)
	}
	if status.State == "cancelled" {
		if code != http.StatusConflict {
			return bad("cancelled, but GET result is %d %s (want 409)", code, body)
		}
	} else {
		if code != http.StatusOK {
			return bad("%s, but GET result is %d %s", status.State, code, body)
		}
		var res struct {
			Success bool `json:"success"`
			Group   bool `json:"group"`
			Error   *struct {
				Type, Reason string
			} `json:"error"`
		}
		if err := json.Unmarshal(body, &res); err != nil {
			return bad("result %s: %v", body, err)
		}
		switch {
		case status.State == "completed" && !res.Success:
			return bad("completed, but its result says success false: %s", body)
		case status.State == "failed" && res.Success:
			return bad("failed, but its result says success true: %s", body)
		case status.State == "failed" && !res.Group && res.Error == nil:
			return bad("failed, but its result has no error: %s", body)
		case status.Reason == "interrupted" && (res.Error == nil || res.Error.Reason != "interrupted"):
			return bad("interrupted, but its result's error is not: %s", body)
		}
		got.result = string(body)
	}

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/runs/"+id+"/stream", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		return bad("GET stream: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return bad("GET stream: %d", resp.StatusCode)
	}
	var frames []frame
	if err := readSSE(resp.Body, func(f frame) bool { frames = append(frames, f); return true }); err != nil {
		return bad("stream did not end (%v) after %d frames", err, len(frames))
	}
	if len(frames) == 0 {
		return bad("%s, but its stream ended without a frame", status.State)
	}
	prev := int64(0)
	for i, f := range frames {
		seq, err := strconv.ParseInt(f.id, 10, 64)
		if err != nil || seq <= prev {
			return bad("frame %d has id %q after %d", i, f.id, prev)
		}
		prev = seq
		if i < len(frames)-1 && (f.event == "run_failed" || f.event == "run_cancelled" || f.event == "group_completed") {
			return bad("frame %d of %d is %s, a terminal frame, and more follow", i+1, len(frames), f.event)
		}
	}
	last := frames[len(frames)-1]
	ok := false
	for _, e := range terminalFrames[status.State] {
		ok = ok || last.event == e
	}
	if !ok {
		return bad("%s, but its stream ends with %s (want one of %v)", status.State, last.event, terminalFrames[status.State])
	}
	if status.Reason == "interrupted" && (last.event != "run_failed" || !strings.Contains(last.data, `"interrupted"`)) {
		return bad("interrupted, but its stream ends with %s %s", last.event, last.data)
	}
	return got, true
}

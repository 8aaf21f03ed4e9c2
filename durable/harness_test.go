package durable

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/servertest"
	"github.com/svc-dev/svc/internal/svcproc"
	"github.com/svc-dev/svc/llmsim"
)

// simKey is the API key the agents send to llmsim: its /stats count calls
// per "key/model".
const simKey = "sk-durable"

// stores are the persistent run stores a run can be resumed from, each
// given as `svc serve --store` takes it.
var stores = map[string]func(t *testing.T, dataDir string) string{
	"sqlite": func(_ *testing.T, dir string) string { return "sqlite:" + filepath.Join(dir, "runs.db") },
	"pebble": func(_ *testing.T, dir string) string { return "pebble:" + filepath.Join(dir, "runs.pebble") },
	"redis":  func(t *testing.T, _ string) string { return servertest.Redis(t) },
}

// storeFlags are the flags a store needs besides --store. A Redis run
// store is shared by serve nodes: a restarted node is a new node (its id
// is new each start) that claims the runs of nodes whose lease expired, so
// the lease is short to keep the test short (15 s by default).
var storeFlags = map[string][]string{"redis": {"--node-lease", "2s"}}

// world is one test's llmsim, specs directory, data directory and run
// store: each `svc serve` it starts serves the same specs on the same
// store, as an operator restarting the server does.
type world struct {
	t       *testing.T
	sim     *llmsim.Server
	specs   string
	dataDir string
	store   string
	flags   []string // storeFlags
	c       *http.Client
}

// newWorld starts llmsim with sc and writes the specs files (paths under
// the specs directory to their text; "SIM" in a text is replaced by
// llmsim's URL and "KEY" by simKey).
func newWorld(t *testing.T, store string, sc *llmsim.Scenario, files map[string]string) *world {
	t.Helper()
	return newWorldSim(t, store, llmsim.Config{Scenario: sc}, files)
}

// newWorldSim is newWorld with llmsim configured by cfg.
func newWorldSim(t *testing.T, store string, cfg llmsim.Config, files map[string]string) *world {
	t.Helper()
	sim := llmsim.New(cfg)
	if err := sim.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	w := &world{t: t, sim: sim, specs: t.TempDir(), dataDir: t.TempDir(), c: &http.Client{Timeout: 30 * time.Second}}
	t.Cleanup(w.c.CloseIdleConnections)
	storeFor, ok := stores[store]
	if !ok {
		t.Fatalf("unknown store %q", store)
	}
	w.store, w.flags = storeFor(t, w.dataDir), storeFlags[store]
	files["runtime.yaml"] = "version: 1\ntimeout_seconds: 120\n"
	for name, text := range files {
		text = strings.ReplaceAll(strings.ReplaceAll(text, "SIM", sim.URL()), "KEY", simKey)
		p := filepath.Join(w.specs, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

// agentSpec is an agent on llmsim's model m.
func agentSpec(name, model, extra string) string {
	return fmt.Sprintf("version: 1\nname: %s\nmodel: openai:%s\ninstructions: Do your part.\n"+
		"model_settings: {base_url: SIM/v1, api_key: KEY}\n%s", name, model, extra)
}

// serve starts `svc serve` on the world's specs, data directory and store.
func (w *world) serve() *svcproc.Server {
	w.t.Helper()
	return svcproc.Serve(w.t, svcBin, append([]string{"--host", "127.0.0.1", "--port", "0", "--specs", w.specs,
		"--data-dir", w.dataDir, "--store", w.store}, w.flags...)...)
}

// calls is llmsim's count of the agents' calls per model.
func (w *world) calls() map[string]int {
	out := map[string]int{}
	for k, n := range w.sim.Stats() {
		if model, ok := strings.CutPrefix(k, simKey+"/"); ok {
			out[model] = n
		}
	}
	return out
}

// since is the calls per model made after the snapshot before.
func since(now, before map[string]int) map[string]int {
	out := map[string]int{}
	for m, n := range now {
		if d := n - before[m]; d != 0 {
			out[m] = d
		}
	}
	return out
}

func (w *world) do(method, url string, body any) (int, []byte) {
	w.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			w.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		w.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := w.c.Do(req)
	if err != nil {
		w.t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		w.t.Fatalf("%s %s: reading the answer: %v", method, url, err)
	}
	return resp.StatusCode, b
}

// submit submits a run of target and returns its id.
func (w *world) submit(url, target, kind string, input any) string {
	w.t.Helper()
	code, b := w.do(http.MethodPost, url+"/submit", map[string]any{"target": target, "kind": kind, "task": map[string]any{"input": input}})
	var sub struct {
		RunID string `json:"run_id"`
	}
	if code != http.StatusAccepted || json.Unmarshal(b, &sub) != nil || sub.RunID == "" {
		w.t.Fatalf("submit %s: %d %s", target, code, b)
	}
	return sub.RunID
}

// runStatus is GET /runs/{id}/status.
type runStatus struct {
	RunID   string `json:"run_id"`
	State   string `json:"state"`
	Reason  string `json:"reason"`
	Resumed *int   `json:"resumed"`
	Steps   *int   `json:"steps"`
	// CurrentStep is the step log's last step.
	CurrentStep *struct {
		Seq  int    `json:"seq"`
		Kind string `json:"kind"`
		Key  string `json:"key"`
	} `json:"current_step"`
	raw string
}

func (w *world) status(url, id string) runStatus {
	w.t.Helper()
	code, b := w.do(http.MethodGet, url+"/runs/"+id+"/status", nil)
	var st runStatus
	if code != http.StatusOK || json.Unmarshal(b, &st) != nil {
		w.t.Fatalf("status of %s: %d %s", id, code, b)
	}
	st.raw = string(b)
	return st
}

// waitDone polls the run's status until it is terminal (at most 90 s: the
// runs take seconds, a loaded machine more).
func (w *world) waitDone(url, id string) runStatus {
	w.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		st := w.status(url, id)
		switch st.State {
		case "completed", "failed", "cancelled":
			return st
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("run %s still %s after 90 s: %s", id, st.State, st.raw)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// runResult is the part of a run's result that a run repeats exactly.
type runResult struct {
	AgentName string          `json:"agent_name"`
	Success   bool            `json:"success"`
	Output    json.RawMessage `json:"output"`
	Metadata  struct {
		TokensUsed int64 `json:"tokens_used"`
	} `json:"metadata"`
	raw string
}

func (w *world) result(url, id string) runResult {
	w.t.Helper()
	code, b := w.do(http.MethodGet, url+"/runs/"+id+"/result", nil)
	var r runResult
	if code != http.StatusOK || json.Unmarshal(b, &r) != nil {
		w.t.Fatalf("result of %s: %d %s", id, code, b)
	}
	r.raw = string(b)
	return r
}

// frame is one server-sent event of a run's stream.
type frame struct {
	ID    string
	Event string
	Agent string
	Data  string
}

func (f frame) String() string { return f.ID + ":" + f.Event + "(" + f.Agent + ")" }

// stream reads the run's event stream (after the Last-Event-ID lastID
// when not empty), calling fn for each frame, until the stream ends (nil)
// or breaks (the error).
func (w *world) stream(ctx context.Context, url, id, lastID string, fn func(frame)) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/runs/"+id+"/stream", nil)
	if err != nil {
		return err
	}
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	// No client timeout: the stream lasts as long as the run.
	resp, err := (&http.Client{Transport: w.c.Transport}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("GET stream: %d %s", resp.StatusCode, b)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var f frame
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if f.Event != "" || f.Data != "" {
				var ev struct {
					Agent *string `json:"agent"`
				}
				_ = json.Unmarshal([]byte(f.Data), &ev)
				if ev.Agent != nil {
					f.Agent = *ev.Agent
				}
				fn(f)
			}
			f = frame{}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "id:"):
			f.ID = strings.TrimSpace(line[3:])
		case strings.HasPrefix(line, "event:"):
			f.Event = strings.TrimSpace(line[6:])
		case strings.HasPrefix(line, "data:"):
			f.Data += strings.TrimPrefix(line[5:], " ")
		}
	}
	return sc.Err()
}

// history is the run's whole stored event stream, read to its end.
func (w *world) history(url, id string) []frame {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out []frame
	if err := w.stream(ctx, url, id, "", func(f frame) { out = append(out, f) }); err != nil {
		w.t.Fatalf("stream of %s: %v after %v", id, err, out)
	}
	return out
}

// follower reads a run's stream live in a goroutine until the stream
// breaks or ends, keeping the frames.
type follower struct {
	mu     sync.Mutex
	frames []frame
	err    error
	done   chan struct{}
}

func (w *world) follow(url, id string) *follower {
	fl := &follower{done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	w.t.Cleanup(func() { cancel(); <-fl.done })
	go func() {
		defer close(fl.done)
		err := w.stream(ctx, url, id, "", func(f frame) {
			fl.mu.Lock()
			fl.frames = append(fl.frames, f)
			fl.mu.Unlock()
		})
		fl.mu.Lock()
		fl.err = err
		fl.mu.Unlock()
	}()
	return fl
}

// wait returns the frames once the stream has ended or broken (at most
// 30 s after a kill, for the connection to be seen closed).
func (fl *follower) wait(t *testing.T) []frame {
	t.Helper()
	select {
	case <-fl.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the stream followed before the kill did not end 30 s after it")
	}
	fl.mu.Lock()
	defer fl.mu.Unlock()
	return append([]frame(nil), fl.frames...)
}

// counts are a history's frames counted by event and agent.
func counts(frames []frame) map[string]int {
	out := map[string]int{}
	for _, f := range frames {
		out[f.Event+"/"+f.Agent]++
	}
	return out
}

// checkSeqs reports frames whose ids do not rise.
func checkSeqs(t *testing.T, what string, frames []frame) {
	t.Helper()
	prev := int64(0)
	for i, f := range frames {
		seq, err := strconv.ParseInt(f.ID, 10, 64)
		if err != nil || seq <= prev {
			t.Errorf("%s: frame %d has id %q after %d: %v", what, i, f.ID, prev, frames)
			return
		}
		prev = seq
	}
}

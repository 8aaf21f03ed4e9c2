package main

import (
	"bufio"
	"encoding/json"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/servertest"
	"github.com/svc-dev/svc/internal/testutil"
)

// Many serve nodes (issue 12 part 5): serve processes sharing one Redis
// run store and one (external) broker act as one service.

// nodeLease is the run ownership lease of the nodes under test: short, so
// a SIGKILLed node's runs are resumed by the survivors within seconds.
const nodeLease = "2s"

// startNode starts a serve node on the shared store and broker.
func startNode(t *testing.T, name, specs, store string, b fleetBroker, extra ...string) *fleetProc {
	t.Helper()
	return startFleetServe(t, name, specs, filepath.Join(t.TempDir(), name), b,
		append([]string{"--store", store, "--node-lease", nodeLease}, extra...)...)
}

// nodeID is the run store node id the serve node logged at startup.
func nodeID(t *testing.T, p *fleetProc) string {
	t.Helper()
	m := regexp.MustCompile(`"msg":"run store"[^\n]*"node":"([^"]+)"`).FindStringSubmatch(p.stderr.String())
	if m == nil {
		t.Fatalf("%s logged no run store node id; stderr:\n%s", p.name, tail(p.stderr.String(), 4<<10))
	}
	return m[1]
}

// sseFrame is one frame of a run's event stream.
type sseFrame struct{ id, event string }

// streamFrames reads a run's event stream to its end, resuming after
// lastID when it is not empty (the Last-Event-ID header).
func (c *fleetClient) streamFrames(runID, lastID string) ([]sseFrame, error) {
	req, err := http.NewRequest(http.MethodGet, c.base+"/runs/"+runID+"/stream", nil)
	if err != nil {
		return nil, err
	}
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := c.c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var (
		frames []sseFrame
		cur    sseFrame
	)
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "id: "):
			cur.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "event: "):
			cur.event = strings.TrimPrefix(line, "event: ")
		case line == "" && cur.event != "":
			frames = append(frames, cur)
			cur = sseFrame{}
		}
	}
	return frames, sc.Err()
}

func eventsOf(frames []sseFrame) []string {
	out := make([]string, len(frames))
	for i, f := range frames {
		out[i] = f.event
	}
	return out
}

// runStatus is a run's status on a node.
func (c *fleetClient) runStatus(runID string) (state, reason string) {
	code, b, _, err := c.do(http.MethodGet, "/runs/"+runID+"/status", "")
	if err != nil || code != http.StatusOK {
		return "", ""
	}
	var st struct {
		State  string `json:"state"`
		Reason string `json:"reason"`
	}
	_ = json.Unmarshal(b, &st)
	return st.State, st.Reason
}

// TestManyServeNodes: nodes A and B (and later C) share a redis run store
// and a redis broker, with one worker. A run submitted on A is read and
// streamed (live, then resumed with Last-Event-ID) on B; a long run on A
// is cancelled on B; a third node starting does not interrupt A's live
// runs; A SIGKILLed has its running runs failed by B once its lease
// expires, the result naming A's node.
func TestManyServeNodes(t *testing.T) {
	t.Parallel()
	specs := writeSpecs(t, fleetSpecs)
	store := servertest.Redis(t)
	brokerURL := servertest.Redis(t)
	b := fleetBroker{serveArgs: []string{"--broker", brokerURL}, workerURL: brokerURL}
	a := startNode(t, "node-a", specs, store, b)
	nodeB := startNode(t, "node-b", specs, store, b)
	worker := startFleetWorker(t, "worker-1", specs, b)
	ca, cb := newFleetClient(t, a.url), newFleetClient(t, nodeB.url)

	t.Run("ReadAndStreamOnB", func(t *testing.T) {
		id := ca.mustSubmit("echo", "echo-1", `"hello"`)
		cb.waitState(id, "completed")
		code, body := cb.must(http.MethodGet, "/runs/"+id+"/result", "")
		if code != http.StatusOK || !strings.Contains(string(body), "hello") {
			t.Fatalf("result on B: %d %s", code, body)
		}
		all, err := cb.streamFrames(id, "")
		if err != nil || len(all) < 2 {
			t.Fatalf("stream on B: %v %v", all, err)
		}
		rest, err := cb.streamFrames(id, all[0].id)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := strings.Join(eventsOf(rest), ","), strings.Join(eventsOf(all[1:]), ","); got != want || rest[0].id != all[1].id {
			t.Errorf("stream on B resumed after %s: %v, want %v", all[0].id, rest, all[1:])
		}
	})

	t.Run("CancelOnB", func(t *testing.T) {
		id := ca.mustSubmit("slow", "slow-cancel", `"wait"`)
		cb.waitState(id, "running")
		// "running" is the publisher's word: the task may still be on the
		// broker, and a cancel that reaches the worker first has it skip
		// the task (skipped_cancelled), which is right but not what this
		// checks. Cancel once the worker runs it.
		testutil.Within(t, fleetWait, "the worker to start the run's task", func() bool {
			return worker.hasEvent("agent_spawned", "slow-cancel", "")
		})
		live := make(chan []sseFrame, 1)
		go func() {
			frames, _ := cb.streamFrames(id, "")
			live <- frames
		}()
		if code, body := cb.must(http.MethodPost, "/runs/"+id+"/cancel", ""); code/100 != 2 {
			t.Fatalf("cancel on B: %d %s", code, body)
		}
		ca.waitState(id, "cancelled")
		select {
		case frames := <-live:
			if ev := eventsOf(frames); len(ev) == 0 || ev[len(ev)-1] != "run_cancelled" {
				t.Errorf("live stream on B: %v, want run_cancelled last", ev)
			}
		case <-time.After(fleetWait):
			t.Fatal("the live stream on B did not end after the cancel")
		}
		testutil.Within(t, fleetWait, "the worker to stop the cancelled run's task", func() bool {
			return worker.hasEvent("agent_failed", "slow-cancel", "CancelledError")
		})
	})

	// Started before node C: A's startup and C's must leave it running.
	survivor := ca.mustSubmit("slow", "slow-survivor", `"wait"`)
	cb.waitState(survivor, "running")

	t.Run("ThirdNodeLeavesRunsAlone", func(t *testing.T) {
		// Started, stopped and restarted (with a stable node id).
		for i := range 2 {
			c := startNode(t, "node-c", specs, store, b, "--node-id", "node-c")
			if id := nodeID(t, c); id != "node-c" {
				t.Errorf("node C's id %q, want node-c (--node-id)", id)
			}
			cc := newFleetClient(t, c.url)
			if i == 0 {
				// Past a lease of A's: its renewal is what keeps its runs alive.
				time.Sleep(3 * time.Second)
			}
			for _, cl := range []*fleetClient{ca, cb, cc} {
				if st, reason := cl.runStatus(survivor); st != "running" {
					t.Errorf("A's run seen on %s (C started %d times): %s (%s), want running", cl.base, i+1, st, reason)
				}
			}
			c.signal(t, syscall.SIGTERM)
			c.wait(t, fleetWait)
		}
		if st, reason := cb.runStatus(survivor); st != "running" {
			t.Errorf("A's run after C stopped: %s (%s), want running", st, reason)
		}
	})

	t.Run("NodesVisibleFromAnyNode", func(t *testing.T) {
		idA, idB := nodeID(t, a), nodeID(t, nodeB)
		for _, cl := range []*fleetClient{ca, cb} {
			st := runtimeStats(t, cl)
			var ids []string
			self := ""
			for _, n := range st.Nodes {
				ids = append(ids, n.NodeID)
				if n.Self {
					self = n.NodeID
				}
			}
			if !slices.Contains(ids, idA) || !slices.Contains(ids, idB) || slices.Contains(ids, "node-c") {
				t.Errorf("nodes on %s: %v, want %s and %s (C stopped)", cl.base, ids, idA, idB)
			}
			if want := map[*fleetClient]string{ca: idA, cb: idB}[cl]; self != want {
				t.Errorf("self on %s: %q, want %q", cl.base, self, want)
			}
			if _, ok := workerIn(st, "worker-1"); !ok {
				t.Errorf("%s does not list the worker", cl.base)
			}
		}
	})

	t.Run("KilledNodeRunsResumedBySurvivor", func(t *testing.T) {
		node := nodeID(t, a)
		a.kill(t)
		// Once A's lease expires, B claims A's run and resumes it (issue
		// 30): it runs again on the fleet, owned by B, rather than fail.
		testutil.Within(t, fleetWait, "B to resume the killed node's run", func() bool {
			code, body, _, err := cb.do(http.MethodGet, "/runs/"+survivor+"/status", "")
			if err != nil || code != http.StatusOK {
				return false
			}
			var st struct {
				State   string `json:"state"`
				Resumed int    `json:"resumed"`
			}
			_ = json.Unmarshal(body, &st)
			if st.State == "failed" {
				t.Fatalf("the killed node's run failed rather than resumed: %s", body)
			}
			return st.Resumed == 1 && st.State == "running"
		})
		testutil.Within(t, fleetWait, "B to log the runs it took over", func() bool {
			return strings.Contains(nodeB.stderr.String(), "runs of serve nodes whose lease expired taken over")
		})
		testutil.Within(t, fleetWait, "the worker to run the resumed run's task again", func() bool {
			return worker.countEvent("agent_spawned", "slow-survivor") >= 2
		})
		for _, n := range runtimeStats(t, cb).Nodes {
			if n.NodeID == node {
				t.Errorf("the killed node %s is still listed in /runtime/stats", node)
			}
		}
	})
}

// The node flags need a shared store, and a lease long enough to renew.
func TestServeNodeFlagsChecked(t *testing.T) {
	specs := writeSpecs(t, fleetSpecs)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--node-lease", "5s"}, "--node-lease and --node-id need a shared store"},
		{[]string{"--store", "memory", "--node-id", "api-1"}, "--node-lease and --node-id need a shared store"},
		{[]string{"--store", "redis://127.0.0.1:1", "--node-lease", "10ms"}, "10ms: must be at least 1s"},
	} {
		r := svcExec(t, nil, "", append([]string{"serve", "--specs", specs, "--port", "0", "--data-dir", t.TempDir()}, tc.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("svc serve %v: exit %d, stderr %q; want 2 and %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
}

// TestDuplicateNodeIDRefused: a second serve node given the --node-id of a
// live one on the same Redis run store refuses to start (exit 2, naming the
// id and its held lease); it would otherwise fail the first node's runs as
// its own.
func TestDuplicateNodeIDRefused(t *testing.T) {
	specs := writeSpecs(t, fleetSpecs)
	store := servertest.Redis(t)
	first := startServe(t, nil, "--specs", specs, "--store", store, "--node-id", "api-1", "--log-format", "json")
	r := svcExec(t, nil, "", "serve", "--specs", specs, "--port", "0", "--data-dir", t.TempDir(),
		"--store", store, "--node-id", "api-1")
	if r.code != 2 || !strings.Contains(r.stderr, "--node-id") || !strings.Contains(r.stderr, `"api-1"`) ||
		!strings.Contains(r.stderr, "lease is held") {
		t.Errorf("second serve with --node-id api-1: exit %d, stderr %q; want 2 and a message naming api-1 and its held lease", r.code, r.stderr)
	}
	if !strings.Contains(first.stderr.String(), `"node":"api-1"`) {
		t.Errorf("the first node does not run as api-1:\n%s", tail(first.stderr.String(), 4<<10))
	}
	// Another id joins the same store.
	startServe(t, nil, "--specs", specs, "--store", store, "--node-id", "api-2")
}

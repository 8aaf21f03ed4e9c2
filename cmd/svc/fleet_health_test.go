package main

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/internal/testutil"
)

// Issue 12 parts 1-3 with real processes: --publish-events (the
// BrokerEventBridge on the workers) and the fleet's health in GET
// /runtime/stats and `svc status --workers`, on two serve nodes sharing the
// broker.
func TestFleetEventsAndHealth(t *testing.T) {
	t.Parallel()
	specs := writeSpecs(t, fleetSpecs)
	for _, b := range fleetBrokers {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			t.Run("PublishEvents", func(t *testing.T) { fleetPublishEvents(t, specs, b.setup(t)) })
			t.Run("Health", func(t *testing.T) { fleetHealth(t, specs, b.setup(t)) })
		})
	}
}

// secondNode is the broker flags of another serve node of the same fleet:
// it connects to the broker the first one uses (the embedded one included).
func secondNode(b fleetBroker) fleetBroker {
	return fleetBroker{serveArgs: []string{"--broker", b.workerURL}, workerURL: b.workerURL}
}

// fleetPublishEvents: node A (--publish-events) gets the worker's
// agent_spawned and agent_completed of its task in its log and its event
// store; node B (without the flag) gets only its agent_dispatched, and
// neither gets the other's task.
func fleetPublishEvents(t *testing.T, specs string, b fleetBroker) {
	a := startFleetServe(t, "serve-a", specs, filepath.Join(t.TempDir(), "a"), b, "--publish-events")
	nodeB := startFleetServe(t, "serve-b", specs, filepath.Join(t.TempDir(), "b"), secondNode(b))
	startFleetWorker(t, "worker-1", specs, b)
	ca, cb := newFleetClient(t, a.url), newFleetClient(t, nodeB.url)

	if code, body := ca.must(http.MethodPost, "/agents/echo/run", `{"id":"task-a","input":1}`); code != http.StatusOK {
		t.Fatalf("run on A: %d %s", code, body)
	}
	if code, body := cb.must(http.MethodPost, "/agents/echo/run", `{"id":"task-b","input":2}`); code != http.StatusOK {
		t.Fatalf("run on B: %d %s", code, body)
	}
	testutil.Within(t, fleetWait, "A's log to show the worker's events of task-a", func() bool {
		return a.hasEvent("agent_spawned", "task-a", "") && a.hasEvent("agent_completed", "task-a", "")
	})
	testutil.Within(t, fleetWait, "A's event store to hold the relayed agent_completed", func() bool {
		code, body := ca.must(http.MethodGet, "/events?event_type=agent_completed", "")
		var evs []svc.RuntimeEvent
		if code != http.StatusOK || json.Unmarshal(body, &evs) != nil {
			return false
		}
		return slices.ContainsFunc(evs, func(ev svc.RuntimeEvent) bool {
			return ev.TaskID == "task-a" && ev.Payload["backend"] != "local"
		})
	})
	if !nodeB.hasEvent("agent_dispatched", "task-b", "") {
		t.Error("B did not log agent_dispatched of its task")
	}
	for _, msg := range []string{"agent_spawned", "agent_completed"} {
		if nodeB.hasEvent(msg, "task-b", "") || nodeB.hasEvent(msg, "task-a", "") {
			t.Errorf("B (without --publish-events) logged %s of a task that ran on the worker", msg)
		}
		if a.hasEvent(msg, "task-b", "") {
			t.Errorf("A logged %s of B's task", msg)
		}
	}
}

func runtimeStats(t *testing.T, c *fleetClient) svc.RuntimeStats {
	t.Helper()
	code, body := c.must(http.MethodGet, "/runtime/stats", "")
	var st svc.RuntimeStats
	if code != http.StatusOK || json.Unmarshal(body, &st) != nil {
		t.Fatalf("GET /runtime/stats: %d %s", code, body)
	}
	return st
}

func workerIn(st svc.RuntimeStats, id string) (svc.WorkerStatus, bool) {
	for _, w := range st.Workers {
		if w.RuntimeID == id {
			return w, true
		}
	}
	return svc.WorkerStatus{}, false
}

// fleetHealth: two workers (heartbeat 1 s) seen by both serve nodes
// (stale after 2 s, down after 5 s): healthy with their agents, cap and
// in_flight; the SIGKILLed one turns stale, then down; the one stopped
// cleanly is down at once, with worker_stopped; `svc status --workers`
// prints them.
func fleetHealth(t *testing.T, specs string, b fleetBroker) {
	thresholds := []string{"--worker-stale-after", "2s", "--worker-down-after", "5s"}
	a := startFleetServe(t, "serve-a", specs, filepath.Join(t.TempDir(), "a"), b, thresholds...)
	nodeB := startFleetServe(t, "serve-b", specs, filepath.Join(t.TempDir(), "b"), secondNode(b), thresholds...)
	kill := startFleetWorker(t, "w-kill", specs, b, "--concurrency", "4")
	stop := startFleetWorker(t, "w-stop", specs, b, "--concurrency", "3")
	ca, cb := newFleetClient(t, a.url), newFleetClient(t, nodeB.url)

	for _, c := range []*fleetClient{ca, cb} {
		testutil.Within(t, fleetWait, "both workers healthy on "+c.base, func() bool {
			st := runtimeStats(t, c)
			k, ok1 := workerIn(st, "w-kill")
			s, ok2 := workerIn(st, "w-stop")
			return ok1 && ok2 && k.Status == svc.WorkerHealthy && s.Status == svc.WorkerHealthy
		})
		st := runtimeStats(t, c)
		k, _ := workerIn(st, "w-kill")
		s, _ := workerIn(st, "w-stop")
		if k.Concurrency != 4 || s.Concurrency != 3 || !slices.Equal(k.Agents, []string{"echo", "nap", "slow", "steady"}) || k.Stopped {
			t.Errorf("%s: workers = %+v, %+v", c.base, k, s)
		}
	}

	// A task in flight shows in the next heartbeat, and goes with it.
	run := ca.mustSubmit("slow", "parked", "1")
	inFlight := func() int64 {
		st := runtimeStats(t, ca)
		k, _ := workerIn(st, "w-kill")
		s, _ := workerIn(st, "w-stop")
		return k.InFlight + s.InFlight
	}
	testutil.Within(t, fleetWait, "in_flight 1", func() bool { return inFlight() == 1 })
	if code, body := ca.must(http.MethodPost, "/runs/"+run+"/cancel", ""); code != http.StatusNoContent {
		t.Fatalf("cancel: %d %s", code, body)
	}
	testutil.Within(t, fleetWait, "in_flight 0", func() bool { return inFlight() == 0 })

	// SIGKILL: no worker_stopped; healthy → stale → down by the thresholds.
	kill.kill(t)
	var seen []string
	testutil.Within(t, fleetWait, "the killed worker down", func() bool {
		w, _ := workerIn(runtimeStats(t, ca), "w-kill")
		if len(seen) == 0 || seen[len(seen)-1] != w.Status {
			seen = append(seen, w.Status)
		}
		return w.Status == svc.WorkerDown
	})
	if !slices.Equal(seen[len(seen)-2:], []string{svc.WorkerStale, svc.WorkerDown}) {
		t.Errorf("the killed worker went %v, want stale then down", seen)
	}
	if w, _ := workerIn(runtimeStats(t, cb), "w-kill"); w.Stopped {
		t.Errorf("B says the killed worker sent worker_stopped: %+v", w)
	}

	// SIGTERM: a clean stop is down at once, with worker_stopped, on both
	// nodes (long before the 5 s of silence that would make it down).
	stop.signal(t, syscall.SIGTERM)
	if code := stop.wait(t, fleetWait); code != 0 {
		t.Fatalf("w-stop exited with %d", code)
	}
	for _, c := range []*fleetClient{ca, cb} {
		testutil.Within(t, fleetWait, "w-stop down on "+c.base, func() bool {
			w, _ := workerIn(runtimeStats(t, c), "w-stop")
			return w.Stopped
		})
		if w, _ := workerIn(runtimeStats(t, c), "w-stop"); w.Status != svc.WorkerDown {
			t.Errorf("%s: a worker that stopped cleanly is %s", c.base, w.Status)
		}
	}

	r := svcExec(t, nil, "", "status", "--workers", "--url", a.url+"/events/stream")
	if r.code != 0 {
		t.Fatalf("svc status --workers: %d %s", r.code, r.stderr)
	}
	for _, want := range []string{
		"worker runtime_id=w-kill status=down in_flight=0 concurrency_cap=4 agents=echo,nap,slow,steady ",
		"worker runtime_id=w-stop status=down in_flight=0 concurrency_cap=3 agents=echo,nap,slow,steady ",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("svc status --workers printed:\n%s\nwant a line starting %q", r.stdout, want)
		}
	}
	if !strings.Contains(r.stdout, "worker_stopped=true\n") || !strings.Contains(r.stdout, "worker_stopped=false\n") {
		t.Errorf("svc status --workers printed:\n%s\nwant worker_stopped for w-stop only", r.stdout)
	}
}

// The fleet flags of serve are refused, with exit status 2 and the flag
// named, where they cannot apply.
func TestServeFleetFlagsChecked(t *testing.T) {
	specs := writeSpecs(t, fleetSpecs)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--publish-events"}, "--publish-events needs --broker"},
		{[]string{"--worker-stale-after", "5s"}, "--worker-stale-after needs --broker"},
		{[]string{"--broker", "memory://", "--worker-stale-after", "10s", "--worker-down-after", "5s"}, "want 0 < stale < down"},
	} {
		r := svcExec(t, nil, "", append([]string{"serve", "--specs", specs, "--port", "0", "--data-dir", t.TempDir()}, tc.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("svc serve %v: exit %d, stderr %q; want 2 and %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
	r := svcExec(t, nil, "", "status", "--workers", "--url", "ftp://x")
	if r.code != 2 || !strings.Contains(r.stderr, "--url") {
		t.Errorf("svc status --workers with a bad --url: exit %d, %q", r.code, r.stderr)
	}
}

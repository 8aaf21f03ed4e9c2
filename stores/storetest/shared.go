package storetest

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/internal/testutil"
)

// SharedLease is the node lease the Shared suite opens its stores with:
// short, so a killed node's runs are swept within a test's patience.
const SharedLease = 300 * time.Millisecond

// Opener opens one node's Store of a shared backend: node is its NodeID,
// lease its LeaseTTL. kill stops the node's lease renewals without giving
// the lease up, as a SIGKILL would; the store is closed by the suite.
type Opener func(t *testing.T, node string, lease time.Duration) (s svc.SharedRunStore, kill func())

// Shared runs the ownership contract of svc.SharedRunStore: backend
// returns an Opener whose stores all share one fresh, empty backend (a
// Redis key prefix, say).
func Shared(t *testing.T, backend func(t *testing.T) Opener) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, open Opener)
	}{
		{"InterruptLeavesLiveNodesRuns", testSharedInterruptLeavesLive},
		{"SweepLeavesOwnRuns", testSharedSweepLeavesOwn},
		{"KilledNodeSwept", testSharedKilledNodeSwept},
		{"ClosedNodeSweptAtOnce", testSharedClosedNodeSwept},
		{"RestartedNodeInterruptsItsOwn", testSharedRestartedNode},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			open := backend(t)
			tc.fn(t, func(t *testing.T, node string, lease time.Duration) (svc.SharedRunStore, func()) {
				s, kill := open(t, node, lease)
				t.Cleanup(func() {
					if err := s.Close(); err != nil {
						t.Errorf("Close %s: %v", node, err)
					}
				})
				if s.NodeID() != node || s.LeaseTTL() != lease {
					t.Fatalf("NodeID, LeaseTTL = %q, %v; want %q, %v", s.NodeID(), s.LeaseTTL(), node, lease)
				}
				return s, kill
			})
		})
	}
}

// A node starting (Interrupt) and every node's Sweep leave the pending and
// running runs of another live node alone.
func testSharedInterruptLeavesLive(t *testing.T, open Opener) {
	a, _ := open(t, "node-a", SharedLease)
	drive(t, a, "pending", svc.RunPending)
	drive(t, a, "running", svc.RunRunning)
	b, _ := open(t, "node-b", SharedLease)
	n, err := b.Interrupt(t.Context())
	mustOK(t, "Interrupt of node B", err)
	if n != 0 {
		t.Errorf("node B's Interrupt = %d, want 0: node A is alive", n)
	}
	// Past several leases: A's renewals keep its runs.
	time.Sleep(3 * SharedLease)
	n, nodes, err := b.Sweep(t.Context())
	mustOK(t, "Sweep of node B", err)
	if n != 0 || len(nodes) != 0 {
		t.Errorf("node B's Sweep = %d %v, want 0: node A is alive", n, nodes)
	}
	for id, want := range map[string]svc.RunState{"pending": svc.RunPending, "running": svc.RunRunning} {
		if got := get(t, b, id); got.State != want {
			t.Errorf("node A's %s run after B started: %s (%s)", id, got.State, got.Reason)
		}
	}
}

// Sweep never fails the sweeping node's own runs.
func testSharedSweepLeavesOwn(t *testing.T, open Opener) {
	a, _ := open(t, "node-a", SharedLease)
	drive(t, a, "running", svc.RunRunning)
	n, _, err := a.Sweep(t.Context())
	mustOK(t, "Sweep", err)
	if got := get(t, a, "running"); n != 0 || got.State != svc.RunRunning {
		t.Errorf("Sweep of the owner = %d, run %s; want 0, running", n, got.State)
	}
}

// The runs of a node whose lease expired are failed by another node's
// Sweep, as Interrupt fails them, the result naming the node; the live
// node's runs stay.
func testSharedKilledNodeSwept(t *testing.T, open Opener) {
	a, kill := open(t, "node-a", SharedLease)
	drive(t, a, "a-running", svc.RunRunning)
	mustOK(t, "SetProgress", a.SetProgress(t.Context(), "a-running", svc.RunProgress{Total: 2, Running: 1}))
	drive(t, a, "a-pending", svc.RunPending)
	b, _ := open(t, "node-b", SharedLease)
	drive(t, b, "b-running", svc.RunRunning)
	before := get(t, b, "a-running")
	kill()
	total := 0
	var nodes []string
	testutil.Within(t, 20*time.Second, "node B's Sweep to fail node A's runs", func() bool {
		n, ns, err := b.Sweep(t.Context())
		mustOK(t, "Sweep", err)
		total += n
		nodes = append(nodes, ns...)
		return total == 2
	})
	if !slices.Equal(slices.Compact(nodes), []string{"node-a"}) {
		t.Errorf("Sweep named nodes %v, want [node-a]", nodes)
	}
	got := get(t, b, "a-running")
	checkInterrupted(t, "node A's running run", got, before)
	var res svc.AgentResult
	if json.Unmarshal(got.Result, &res) != nil || res.Error == nil || !strings.Contains(res.Error.Message, "node-a") {
		t.Errorf("swept run's result %s: want its error to name node-a", got.Result)
	}
	evs := eventsOf(t, b, "a-running", 0)
	if last := evs[len(evs)-1]; last.Type != svc.RunRunFailed || last.Error != svc.ReasonInterrupted {
		t.Errorf("swept run's last event %+v, want run_failed (interrupted)", last)
	}
	if got := get(t, b, "a-pending"); got.State != svc.RunFailed {
		t.Errorf("node A's pending run: %s, want failed", got.State)
	}
	if got := get(t, b, "b-running"); got.State != svc.RunRunning {
		t.Errorf("node B's own run: %s, want running", got.State)
	}
	mustKind(t, "node A writing to its swept run", a.SetProgress(t.Context(), "a-running", svc.RunProgress{}), svc.ErrRunState)
}

// A node that closes gives its lease up: what it left unfinished is swept
// at once.
func testSharedClosedNodeSwept(t *testing.T, open Opener) {
	a, _ := open(t, "node-a", time.Hour)
	drive(t, a, "running", svc.RunRunning)
	b, _ := open(t, "node-b", SharedLease)
	mustOK(t, "Close node A", a.Close())
	n, nodes, err := b.Sweep(t.Context())
	mustOK(t, "Sweep", err)
	if n != 1 || !slices.Equal(nodes, []string{"node-a"}) {
		t.Errorf("Sweep after node A closed = %d %v, want 1 [node-a]", n, nodes)
	}
}

// A node restarted with the same id fails its earlier life's runs at
// start. After a kill it can start only once the old lease has expired (a
// live lease of its id is another node's: see redisstore.NodeInUseError);
// its runs are then its own to fail at once, before any other node's
// Sweep.
func testSharedRestartedNode(t *testing.T, open Opener) {
	a, kill := open(t, "node-a", SharedLease)
	drive(t, a, "running", svc.RunRunning)
	before := get(t, a, "running")
	kill()
	if nl, ok := a.(svc.NodeLister); ok {
		testutil.Eventually(t, "the killed node's lease to expire", func() bool {
			nodes, err := nl.ServeNodes(t.Context())
			return err == nil && len(nodes) == 0
		})
	} else {
		time.Sleep(3 * SharedLease)
	}
	a2, _ := open(t, "node-a", time.Hour)
	n, err := a2.Interrupt(t.Context())
	mustOK(t, "Interrupt", err)
	if n != 1 {
		t.Errorf("Interrupt of the restarted node = %d, want 1", n)
	}
	checkInterrupted(t, "the earlier life's run", get(t, a2, "running"), before)
}

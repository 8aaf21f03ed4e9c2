package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
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
		{"ClaimExpired", testSharedClaimExpired},
		{"RestartedNodeRecoversItsOwn", testSharedRestartedNodeRecovers},
		{"ClaimRace", testSharedClaimRace},
		{"BatchClaim", testSharedBatchClaim},
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

// awaitExpired waits until the lease of a killed node has expired.
func awaitExpired(t *testing.T, s svc.SharedRunStore, node string) {
	t.Helper()
	if nl, ok := s.(svc.NodeLister); ok {
		testutil.Eventually(t, "the lease of "+node+" to expire", func() bool {
			nodes, err := nl.ServeNodes(t.Context())
			return err == nil && !slices.ContainsFunc(nodes, func(n svc.ServeNode) bool { return n.NodeID == node })
		})
		return
	}
	time.Sleep(3 * SharedLease)
}

// ClaimExpired takes a killed node's runs once its lease expired: those
// with a Task are claimed (Resumed 1, state and all else kept), those
// without are failed as Sweep fails them; a live node's runs, the
// claimer's own included, are left. The claimer then owns what it
// claimed: a third node's ClaimExpired finds nothing while the claimer
// lives, and claims them again (Resumed 2) once it is killed.
func testSharedClaimExpired(t *testing.T, open Opener) {
	ctx := t.Context()
	a, killA := open(t, "node-a", SharedLease)
	createTask(t, a, "a-pending", ts(1))
	driveTask(t, a, "a-running", svc.RunRunning, ts(2))
	mustOK(t, "SetProgress", a.SetProgress(ctx, "a-running", svc.RunProgress{Total: 2, Running: 1}))
	appendSteps(t, stepLog(t, a), "a-running", 1, step(svc.StepModelCall, "a", 0, `{"content":"x"}`))
	drive(t, a, "a-no-task", svc.RunRunning)
	driveTask(t, a, "a-done", svc.RunCompleted, ts(3))
	b, killB := open(t, "node-b", SharedLease)
	driveTask(t, b, "b-running", svc.RunRunning, ts(4))
	c, _ := open(t, "node-c", SharedLease)

	// Node A is alive: nothing to claim.
	if claimed, n, err := b.ClaimExpired(ctx); err != nil || len(claimed) != 0 || n != 0 {
		t.Fatalf("ClaimExpired while node A lives = %v, %d, %v; want nothing", idsOf(claimed), n, err)
	}
	before := map[string]svc.RunRecord{}
	for _, id := range []string{"a-pending", "a-running", "a-no-task", "a-done", "b-running"} {
		before[id] = get(t, b, id)
	}
	killA()
	awaitExpired(t, b, "node-a")
	claimed, n, err := b.ClaimExpired(ctx)
	mustOK(t, "ClaimExpired", err)
	if !slices.Equal(idsOf(claimed), []string{"a-pending", "a-running"}) || n != 1 {
		t.Fatalf("ClaimExpired after node A's lease expired = %v, %d; want [a-pending a-running], 1", idsOf(claimed), n)
	}
	for _, rec := range claimed {
		checkClaimed(t, b, "node B's claim of "+rec.RunID, rec, before[rec.RunID], 1)
	}
	got := get(t, b, "a-no-task")
	checkInterrupted(t, "node A's run without a task", got, before["a-no-task"])
	var res svc.AgentResult
	if json.Unmarshal(got.Result, &res) != nil || res.Error == nil || !strings.Contains(res.Error.Message, "node-a") {
		t.Errorf("failed run's result %s: want its error to name node-a", got.Result)
	}
	checkRecord(t, "a terminal run", get(t, b, "a-done"), before["a-done"])
	checkRecord(t, "node B's own run", get(t, b, "b-running"), before["b-running"])
	if claimed, n, err := b.ClaimExpired(ctx); err != nil || len(claimed) != 0 || n != 0 {
		t.Errorf("a second ClaimExpired = %v, %d, %v; want nothing (node B owns them)", idsOf(claimed), n, err)
	}
	if claimed, n, err := c.ClaimExpired(ctx); err != nil || len(claimed) != 0 || n != 0 {
		t.Errorf("node C's ClaimExpired while node B lives = %v, %d, %v; want nothing", idsOf(claimed), n, err)
	}
	// Node B owns them now: they go on under it, and its Sweep leaves them.
	mustOK(t, "SetState of a claimed run", b.SetState(ctx, "a-pending", svc.RunRunning, "", nil))
	if n, _, err := c.Sweep(ctx); err != nil || n != 0 {
		t.Errorf("node C's Sweep while node B lives = %d, %v; want 0", n, err)
	}

	killB()
	awaitExpired(t, c, "node-b")
	claimed, n, err = c.ClaimExpired(ctx)
	mustOK(t, "node C's ClaimExpired", err)
	if !slices.Equal(idsOf(claimed), []string{"a-pending", "a-running", "b-running"}) || n != 0 {
		t.Fatalf("node C's ClaimExpired after node B's lease expired = %v, %d; want [a-pending a-running b-running], 0", idsOf(claimed), n)
	}
	for _, rec := range claimed {
		want := 2
		if rec.RunID == "b-running" {
			want = 1
		}
		if rec.Resumed != want || !slices.Equal(rec.Task, taskOf(rec.RunID)) {
			t.Errorf("node C's claim of %s: Resumed %d, Task %q; want %d, its task", rec.RunID, rec.Resumed, rec.Task, want)
		}
	}
	if got := get(t, c, "a-pending"); got.State != svc.RunRunning {
		t.Errorf("a-pending after node C's claim: %s, want running (as node B left it)", got.State)
	}
}

// A node restarted with the same id claims at start (Recover) its earlier
// life's runs with a Task, and fails the others.
func testSharedRestartedNodeRecovers(t *testing.T, open Opener) {
	a, kill := open(t, "node-a", SharedLease)
	driveTask(t, a, "with-task", svc.RunRunning, ts(1))
	drive(t, a, "without", svc.RunRunning)
	before := get(t, a, "with-task")
	kill()
	b, _ := open(t, "node-b", SharedLease)
	awaitExpired(t, b, "node-a")
	a2, _ := open(t, "node-a", time.Hour)
	claimed, n, err := resumable(t, a2).Recover(t.Context())
	mustOK(t, "Recover", err)
	if !slices.Equal(idsOf(claimed), []string{"with-task"}) || n != 1 {
		t.Fatalf("Recover of the restarted node = %v, %d; want [with-task], 1", idsOf(claimed), n)
	}
	checkClaimed(t, a2, "the earlier life's run", claimed[0], before, 1)
	if got := get(t, a2, "without"); got.State != svc.RunFailed || got.Reason != svc.ReasonInterrupted {
		t.Errorf("the earlier life's run without a task: %s (%s), want failed (interrupted)", got.State, got.Reason)
	}
	// The restarted node owns it: another node's claim finds nothing.
	if claimed, n, err := b.ClaimExpired(t.Context()); err != nil || len(claimed) != 0 || n != 0 {
		t.Errorf("node B's ClaimExpired after node A recovered = %v, %d, %v; want nothing", idsOf(claimed), n, err)
	}
}

// ClaimRaceRounds and ClaimRaceRuns size the race of ClaimRace.
const (
	ClaimRaceRounds = 12
	ClaimRaceRuns   = 40
)

// Two live nodes claiming a killed node's runs at once: each run goes to
// exactly one of them, claimed once (Resumed 1), whether both call
// ClaimExpired or one of them is starting (Recover). Many rounds, each
// with a node killed with many runs, so an unatomic claim shows.
func testSharedClaimRace(t *testing.T, open Opener) {
	b, _ := open(t, "node-b", SharedLease)
	c, _ := open(t, "node-c", SharedLease)
	for round := range ClaimRaceRounds {
		dead := fmt.Sprintf("node-dead-%d", round)
		a, kill := open(t, dead, SharedLease)
		var ids []string
		for i := range ClaimRaceRuns {
			id := fmt.Sprintf("r%d-%02d", round, i)
			driveTask(t, a, id, []svc.RunState{svc.RunPending, svc.RunRunning}[i%2], ts(i))
			ids = append(ids, id)
		}
		kill()
		awaitExpired(t, b, dead)
		claimers := []func(context.Context) ([]svc.RunRecord, int, error){b.ClaimExpired, c.ClaimExpired}
		names := []string{"node-b", "node-c"}
		if round%2 == 1 {
			// A node starting: its Recover takes the runs of dead nodes
			// too (and would take its own earlier life's, which it has
			// none of).
			d, _ := open(t, fmt.Sprintf("node-start-%d", round), SharedLease)
			claimers[0], names[0] = resumable(t, d).Recover, d.NodeID()
		}
		var wg sync.WaitGroup
		got := make([][]svc.RunRecord, 2)
		errs := make([]error, 2)
		start := make(chan struct{})
		for i, claim := range claimers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				got[i], _, errs[i] = claim(context.Background())
			}()
		}
		close(start)
		wg.Wait()
		owner := map[string]string{}
		for i, node := range names {
			mustOK(t, node+"'s claim", errs[i])
			for _, rec := range got[i] {
				if prev, ok := owner[rec.RunID]; ok {
					t.Errorf("round %d: %s claimed by both %s and %s", round, rec.RunID, prev, node)
				}
				owner[rec.RunID] = node
				if rec.Resumed != 1 {
					t.Errorf("round %d: %s claimed with Resumed %d, want 1", round, rec.RunID, rec.Resumed)
				}
			}
		}
		for _, id := range ids {
			if _, ok := owner[id]; !ok {
				t.Errorf("round %d: %s claimed by neither node", round, id)
			}
			if rec := get(t, b, id); rec.Resumed != 1 || rec.State.Terminal() {
				t.Errorf("round %d: %s after the race: Resumed %d, state %s; want 1, unfinished", round, id, rec.Resumed, rec.State)
			}
		}
		if t.Failed() {
			return
		}
		t.Logf("round %d: %s claimed %d, %s %d", round, names[0], len(got[0]), names[1], len(got[1]))
	}
}

package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/servertest"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/internal/testutil"
	"github.com/svc-dev/svc/stores/redisstore"
	"github.com/svc-dev/svc/stores/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// startRedis runs a throwaway redis-server for the test (internal/servertest)
// and returns its redis:// URL.
func startRedis(t testing.TB) string { return servertest.Redis(t) }

var prefixes atomic.Int64

// uniquePrefix keeps the stores of one server apart.
func uniquePrefix() string { return fmt.Sprintf("test%d", prefixes.Add(1)) }

// TestShared runs the ownership contract on nodes sharing a prefix.
func TestShared(t *testing.T) {
	t.Parallel() // its own server or files: the suites overlap their waits
	url := startRedis(t)
	storetest.Shared(t, func(t *testing.T) storetest.Opener {
		prefix := uniquePrefix()
		return func(t *testing.T, node string, lease time.Duration) (svc.SharedRunStore, func()) {
			s, err := redisstore.Open(redisstore.Options{URL: url, KeyPrefix: prefix, NodeID: node, LeaseTTL: lease})
			if err != nil {
				t.Fatal(err)
			}
			return s, s.StopLease
		}
	})
}

// A run without an owner (an older build made it, and may still be running
// it) is left alone by Sweep and failed by a node's start (Interrupt), as
// before ownership.
func TestOwnerlessRun(t *testing.T) {
	url := startRedis(t)
	prefix := uniquePrefix()
	s := open(t, redisstore.Options{URL: url, KeyPrefix: prefix, LeaseTTL: time.Second})
	ctx := t.Context()
	if err := s.Create(ctx, svc.RunRecord{RunID: "old", Target: "echo", Kind: svc.TargetAgent}); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(mustParse(t, url))
	defer c.Close()
	if err := c.HDel(ctx, prefix+":old", "owner").Err(); err != nil {
		t.Fatal(err)
	}
	if n, _, err := s.Sweep(ctx); err != nil || n != 0 {
		t.Fatalf("Sweep of an ownerless run = %d, %v; want 0", n, err)
	}
	if n, err := s.Interrupt(ctx); err != nil || n != 1 {
		t.Fatalf("Interrupt of an ownerless run = %d, %v; want 1", n, err)
	}
	if rec, err := s.Get(ctx, "old"); err != nil || rec.State != svc.RunFailed || rec.Reason != svc.ReasonInterrupted {
		t.Fatalf("ownerless run after Interrupt: %+v %v", rec, err)
	}
}

func mustParse(t *testing.T, url string) *redis.Options {
	t.Helper()
	o, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func open(t testing.TB, opts redisstore.Options) *redisstore.Store {
	t.Helper()
	s, err := redisstore.Open(opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// rawClient is a plain client on the server, to look at keys.
func rawClient(t testing.TB, url string) *redis.Client {
	t.Helper()
	o, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestReopen runs the persistent stores' reopen suite on Redis: a
// reopened store is a new Store of the same node id on the same prefix
// (the dir names the prefix), as a restarted node is.
func TestReopen(t *testing.T) {
	url := startRedis(t)
	prefixOf := map[string]string{}
	storetest.RunReopen(t, func(t *testing.T, dir string) svc.RunStore {
		if prefixOf[dir] == "" {
			prefixOf[dir] = uniquePrefix()
		}
		return open(t, redisstore.Options{URL: url, KeyPrefix: prefixOf[dir], NodeID: "node-" + prefixOf[dir]})
	})
}

// A run without an owner (an older build's) is claimed by a node's start
// (Recover) when it has a task, as Interrupt would fail it, and left alone
// by ClaimExpired, as by Sweep; the claim makes it the node's.
func TestOwnerlessRunRecovered(t *testing.T) {
	url := startRedis(t)
	prefix := uniquePrefix()
	s := open(t, redisstore.Options{URL: url, KeyPrefix: prefix, NodeID: "node-a", LeaseTTL: time.Second})
	ctx := t.Context()
	for _, id := range []string{"old-task", "old-none"} {
		rec := svc.RunRecord{RunID: id, Target: "echo", Kind: svc.TargetAgent}
		if id == "old-task" {
			rec.Task = []byte(`{"input":"x"}`)
		}
		if err := s.Create(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	c := rawClient(t, url)
	for _, id := range []string{"old-task", "old-none"} {
		if err := c.HDel(ctx, prefix+":"+id, "owner").Err(); err != nil {
			t.Fatal(err)
		}
	}
	if claimed, n, err := s.ClaimExpired(ctx); err != nil || len(claimed) != 0 || n != 0 {
		t.Fatalf("ClaimExpired of ownerless runs = %v, %d, %v; want nothing", claimed, n, err)
	}
	claimed, n, err := s.Recover(ctx)
	if err != nil || len(claimed) != 1 || claimed[0].RunID != "old-task" || claimed[0].Resumed != 1 || n != 1 {
		t.Fatalf("Recover of ownerless runs = %+v, %d, %v; want old-task claimed, old-none failed", claimed, n, err)
	}
	if owner := c.HGet(ctx, prefix+":old-task", "owner").Val(); owner != "node-a" {
		t.Errorf("claimed ownerless run's owner = %q, want node-a", owner)
	}
	if rec, err := s.Get(ctx, "old-none"); err != nil || rec.State != svc.RunFailed || rec.Reason != svc.ReasonInterrupted {
		t.Errorf("ownerless run without a task after Recover: %+v %v", rec, err)
	}
}

// A record written before runs kept their task (no task, no resumed
// field) reads as a run that cannot be resumed, never resumed.
func TestRecordWithoutTask(t *testing.T) {
	url := startRedis(t)
	prefix := uniquePrefix()
	s := open(t, redisstore.Options{URL: url, KeyPrefix: prefix})
	ctx := t.Context()
	c := rawClient(t, url)
	if err := c.HSet(ctx, prefix+":old", "run_id", "old", "target", "echo", "kind", "agent", "state", "running",
		"reason", "", "created_at", "2025-03-14T15:09:26Z", "updated_at", "2025-03-14T15:09:26Z", "seq", "0").Err(); err != nil {
		t.Fatal(err)
	}
	c.SAdd(ctx, prefix+"::active", "old")
	rec, err := s.Get(ctx, "old")
	if err != nil || rec.Task != nil || rec.Resumed != 0 || rec.Steps != 0 || rec.State != svc.RunRunning {
		t.Fatalf("old record = %+v, %v; want running, no task, resumed 0, no steps", rec, err)
	}
	if claimed, n, err := s.Recover(ctx); err != nil || len(claimed) != 0 || n != 1 {
		t.Errorf("Recover of an old record = %v, %d, %v; want it failed", claimed, n, err)
	}
	if err := c.HSet(ctx, prefix+":bad", "run_id", "bad", "state", "running", "created_at", "2025-03-14T15:09:26Z",
		"updated_at", "2025-03-14T15:09:26Z", "resumed", "many").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "bad"); err == nil {
		t.Error("Get of a record with a bad resumed count succeeded")
	}
}

func TestContract(t *testing.T) {
	t.Parallel() // its own server or files: the suites overlap their waits
	url := startRedis(t)
	storetest.Run(t, func(t *testing.T) svc.RunStore {
		return open(t, redisstore.Options{URL: url, KeyPrefix: uniquePrefix()})
	})
}

// The same suite with a TTL and a store given a client: the TTL must not
// change anything while runs live, and a given client must work throughout.
func TestContractClientTTL(t *testing.T) {
	t.Parallel() // its own server or files: the suites overlap their waits
	url := startRedis(t)
	c := rawClient(t, url)
	storetest.Run(t, func(t *testing.T) svc.RunStore {
		return open(t, redisstore.Options{Client: c, KeyPrefix: uniquePrefix(), TTL: time.Hour})
	})
}

func TestOpenErrors(t *testing.T) {
	url := startRedis(t)
	c := rawClient(t, url)
	closed := freeClosedPort(t)
	tests := []struct {
		name  string
		opts  redisstore.Options
		kind  error
		want  string // in the message
		avoid string // never in the message
	}{
		{"neither URL nor client", redisstore.Options{}, svc.ErrSpecValidation, "exactly one of URL and Client", ""},
		{"both URL and client", redisstore.Options{URL: url, Client: c}, svc.ErrSpecValidation, "exactly one of URL and Client", ""},
		{"negative TTL", redisstore.Options{URL: url, TTL: -time.Second}, svc.ErrSpecValidation, "negative TTL", ""},
		{"wrong scheme", redisstore.Options{URL: "http://127.0.0.1:6379"}, svc.ErrSpecValidation, "bad URL", ""},
		{"not a URL", redisstore.Options{URL: "::nonsense"}, svc.ErrSpecValidation, "bad URL", ""},
		{"bad db", redisstore.Options{URL: "redis://:hunter2@127.0.0.1:6379/notanumber"}, svc.ErrSpecValidation, "bad URL", "hunter2"},
		{"nobody listening", redisstore.Options{URL: "redis://:hunter2@127.0.0.1:" + closed}, svc.ErrRuntime, "cannot reach redis at", "hunter2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := redisstore.Open(tc.opts)
			if err == nil {
				_ = s.Close()
				t.Fatal("Open succeeded")
			}
			if !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Open = %v (%s), want a %v saying %q", err, svc.KindOf(err), tc.kind, tc.want)
			}
			if tc.avoid != "" && strings.Contains(err.Error(), tc.avoid) {
				t.Errorf("Open error %q leaks %q", err, tc.avoid)
			}
		})
	}
	if err := c.Ping(t.Context()).Err(); err != nil {
		t.Errorf("the client given to a refused Open no longer works: %v", err)
	}
}

// freeClosedPort is a loopback port nobody listens on (any more).
func freeClosedPort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

func TestKeyPrefix(t *testing.T) {
	url := startRedis(t)
	raw := rawClient(t, url)
	ctx := t.Context()
	tests := []struct{ in, want string }{
		{"", redisstore.DefaultKeyPrefix},
		{"app:runs", "app:runs"},
		{"app:runs:", "app:runs"},
		{"other::", "other"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			s := open(t, redisstore.Options{URL: url, KeyPrefix: tc.in})
			if got := s.KeyPrefix(); got != tc.want {
				t.Fatalf("KeyPrefix = %q, want %q", got, tc.want)
			}
			id := "run-" + uniquePrefix()
			if err := s.Create(ctx, svc.RunRecord{RunID: id, Target: "echo", Kind: "agent"}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Append(ctx, id, svc.RunEvent{Type: svc.RunAgentStarted}); err != nil {
				t.Fatal(err)
			}
			for key, typ := range map[string]string{tc.want + ":" + id: "hash", tc.want + ":" + id + ":events": "stream"} {
				if got := raw.Type(ctx, key).Val(); got != typ {
					t.Errorf("TYPE %s = %q, want %q", key, got, typ)
				}
			}
		})
	}
}

func TestRunIDWithColon(t *testing.T) {
	s := open(t, redisstore.Options{URL: startRedis(t), KeyPrefix: uniquePrefix()})
	ctx := t.Context()
	if err := s.Create(ctx, svc.RunRecord{RunID: "a:events", Target: "t"}); !errors.Is(err, svc.ErrSpecValidation) {
		t.Errorf("Create with ':' in the id = %v, want a SpecValidationError", err)
	}
	if err := s.Create(ctx, svc.RunRecord{RunID: "a", Target: "t"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "a:events"); !errors.Is(err, svc.ErrRegistry) {
		t.Errorf("Get of an id with ':' = %v, want a RegistryError", err)
	}
	if _, err := s.Stream(ctx, "a:events", 0); !errors.Is(err, svc.ErrRegistry) {
		t.Errorf("Stream of an id with ':' = %v, want a RegistryError", err)
	}
}

func TestTTL(t *testing.T) {
	url := startRedis(t)
	raw := rawClient(t, url)
	ctx := t.Context()
	ttlOf := func(t *testing.T, key string) time.Duration {
		t.Helper()
		d, err := raw.PTTL(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	tests := []struct {
		name string
		ttl  time.Duration
		end  func(s *redisstore.Store, id string) error
	}{
		{"completed", time.Minute, func(s *redisstore.Store, id string) error {
			return s.SetState(ctx, id, svc.RunCompleted, "", &svc.RunEvent{Type: svc.RunGroupCompleted})
		}},
		{"failed without final event", time.Minute, func(s *redisstore.Store, id string) error {
			return s.SetState(ctx, id, svc.RunFailed, "boom", nil)
		}},
		{"interrupted", time.Minute, func(s *redisstore.Store, _ string) error {
			_, err := s.Interrupt(ctx)
			return err
		}},
		{"no ttl", 0, func(s *redisstore.Store, id string) error {
			return s.SetState(ctx, id, svc.RunCancelled, "", &svc.RunEvent{Type: svc.RunRunCancelled})
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			prefix := uniquePrefix()
			s := open(t, redisstore.Options{URL: url, KeyPrefix: prefix, TTL: tc.ttl})
			const id = "r1"
			rec, evs, steps := prefix+":"+id, prefix+":"+id+":events", prefix+":"+id+":steps"
			if err := s.Create(ctx, svc.RunRecord{RunID: id, Target: "t", Kind: "agent"}); err != nil {
				t.Fatal(err)
			}
			if err := s.SetState(ctx, id, svc.RunRunning, "", nil); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Append(ctx, id, svc.RunEvent{Type: svc.RunAgentStarted}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.AppendSteps(ctx, id, svc.RunStep{Kind: svc.StepToolCall, Key: "a#0", Data: []byte(`1`)}); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{rec, evs, steps} {
				if d := ttlOf(t, k); d != -1 {
					t.Errorf("PTTL %s of a running run = %v, want none (-1)", k, d)
				}
			}
			if err := tc.end(s, id); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{rec, evs, steps} {
				d := ttlOf(t, k)
				if tc.ttl == 0 && d != -1 || tc.ttl > 0 && (d <= 0 || d > tc.ttl) {
					t.Errorf("PTTL %s of an ended run = %v, want %v", k, d, tc.ttl)
				}
			}
		})
	}

	// A short TTL really removes the run, its step log with it: the same
	// id created again starts with no steps.
	prefix := uniquePrefix()
	s := open(t, redisstore.Options{URL: url, KeyPrefix: prefix, TTL: 50 * time.Millisecond})
	if err := s.Create(ctx, svc.RunRecord{RunID: "r1", Target: "t"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendSteps(ctx, "r1", svc.RunStep{Kind: svc.StepModelCall, Key: "a#0", Data: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetState(ctx, "r1", svc.RunCancelled, "", nil); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "Get to give a RegistryError after a 50 ms TTL", func() bool {
		_, err := s.Get(ctx, "r1")
		return errors.Is(err, svc.ErrRegistry)
	})
	if n, err := raw.Exists(ctx, prefix+":r1:steps").Result(); err != nil || n != 0 {
		t.Errorf("the step log of an expired run: EXISTS = %d, %v; want 0", n, err)
	}
	if err := s.Create(ctx, svc.RunRecord{RunID: "r1", Target: "t"}); err != nil {
		t.Fatal(err)
	}
	if st, err := s.Steps(ctx, "r1", 0); err != nil || len(st) != 0 {
		t.Errorf("Steps of a run created again under an expired id = %+v, %v; want none", st, err)
	}
}

func TestCloseKeepsGivenClient(t *testing.T) {
	url := startRedis(t)
	c := rawClient(t, url)
	s := open(t, redisstore.Options{Client: c, KeyPrefix: uniquePrefix()})
	if err := s.Create(t.Context(), svc.RunRecord{RunID: "r1", Target: "t"}); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := s.Close(); err != nil {
			t.Fatalf("Close #%d: %v", i+1, err)
		}
	}
	if err := c.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("the given client after Close: %v", err)
	}
	if _, err := s.Get(t.Context(), "r1"); !errors.Is(err, svc.ErrShuttingDown) {
		t.Errorf("Get after Close = %v, want a ShuttingDownError", err)
	}
}

func TestCloseDisconnectsOwnClient(t *testing.T) {
	url := startRedis(t)
	raw := rawClient(t, url)
	name := "svc-" + uniquePrefix()
	s := open(t, redisstore.Options{URL: url + "?client_name=" + name, KeyPrefix: uniquePrefix()})
	ctx := t.Context()
	if err := s.Create(ctx, svc.RunRecord{RunID: "r1", Target: "t"}); err != nil {
		t.Fatal(err)
	}
	connected := func() bool {
		list, err := raw.ClientList(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		return strings.Contains(list, "name="+name+" ")
	}
	if !connected() {
		t.Fatalf("no connection named %s before Close", name)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the store's own connection to close after Close", func() bool { return !connected() })
}

// Two stores with their own clients, as two processes would have: one
// streams live what the other writes, and the state machine holds between
// them.
func TestCrossProcess(t *testing.T) {
	url := startRedis(t)
	prefix := uniquePrefix()
	writer := open(t, redisstore.Options{URL: url, KeyPrefix: prefix})
	reader := open(t, redisstore.Options{URL: url, KeyPrefix: prefix})
	ctx := t.Context()

	if err := writer.Create(ctx, svc.RunRecord{RunID: "r1", Target: "t", Kind: "group"}); err != nil {
		t.Fatal(err)
	}
	ch, err := reader.Stream(ctx, "r1", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := writer.SetState(ctx, "r1", svc.RunRunning, "", nil); err != nil {
		t.Fatal(err)
	}
	receive := func() (svc.RunEvent, bool) {
		select {
		case ev, ok := <-ch:
			return ev, ok
		case <-time.After(10 * time.Second):
			t.Fatal("the reader's stream stalled")
			return svc.RunEvent{}, false
		}
	}
	// One event at a time: each reaches the other store before the next is
	// written, so it is followed live, not replayed.
	for i := int64(1); i <= 3; i++ {
		seq, err := writer.Append(ctx, "r1", svc.RunEvent{Type: svc.RunAgentStarted, Agent: fmt.Sprint("a", i)})
		if err != nil || seq != i {
			t.Fatalf("Append = %d, %v", seq, err)
		}
		if ev, ok := receive(); !ok || ev.Seq != i || ev.Agent != fmt.Sprint("a", i) || ev.RunID != "r1" {
			t.Fatalf("reader got %+v (open %v), want event %d", ev, ok, i)
		}
	}
	if rec, err := reader.Get(ctx, "r1"); err != nil || rec.State != svc.RunRunning {
		t.Fatalf("reader Get = %+v, %v", rec, err)
	}
	if err := writer.SetState(ctx, "r1", svc.RunCompleted, "", &svc.RunEvent{Type: svc.RunGroupCompleted}); err != nil {
		t.Fatal(err)
	}
	if ev, ok := receive(); !ok || ev.Seq != 4 || ev.Type != svc.RunGroupCompleted {
		t.Fatalf("reader got %+v (open %v), want group_completed 4", ev, ok)
	}
	if ev, ok := receive(); ok {
		t.Fatalf("reader got %+v after the final event, want the stream closed", ev)
	}
	// The terminal rule binds the other store too.
	if _, err := reader.Append(ctx, "r1", svc.RunEvent{Type: svc.RunAgentStarted}); !errors.Is(err, svc.ErrRunState) {
		t.Errorf("Append from the other store after the end = %v, want a RunStateError", err)
	}
}

// Racing transitions from two stores: for each run exactly one of
// "complete" and "cancel" wins, and only the winner's final event exists.
func TestCrossProcessRace(t *testing.T) {
	url := startRedis(t)
	prefix := uniquePrefix()
	a := open(t, redisstore.Options{URL: url, KeyPrefix: prefix})
	b := open(t, redisstore.Options{URL: url, KeyPrefix: prefix})
	ctx := t.Context()
	const runs = 50
	for i := range runs {
		id := fmt.Sprint("r", i)
		if err := a.Create(ctx, svc.RunRecord{RunID: id, Target: "t"}); err != nil {
			t.Fatal(err)
		}
		if err := b.SetState(ctx, id, svc.RunRunning, "", nil); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	wins := make([][2]bool, runs)
	for i := range runs {
		id := fmt.Sprint("r", i)
		for j, tr := range []struct {
			s     *redisstore.Store
			state svc.RunState
			typ   svc.RunEventType
		}{{a, svc.RunCompleted, svc.RunGroupCompleted}, {b, svc.RunCancelled, svc.RunRunCancelled}} {
			wg.Go(func() {
				err := tr.s.SetState(ctx, id, tr.state, "", &svc.RunEvent{Type: tr.typ})
				switch {
				case err == nil:
					wins[i][j] = true
				case !errors.Is(err, svc.ErrRunState):
					t.Errorf("SetState %s %s: %v", id, tr.state, err)
				}
			})
		}
	}
	wg.Wait()
	for i := range runs {
		id := fmt.Sprint("r", i)
		if wins[i][0] == wins[i][1] {
			t.Errorf("%s: complete won %v, cancel won %v; want exactly one", id, wins[i][0], wins[i][1])
			continue
		}
		rec, err := a.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		evs, err := b.Events(ctx, id, 0)
		if err != nil {
			t.Fatal(err)
		}
		want, typ := svc.RunCompleted, svc.RunGroupCompleted
		if wins[i][1] {
			want, typ = svc.RunCancelled, svc.RunRunCancelled
		}
		if rec.State != want || len(evs) != 1 || evs[0].Type != typ {
			t.Errorf("%s: state %s, events %+v; want %s with one %s", id, rec.State, evs, want, typ)
		}
	}
}

func BenchmarkAppend(b *testing.B) {
	url := startRedis(b)
	s := open(b, redisstore.Options{URL: url})
	ctx := context.Background()
	if err := s.Create(ctx, svc.RunRecord{RunID: "bench", Target: "echo", Kind: "agent"}); err != nil {
		b.Fatal(err)
	}
	ev := svc.RunEvent{Type: svc.RunAgentStarted, Agent: "echo", TaskID: "t1"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Append(ctx, "bench", ev); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "appends/s")
}

// More events than one read returns: replay and a live burst both arrive
// whole and in order, for a reader and for one resuming halfway.
func TestStreamManyEvents(t *testing.T) {
	s := open(t, redisstore.Options{URL: startRedis(t), KeyPrefix: uniquePrefix()})
	ctx := t.Context()
	const history, burst = 600, 700
	if err := s.Create(ctx, svc.RunRecord{RunID: "r1", Target: "t"}); err != nil {
		t.Fatal(err)
	}
	for range history {
		if _, err := s.Append(ctx, "r1", svc.RunEvent{Type: svc.RunAgentStarted}); err != nil {
			t.Fatal(err)
		}
	}
	from0, err := s.Stream(ctx, "r1", 0)
	if err != nil {
		t.Fatal(err)
	}
	from300, err := s.Stream(ctx, "r1", 300)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for range burst {
			if _, err := s.Append(ctx, "r1", svc.RunEvent{Type: svc.RunAgentStarted}); err != nil {
				t.Error(err)
				return
			}
		}
		if err := s.SetState(ctx, "r1", svc.RunCancelled, "", &svc.RunEvent{Type: svc.RunRunCancelled}); err != nil {
			t.Error(err)
		}
	}()
	for _, tc := range []struct {
		ch    <-chan svc.RunEvent
		after int64
	}{{from0, 0}, {from300, 300}} {
		want := tc.after + 1
		timeout := time.After(30 * time.Second)
	read:
		for {
			select {
			case ev, ok := <-tc.ch:
				if !ok {
					break read
				}
				if ev.Seq != want {
					t.Fatalf("stream after %d: got seq %d, want %d", tc.after, ev.Seq, want)
				}
				want++
			case <-timeout:
				t.Fatalf("stream after %d stalled at seq %d", tc.after, want)
			}
		}
		if want != history+burst+2 {
			t.Errorf("stream after %d ended before seq %d", tc.after, want)
		}
	}
}

// A Stream opened while the store's hub blocks on another run's stream
// interrupts it: its first live event does not wait out the block (1 s).
func TestStreamJoinsBlockedHub(t *testing.T) {
	url := startRedis(t)
	prefix := uniquePrefix()
	s := open(t, redisstore.Options{URL: url, KeyPrefix: prefix})
	writer := open(t, redisstore.Options{URL: url, KeyPrefix: prefix})
	ctx := t.Context()
	for _, id := range []string{"idle", "busy"} {
		if err := s.Create(ctx, svc.RunRecord{RunID: id, Target: "t"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Stream(ctx, "idle", 0); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		ch, err := s.Stream(ctx, "busy", int64(i))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if _, err := writer.Append(ctx, "busy", svc.RunEvent{Type: svc.RunAgentStarted}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatal("stream stalled")
		}
		// Half the block: generous for a round trip, short of a timeout.
		if d := time.Since(start); d > 500*time.Millisecond {
			t.Errorf("join #%d: first live event after %v, want it well under the 1 s block", i, d)
		}
	}
}

// Idempotency-Keys are shared by every store on a prefix, survive the
// store that made them, and expire by Redis's own TTL.
func TestIdempotencyKeysAcrossStores(t *testing.T) {
	url := startRedis(t)
	prefix := uniquePrefix()
	a := open(t, redisstore.Options{URL: url, KeyPrefix: prefix})
	ctx := t.Context()
	rec := func(id string) svc.RunRecord { return svc.RunRecord{RunID: id, Target: "t", Kind: "agent"} }
	if id, created, err := a.CreateIdempotent(ctx, "k", "fp", rec("r1"), time.Hour); err != nil || !created || id != "r1" {
		t.Fatalf("CreateIdempotent = %q, %v, %v", id, created, err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	b := open(t, redisstore.Options{URL: url, KeyPrefix: prefix})
	if id, created, err := b.CreateIdempotent(ctx, "k", "fp", rec("r2"), time.Hour); err != nil || created || id != "r1" {
		t.Fatalf("another store: CreateIdempotent = %q, %v, %v; want r1, false", id, created, err)
	}
	if _, _, err := b.CreateIdempotent(ctx, "k", "other", rec("r3"), time.Hour); !errors.Is(err, svc.ErrRunState) {
		t.Fatalf("another request under the key: %v", err)
	}
	// The reservation expires by Redis's own TTL.
	c := rawClient(t, url)
	if ttl, err := c.PTTL(ctx, prefix+"::idem:k").Result(); err != nil || ttl <= 0 || ttl > time.Hour {
		t.Fatalf("PTTL of the reservation = %v, %v", ttl, err)
	}
}

// ServeNodes lists the nodes with a current lease, marking the caller's; a
// closed node leaves the list.
func TestServeNodes(t *testing.T) {
	url := startRedis(t)
	prefix := uniquePrefix()
	a := open(t, redisstore.Options{URL: url, KeyPrefix: prefix, NodeID: "a", LeaseTTL: time.Minute})
	b := open(t, redisstore.Options{URL: url, KeyPrefix: prefix, NodeID: "b", LeaseTTL: time.Minute})
	nodes, err := b.ServeNodes(t.Context())
	if err != nil || len(nodes) != 2 || nodes[0].NodeID != "a" || nodes[0].Self || nodes[1].NodeID != "b" || !nodes[1].Self ||
		nodes[0].LastRenewal.IsZero() {
		t.Fatalf("ServeNodes = %+v, %v; want a, then b (self)", nodes, err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if nodes, err := b.ServeNodes(t.Context()); err != nil || len(nodes) != 1 || nodes[0].NodeID != "b" {
		t.Fatalf("ServeNodes after a closed = %+v, %v; want b", nodes, err)
	}
}

// A second Store of a node id whose lease another Store holds is refused,
// naming the id, until that lease expires; a Store that was refused, or
// closed late, does not take away the holder's lease.
func TestNodeIDInUse(t *testing.T) {
	url := startRedis(t)
	prefix := uniquePrefix()
	a := open(t, redisstore.Options{URL: url, KeyPrefix: prefix, NodeID: "api-1", LeaseTTL: 500 * time.Millisecond})
	time.Sleep(time.Second) // past a's first lease: it is held by renewals
	_, err := redisstore.Open(redisstore.Options{URL: url, KeyPrefix: prefix, NodeID: "api-1", LeaseTTL: time.Minute})
	var held *redisstore.NodeInUseError
	if !errors.As(err, &held) || held.NodeID != "api-1" || !strings.Contains(err.Error(), `"api-1"`) || !strings.Contains(err.Error(), "lease") {
		t.Fatalf("second Open of node api-1 = %v; want a NodeInUseError naming it and its lease", err)
	}
	if held.Expires <= 0 || held.Expires > 500*time.Millisecond {
		t.Errorf("Expires = %v, want within the holder's 500ms lease", held.Expires)
	}
	// Another id is welcome meanwhile.
	open(t, redisstore.Options{URL: url, KeyPrefix: prefix, NodeID: "api-2", LeaseTTL: time.Minute})

	a.StopLease() // a is killed
	var b *redisstore.Store
	testutil.Eventually(t, "node api-1 free once the killed holder's lease expired", func() bool {
		b, err = redisstore.Open(redisstore.Options{URL: url, KeyPrefix: prefix, NodeID: "api-1", LeaseTTL: time.Minute})
		return err == nil
	})
	defer b.Close()
	if err := a.Close(); err != nil { // the killed life's late Close
		t.Fatal(err)
	}
	nodes, err := b.ServeNodes(t.Context())
	if err != nil || len(nodes) != 2 || nodes[0].NodeID != "api-1" || !nodes[0].Self || nodes[0].LastRenewal.IsZero() {
		t.Fatalf("ServeNodes = %+v, %v; want api-1 (self, still leased) and api-2", nodes, err)
	}
	if _, err := redisstore.Open(redisstore.Options{URL: url, KeyPrefix: prefix, NodeID: "api-1"}); !errors.As(err, &held) {
		t.Errorf("Open of api-1 while its new holder lives = %v; want NodeInUseError", err)
	}
}

package eventstore_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/eventstore"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		if benchDir != "" {
			_ = os.RemoveAll(benchDir)
		}
		os.Exit(code)
	}))
}

// factory opens an empty store with retention r, closed at cleanup, and
// prune applies its retention now (the memory store does so on every call).
type factory struct {
	name  string
	open  func(t *testing.T, r eventstore.Retention) eventstore.Store
	prune func(t *testing.T, s eventstore.Store)
}

func factories() []factory {
	return []factory{
		{
			name: "memory",
			open: func(t *testing.T, r eventstore.Retention) eventstore.Store {
				s := eventstore.NewMemory(r)
				t.Cleanup(func() { _ = s.Close() })
				return s
			},
			prune: func(*testing.T, eventstore.Store) {},
		},
		{
			name: "sqlite",
			open: func(t *testing.T, r eventstore.Retention) eventstore.Store {
				return openSQLite(t, filepath.Join(t.TempDir(), "events.db"), r)
			},
			prune: func(t *testing.T, s eventstore.Store) {
				t.Helper()
				if _, err := s.(*eventstore.SQLite).Prune(context.Background()); err != nil {
					t.Fatalf("Prune: %v", err)
				}
			},
		},
	}
}

func openSQLite(t *testing.T, path string, r eventstore.Retention) *eventstore.SQLite {
	t.Helper()
	s, err := eventstore.OpenSQLite(path, r)
	if err != nil {
		t.Fatalf("OpenSQLite: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

var base = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

// ev builds an event at base+sec seconds; its agent name identifies it.
func ev(name string, sec int, trace string, typ svc.EventType) svc.RuntimeEvent {
	return svc.RuntimeEvent{
		EventType: typ, Timestamp: base.Add(time.Duration(sec) * time.Second),
		AgentName: name, TraceID: trace, Payload: svc.Payload{"n": sec},
	}
}

func write(t *testing.T, s eventstore.Store, evs ...svc.RuntimeEvent) {
	t.Helper()
	if err := s.Write(context.Background(), evs); err != nil {
		t.Fatalf("Write: %v", err)
	}
}

func names(evs []svc.RuntimeEvent) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.AgentName
	}
	return out
}

func query(t *testing.T, s eventstore.Store, q eventstore.Query) []svc.RuntimeEvent {
	t.Helper()
	got, err := s.Query(context.Background(), q)
	if err != nil {
		t.Fatalf("Query(%+v): %v", q, err)
	}
	return got
}

func TestQuery(t *testing.T) {
	const (
		spawned   = svc.EventAgentSpawned
		completed = svc.EventAgentCompleted
	)
	for _, f := range factories() {
		t.Run(f.name, func(t *testing.T) {
			s := f.open(t, eventstore.Retention{})
			// Written out of time order, in two batches, with ties at 20 s:
			// "c" is written after "b", so it comes first.
			write(t, s, ev("d", 30, "t2", completed), ev("a", 10, "t1", spawned), ev("b", 20, "t1", completed))
			write(t, s, ev("c", 20, "t2", spawned), ev("e", 40, "t1", completed))

			cases := []struct {
				name string
				q    eventstore.Query
				want []string
			}{
				{"all newest first", eventstore.Query{}, []string{"e", "d", "c", "b", "a"}},
				{"limit", eventstore.Query{Limit: 2}, []string{"e", "d"}},
				{"since inclusive", eventstore.Query{Since: base.Add(20 * time.Second)}, []string{"e", "d", "c", "b"}},
				{"until exclusive", eventstore.Query{Until: base.Add(30 * time.Second)}, []string{"c", "b", "a"}},
				{"window", eventstore.Query{Since: base.Add(20 * time.Second), Until: base.Add(40 * time.Second)}, []string{"d", "c", "b"}},
				{"empty window", eventstore.Query{Since: base.Add(20 * time.Second), Until: base.Add(20 * time.Second)}, []string{}},
				{"trace", eventstore.Query{TraceID: "t1"}, []string{"e", "b", "a"}},
				{"type", eventstore.Query{EventType: spawned}, []string{"c", "a"}},
				{"trace and type", eventstore.Query{TraceID: "t1", EventType: completed}, []string{"e", "b"}},
				{"all filters", eventstore.Query{Limit: 1, Since: base.Add(15 * time.Second), Until: base.Add(35 * time.Second), TraceID: "t2", EventType: completed}, []string{"d"}},
				{"no match", eventstore.Query{TraceID: "nope"}, []string{}},
			}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					got := names(query(t, s, c.q))
					if !reflect.DeepEqual(got, c.want) {
						t.Fatalf("got %v, want %v", got, c.want)
					}
				})
			}
		})
	}
}

func TestQueryLimits(t *testing.T) {
	for _, f := range factories() {
		t.Run(f.name, func(t *testing.T) {
			s := f.open(t, eventstore.Retention{})
			evs := make([]svc.RuntimeEvent, 150)
			for i := range evs {
				evs[i] = ev(fmt.Sprint(i), i, "t", svc.EventAgentSpawned)
			}
			write(t, s, evs...)
			if got := query(t, s, eventstore.Query{}); len(got) != eventstore.DefaultLimit || got[0].AgentName != "149" {
				t.Errorf("default limit: got %d events starting %q, want %d starting 149", len(got), got[0].AgentName, eventstore.DefaultLimit)
			}
			if got := query(t, s, eventstore.Query{Limit: eventstore.MaxLimit}); len(got) != 150 {
				t.Errorf("Limit MaxLimit: got %d events, want 150", len(got))
			}
			for _, q := range []eventstore.Query{
				{Limit: eventstore.MaxLimit + 1},
				{Limit: -1},
				{Since: base.Add(time.Second), Until: base},
			} {
				_, err := s.Query(context.Background(), q)
				if !errors.Is(err, svc.ErrSpecValidation) {
					t.Errorf("Query(%+v) = %v, want a SpecValidationError", q, err)
				}
			}
		})
	}
}

func TestRetentionByRows(t *testing.T) {
	for _, f := range factories() {
		t.Run(f.name, func(t *testing.T) {
			s := f.open(t, eventstore.Retention{MaxRows: 3})
			// The oldest by timestamp go, whatever the write order.
			write(t, s, ev("late", 50, "t", svc.EventAgentSpawned), ev("old", 1, "t", svc.EventAgentSpawned))
			write(t, s, ev("b", 20, "t", svc.EventAgentSpawned), ev("c", 30, "t", svc.EventAgentSpawned),
				ev("a", 10, "t", svc.EventAgentSpawned))
			f.prune(t, s)
			if got, want := names(query(t, s, eventstore.Query{})), []string{"late", "c", "b"}; !reflect.DeepEqual(got, want) {
				t.Fatalf("after pruning to 3 rows: %v, want %v", got, want)
			}
		})
	}
}

func TestRetentionByAge(t *testing.T) {
	now := time.Now()
	at := func(name string, ago time.Duration) svc.RuntimeEvent {
		return svc.RuntimeEvent{EventType: svc.EventAgentSpawned, Timestamp: now.Add(-ago), AgentName: name}
	}
	for _, f := range factories() {
		t.Run(f.name, func(t *testing.T) {
			s := f.open(t, eventstore.Retention{MaxAge: time.Hour})
			write(t, s, at("fresh", time.Minute), at("stale", 2*time.Hour), at("recent", 30*time.Minute), at("ancient", 48*time.Hour))
			f.prune(t, s)
			if got, want := names(query(t, s, eventstore.Query{})), []string{"fresh", "recent"}; !reflect.DeepEqual(got, want) {
				t.Fatalf("after pruning by age: %v, want %v", got, want)
			}
		})
	}
}

func TestRetentionBoth(t *testing.T) {
	now := time.Now()
	for _, f := range factories() {
		t.Run(f.name, func(t *testing.T) {
			s := f.open(t, eventstore.Retention{MaxRows: 2, MaxAge: time.Hour})
			var evs []svc.RuntimeEvent
			for i, ago := range []time.Duration{3 * time.Hour, 40 * time.Minute, 30 * time.Minute, 20 * time.Minute} {
				evs = append(evs, svc.RuntimeEvent{EventType: svc.EventAgentSpawned, Timestamp: now.Add(-ago), AgentName: fmt.Sprint(i)})
			}
			write(t, s, evs...)
			f.prune(t, s)
			if got, want := names(query(t, s, eventstore.Query{})), []string{"3", "2"}; !reflect.DeepEqual(got, want) {
				t.Fatalf("got %v, want %v", got, want)
			}
		})
	}
}

// TestSQLiteBackgroundPrune checks the store's own goroutine prunes, not
// only an explicit Prune call.
func TestSQLiteBackgroundPrune(t *testing.T) {
	pruned := make(chan struct{}, 1)
	s, err := eventstore.OpenSQLiteEvery(filepath.Join(t.TempDir(), "events.db"), eventstore.Retention{MaxRows: 2}, 10*time.Millisecond, pruned)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	write(t, s, ev("a", 1, "t", svc.EventAgentSpawned), ev("b", 2, "t", svc.EventAgentSpawned),
		ev("c", 3, "t", svc.EventAgentSpawned), ev("d", 4, "t", svc.EventAgentSpawned))
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := names(query(t, s, eventstore.Query{}))
		if reflect.DeepEqual(got, []string{"d", "c"}) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no background prune: still %v", got)
		}
		select {
		case <-pruned:
		case <-time.After(time.Second):
		}
	}
}

func TestSQLiteReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.db")
	s, err := eventstore.OpenSQLite(path, eventstore.Retention{})
	if err != nil {
		t.Fatal(err)
	}
	write(t, s, ev("a", 1, "t", svc.EventAgentSpawned), ev("b", 2, "t", svc.EventAgentCompleted))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Reopening applies the new retention at once.
	pruned := make(chan struct{}, 1)
	s2, err := eventstore.OpenSQLiteEvery(path, eventstore.Retention{MaxRows: 1}, time.Hour, pruned)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	<-pruned
	if got := names(query(t, s2, eventstore.Query{})); !reflect.DeepEqual(got, []string{"b"}) {
		t.Fatalf("after reopen: %v, want [b]", got)
	}
}

func TestOpenSQLiteErrors(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.db")
	if err := os.WriteFile(garbage, []byte(fmt.Sprintf("%0800d", 7)), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		path string
		r    eventstore.Retention
		want error
	}{
		{"empty path", "", eventstore.Retention{}, svc.ErrSpecValidation},
		{"memory", ":memory:", eventstore.Retention{}, svc.ErrSpecValidation},
		{"uri", "file:x.db", eventstore.Retention{}, svc.ErrSpecValidation},
		{"query string", filepath.Join(dir, "x.db?mode=ro"), eventstore.Retention{}, svc.ErrSpecValidation},
		{"negative rows", filepath.Join(dir, "x.db"), eventstore.Retention{MaxRows: -1}, svc.ErrSpecValidation},
		{"missing directory", filepath.Join(dir, "no", "x.db"), eventstore.Retention{}, svc.ErrRuntime},
		{"not a database", garbage, eventstore.Retention{}, svc.ErrRuntime},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := eventstore.OpenSQLite(c.path, c.r)
			if err == nil {
				s.Close()
				t.Fatal("OpenSQLite succeeded")
			}
			if !errors.Is(err, c.want) {
				t.Fatalf("OpenSQLite = %v, want %v", err, c.want)
			}
		})
	}
}

func TestTimestampRoundTrip(t *testing.T) {
	plus2 := time.FixedZone("+02", 2*3600)
	cases := []struct {
		name string
		in   time.Time
		want time.Time
	}{
		{"microseconds kept, nanoseconds dropped", time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC), time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC)},
		{"zone converted to UTC", time.Date(2026, 1, 2, 5, 4, 5, 7000, plus2), time.Date(2026, 1, 2, 3, 4, 5, 7000, time.UTC)},
		{"before 1970", time.Date(1969, 12, 31, 23, 59, 59, 999999000, time.UTC), time.Date(1969, 12, 31, 23, 59, 59, 999999000, time.UTC)},
		{"year 9999", time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC), time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC)},
	}
	for _, f := range factories() {
		t.Run(f.name, func(t *testing.T) {
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					s := f.open(t, eventstore.Retention{})
					write(t, s, svc.RuntimeEvent{EventType: svc.EventAgentSpawned, Timestamp: c.in})
					got := query(t, s, eventstore.Query{})
					if len(got) != 1 {
						t.Fatalf("got %d events", len(got))
					}
					if ts := got[0].Timestamp; !ts.Equal(c.want) || ts.Location() != time.UTC {
						t.Fatalf("timestamp %v, want %v in UTC", ts, c.want)
					}
				})
			}
		})
	}
}

func TestEventRoundTrip(t *testing.T) {
	in := svc.RuntimeEvent{
		EventType: svc.EventAgentCompleted, Timestamp: base, AgentName: "triage",
		TaskID: "task-1", TraceID: "trace-1", ParentTraceID: "parent-1",
		Payload: svc.Payload{
			"tokens_used": int64(128), "duration_ms": 12.5, "model": "test:echo",
			"agents": []string{"a", "b"}, "nested": map[string]any{"x": 1, "y": []any{true, nil}},
			"big": uint64(1 << 53),
		},
	}
	// Numbers come back as float64, lists as []any: the payload's JSON form.
	want := in
	want.Payload = svc.Payload{
		"tokens_used": float64(128), "duration_ms": 12.5, "model": "test:echo",
		"agents": []any{"a", "b"}, "nested": map[string]any{"x": float64(1), "y": []any{true, nil}},
		"big": float64(1 << 53),
	}
	unencodable := svc.RuntimeEvent{EventType: svc.EventToolCallFailed, Timestamp: base.Add(time.Second),
		Payload: svc.Payload{"nan": math.NaN(), "func": func() {}, "inf": math.Inf(1), "ok": "kept", "ch": make(chan int)}}
	wantUnencodable := unencodable
	wantUnencodable.Payload = svc.Payload{"nan": nil, "func": nil, "inf": nil, "ok": "kept", "ch": nil}
	nilPayload := svc.RuntimeEvent{EventType: svc.EventGroupStarted, Timestamp: base.Add(2 * time.Second)}
	wantNil := nilPayload
	wantNil.Payload = svc.Payload{}

	for _, f := range factories() {
		t.Run(f.name, func(t *testing.T) {
			s := f.open(t, eventstore.Retention{})
			evs := []svc.RuntimeEvent{in, unencodable, nilPayload}
			write(t, s, evs...)
			got := query(t, s, eventstore.Query{})
			for i, w := range []svc.RuntimeEvent{wantNil, wantUnencodable, want} {
				if !reflect.DeepEqual(got[i], w) {
					t.Errorf("event %d:\n got %#v\nwant %#v", i, got[i], w)
				}
			}
			if _, ok := in.Payload["tokens_used"].(int64); !ok {
				t.Error("Write modified the caller's payload")
			}
		})
	}
}

func TestClosedAndCancelled(t *testing.T) {
	for _, f := range factories() {
		t.Run(f.name, func(t *testing.T) {
			s := f.open(t, eventstore.Retention{})
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if err := s.Write(ctx, []svc.RuntimeEvent{ev("a", 1, "t", svc.EventAgentSpawned)}); !errors.Is(err, svc.ErrCancelled) {
				t.Errorf("Write with a cancelled context = %v, want CancelledError", err)
			}
			if _, err := s.Query(ctx, eventstore.Query{}); !errors.Is(err, svc.ErrCancelled) {
				t.Errorf("Query with a cancelled context = %v, want CancelledError", err)
			}
			if err := s.Write(context.Background(), nil); err != nil {
				t.Errorf("Write(nil) = %v", err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Errorf("second Close = %v", err)
			}
			if err := s.Write(context.Background(), []svc.RuntimeEvent{ev("a", 1, "t", svc.EventAgentSpawned)}); !errors.Is(err, svc.ErrShuttingDown) {
				t.Errorf("Write after Close = %v, want ShuttingDownError", err)
			}
			if _, err := s.Query(context.Background(), eventstore.Query{}); !errors.Is(err, svc.ErrShuttingDown) {
				t.Errorf("Query after Close = %v, want ShuttingDownError", err)
			}
		})
	}
}

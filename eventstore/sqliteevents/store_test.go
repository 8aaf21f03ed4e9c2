package sqliteevents_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/eventstore"
	"github.com/svc-dev/svc/eventstore/eventstoretest"
	"github.com/svc-dev/svc/eventstore/sqliteevents"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		if benchDir != "" {
			_ = os.RemoveAll(benchDir)
		}
		os.Exit(code)
	}))
}

// TestSuite runs the event store conformance suite on stores in fresh
// files.
func TestSuite(t *testing.T) {
	eventstoretest.Run(t, func(t *testing.T, r eventstore.Retention) eventstore.Store {
		return openSQLite(t, filepath.Join(t.TempDir(), "events.db"), r)
	})
}

func openSQLite(t *testing.T, path string, r eventstore.Retention) *sqliteevents.Store {
	t.Helper()
	s, err := sqliteevents.Open(path, r)
	if err != nil {
		t.Fatalf("Open: %v", err)
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

// mk builds an event at base+ms milliseconds.
func mk(typ svc.EventType, ms int, agent, task, trace string, p svc.Payload) svc.RuntimeEvent {
	return svc.RuntimeEvent{EventType: typ, Timestamp: base.Add(time.Duration(ms) * time.Millisecond),
		AgentName: agent, TaskID: task, TraceID: trace, Payload: p}
}

// span gives e a span id and a parent span id.
func span(e svc.RuntimeEvent, id, parent string) svc.RuntimeEvent {
	e.SpanID, e.ParentSpanID = id, parent
	return e
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

// TestBackgroundPrune checks the store's own goroutine prunes, not
// only an explicit Prune call.
func TestBackgroundPrune(t *testing.T) {
	pruned := make(chan struct{}, 1)
	s, err := sqliteevents.OpenEvery(filepath.Join(t.TempDir(), "events.db"), eventstore.Retention{MaxRows: 2}, 10*time.Millisecond, pruned)
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

func TestReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.db")
	s, err := sqliteevents.Open(path, eventstore.Retention{})
	if err != nil {
		t.Fatal(err)
	}
	write(t, s, ev("a", 1, "t", svc.EventAgentSpawned), ev("b", 2, "t", svc.EventAgentCompleted))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Reopening applies the new retention at once.
	pruned := make(chan struct{}, 1)
	s2, err := sqliteevents.OpenEvery(path, eventstore.Retention{MaxRows: 1}, time.Hour, pruned)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	<-pruned
	if got := names(query(t, s2, eventstore.Query{})); !reflect.DeepEqual(got, []string{"b"}) {
		t.Fatalf("after reopen: %v, want [b]", got)
	}
}

func TestOpenErrors(t *testing.T) {
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
			s, err := sqliteevents.Open(c.path, c.r)
			if err == nil {
				s.Close()
				t.Fatal("Open succeeded")
			}
			if !errors.Is(err, c.want) {
				t.Fatalf("Open = %v, want %v", err, c.want)
			}
		})
	}
}

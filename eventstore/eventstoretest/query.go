package eventstoretest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/eventstore"
)

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

func testQuery(t *testing.T, open Open) {
	const (
		spawned   = svc.EventAgentSpawned
		completed = svc.EventAgentCompleted
	)
	s := open(t, eventstore.Retention{})
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
}

func testQueryLimits(t *testing.T, open Open) {
	s := open(t, eventstore.Retention{})
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
}

func testRetentionByRows(t *testing.T, open Open) {
	s := open(t, eventstore.Retention{MaxRows: 3})
	// The oldest by timestamp go, whatever the write order.
	write(t, s, ev("late", 50, "t", svc.EventAgentSpawned), ev("old", 1, "t", svc.EventAgentSpawned))
	write(t, s, ev("b", 20, "t", svc.EventAgentSpawned), ev("c", 30, "t", svc.EventAgentSpawned),
		ev("a", 10, "t", svc.EventAgentSpawned))
	prune(t, s)
	if got, want := names(query(t, s, eventstore.Query{})), []string{"late", "c", "b"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("after pruning to 3 rows: %v, want %v", got, want)
	}

	// Ties in timestamp at the cut: the later written are the newer, and
	// exactly MaxRows stay.
	s = open(t, eventstore.Retention{MaxRows: 2})
	write(t, s, ev("a", 10, "t", svc.EventAgentSpawned), ev("b", 10, "t", svc.EventAgentSpawned))
	write(t, s, ev("c", 10, "t", svc.EventAgentSpawned), ev("d", 10, "t", svc.EventAgentSpawned))
	prune(t, s)
	if got, want := names(query(t, s, eventstore.Query{})), []string{"d", "c"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("after pruning 4 events of one timestamp to 2 rows: %v, want %v", got, want)
	}
}

func testRetentionByAge(t *testing.T, open Open) {
	now := time.Now()
	at := func(name string, ago time.Duration) svc.RuntimeEvent {
		return svc.RuntimeEvent{EventType: svc.EventAgentSpawned, Timestamp: now.Add(-ago), AgentName: name}
	}
	s := open(t, eventstore.Retention{MaxAge: time.Hour})
	write(t, s, at("fresh", time.Minute), at("stale", 2*time.Hour), at("recent", 30*time.Minute), at("ancient", 48*time.Hour))
	prune(t, s)
	if got, want := names(query(t, s, eventstore.Query{})), []string{"fresh", "recent"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("after pruning by age: %v, want %v", got, want)
	}
}

func testRetentionBoth(t *testing.T, open Open) {
	now := time.Now()
	s := open(t, eventstore.Retention{MaxRows: 2, MaxAge: time.Hour})
	var evs []svc.RuntimeEvent
	for i, ago := range []time.Duration{3 * time.Hour, 40 * time.Minute, 30 * time.Minute, 20 * time.Minute} {
		evs = append(evs, svc.RuntimeEvent{EventType: svc.EventAgentSpawned, Timestamp: now.Add(-ago), AgentName: fmt.Sprint(i)})
	}
	write(t, s, evs...)
	prune(t, s)
	if got, want := names(query(t, s, eventstore.Query{})), []string{"3", "2"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func testTimestampRoundTrip(t *testing.T, open Open) {
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
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := open(t, eventstore.Retention{})
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
}

func testEventRoundTrip(t *testing.T, open Open) {
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

	s := open(t, eventstore.Retention{})
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
}

func testClosedAndCancelled(t *testing.T, open Open) {
	s := open(t, eventstore.Retention{})
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
}

// testQueryWindows reads a store in adjacent windows, as a caller paging
// back through time does: every event is in exactly one window, events
// that share a timestamp included.
func testQueryWindows(t *testing.T, open Open) {
	s := open(t, eventstore.Retention{})
	var evs []svc.RuntimeEvent
	for i := range 40 {
		evs = append(evs, ev(fmt.Sprint(i), i/2, "t", svc.EventAgentSpawned)) // two events a second
	}
	write(t, s, evs...)
	seen := map[string]int{}
	for from := 0; from < 20; from += 3 {
		q := eventstore.Query{Since: base.Add(time.Duration(from) * time.Second), Until: base.Add(time.Duration(from+3) * time.Second)}
		for _, e := range query(t, s, q) {
			seen[e.AgentName]++
		}
	}
	if len(seen) != len(evs) {
		t.Errorf("the windows hold %d distinct events, want %d", len(seen), len(evs))
	}
	for name, n := range seen {
		if n != 1 {
			t.Errorf("event %s is in %d windows, want 1", name, n)
		}
	}
}

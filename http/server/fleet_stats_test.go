package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/eventstore"
	"github.com/svc-dev/svc/eventstore/memevents"
	"github.com/svc-dev/svc/http/server"
)

// fleet is a fixed svc.FleetReader.
type fleet []svc.WorkerStatus

func (f fleet) Workers(context.Context) ([]svc.WorkerStatus, error) { return f, nil }

// TestStatsListTheLiveFleet: GET /runtime/stats lists the fleet a serve
// node hears ahead of what its event store remembers (the live entry wins
// for the same runtime id; one only the store knows stays), and is served
// with a fleet even without an event store.
func TestStatsListTheLiveFleet(t *testing.T) {
	now := time.Now().UTC().Truncate(time.Second)
	store := memevents.New(eventstore.Retention{})
	t.Cleanup(func() { _ = store.Close() })
	hb := func(id string, inFlight int) svc.RuntimeEvent {
		return svc.RuntimeEvent{EventType: svc.EventWorkerHeartbeat, Timestamp: now.Add(-time.Second), AgentName: id, TraceID: id,
			Payload: svc.Payload{"runtime_id": id, "agent_subscriptions": []string{"echo"}, "in_flight": inFlight, "concurrency_cap": 5, "broker_scheme": "nats"}}
	}
	if err := store.Write(t.Context(), []svc.RuntimeEvent{hb("old", 0), hb("both", 9)}); err != nil {
		t.Fatal(err)
	}
	live := fleet{
		{RuntimeID: "both", Status: svc.WorkerDown, Stopped: true, Agents: []string{"echo"}, Concurrency: 5, LastHeartbeat: now},
		{RuntimeID: "new", Status: svc.WorkerHealthy, Agents: []string{"echo"}, InFlight: 2, Concurrency: 5, LastHeartbeat: now},
	}
	for _, c := range []struct {
		name   string
		events svc.EventReader
		want   []string // runtime ids
	}{{"with an event store", store, []string{"both", "new", "old"}}, {"without", nil, []string{"both", "new"}}} {
		t.Run(c.name, func(t *testing.T) {
			h, err := server.NewStandalone(&fakeBackend{}, server.StandaloneConfig{Events: c.events, Fleet: live})
			if err != nil {
				t.Fatal(err)
			}
			st := decode[svc.RuntimeStats](t, do(t, serve(t, h), "GET", "/runtime/stats", ""))
			var ids []string
			for _, w := range st.Workers {
				ids = append(ids, w.RuntimeID)
				if w.RuntimeID == "both" && (w.Status != svc.WorkerDown || !w.Stopped || w.InFlight != 0) {
					t.Errorf("the live entry should win over the store's: %+v", w)
				}
			}
			if len(ids) != len(c.want) {
				t.Fatalf("workers %v, want %v", ids, c.want)
			}
			for i := range ids {
				if ids[i] != c.want[i] {
					t.Fatalf("workers %v, want %v", ids, c.want)
				}
			}
			if st.Rejections == nil || st.ErrorGroups == nil || st.ToolServers == nil {
				t.Errorf("lists should be empty, not null: %+v", st)
			}
		})
	}
}

// redelivering is a fleet whose publisher saw n redelivered tasks.
type redelivering struct {
	fleet
	n int64
}

func (r redelivering) Redeliveries() int64 { return r.n }

// TestStatsCountRedeliveries: GET /runtime/stats reports the publisher's
// count of redelivered tasks, and 0 (not absent) without one.
func TestStatsCountRedeliveries(t *testing.T) {
	for _, c := range []struct {
		name  string
		fleet svc.FleetReader
		want  string
	}{{"a publisher", redelivering{n: 3}, `"redeliveries":3`}, {"no broker", nil, `"redeliveries":0`}} {
		t.Run(c.name, func(t *testing.T) {
			store := memevents.New(eventstore.Retention{})
			t.Cleanup(func() { _ = store.Close() })
			h, err := server.NewStandalone(&fakeBackend{}, server.StandaloneConfig{Events: store, Fleet: c.fleet})
			if err != nil {
				t.Fatal(err)
			}
			r := do(t, serve(t, h), "GET", "/runtime/stats", "")
			if !strings.Contains(string(r.body), c.want) {
				t.Errorf("stats %s, want %s", r.body, c.want)
			}
		})
	}
}

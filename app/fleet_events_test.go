package app

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/http/client"
	"github.com/svc-dev/svc/internal/testutil"
)

// TestPublishEventsInOneProcess: a publisher app with PublishEvents keeps
// the worker app's agent_completed of its task in its event store, and
// lists the worker in GET /runtime/stats; the worker's bridge is closed
// with it (TestMain checks that no goroutine is left).
func TestPublishEventsInOneProcess(t *testing.T) {
	pub, err := New(Options{SpecsDir: exampleSpecs, DataDir: t.TempDir(), Store: "memory", Events: "memory",
		Broker: "memory://app-publish-events", PublishEvents: true, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.Start(); err != nil {
		t.Fatal(err)
	}
	defer shutdown(t, pub)
	wk, err := New(Options{SpecsDir: exampleSpecs, Store: "memory", Events: "none", Broker: "memory://app-publish-events",
		Worker: &WorkerOptions{Agents: []string{"echo"}, Heartbeat: -1, RuntimeID: "wk-1", Concurrency: 7}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	if err := wk.Start(); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(pub.URL(), client.WithHTTPClient(httpClient))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := c.Run(ctx, "echo", svc.TaskSpec{ID: "relayed", Input: json.RawMessage(`{"text":"hi"}`)})
	if err != nil || !res.Success {
		t.Fatalf("run: %+v %v", res, err)
	}
	get := func(path string, v any) {
		t.Helper()
		resp, err := httpClient.Get(pub.URL() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s", path, resp.Status)
		}
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, "the worker's agent_completed in the publisher's event store", func() bool {
		var evs []svc.RuntimeEvent
		get("/events?event_type=agent_completed", &evs)
		return len(evs) == 1 && evs[0].TaskID == "relayed" && evs[0].Payload["backend"] == "broker:memory"
	})
	var st svc.RuntimeStats
	get("/runtime/stats", &st)
	if len(st.Workers) != 1 || st.Workers[0].RuntimeID != "wk-1" || st.Workers[0].Status != svc.WorkerHealthy ||
		st.Workers[0].Concurrency != 7 || st.Header.AgentsCompleted != 1 {
		t.Errorf("stats: workers %+v, header %+v", st.Workers, st.Header)
	}
	shutdown(t, wk)
	testutil.Eventually(t, "the stopped worker down", func() bool {
		get("/runtime/stats", &st)
		return len(st.Workers) == 1 && st.Workers[0].Status == svc.WorkerDown && st.Workers[0].Stopped
	})
}

func TestFleetOptionsChecked(t *testing.T) {
	for _, tc := range []struct {
		name   string
		o      Options
		option string
	}{
		{"publish events without broker", Options{PublishEvents: true}, "PublishEvents"},
		{"publish events on a worker", Options{Broker: "memory://", PublishEvents: true, Worker: &WorkerOptions{}}, "PublishEvents"},
		{"negative threshold", Options{Broker: "memory://", WorkerHealth: svc.WorkerThresholds{Stale: -time.Second}}, "WorkerHealth"},
		{"down before stale", Options{Broker: "memory://", WorkerHealth: svc.WorkerThresholds{Stale: time.Minute, Down: time.Second}}, "WorkerHealth"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.o)
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Option != tc.option {
				t.Fatalf("err = %v, want a ConfigError on %s", err, tc.option)
			}
		})
	}
}

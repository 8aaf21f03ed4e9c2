package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/broker"
	"github.com/svc-dev/svc/emitters/bridge"
	"github.com/svc-dev/svc/internal/testutil"
)

// Token streaming over the fleet (issue 27 part 3), with real processes: a
// `svc serve --publish-events` publisher and a `svc worker start` running
// the streaming writer agent, over the embedded NATS broker and a real
// redis-server. The worker relays the deltas of the runs read on the
// serve node; the serve node hands them to the run's followers, to a run
// answered as an event stream, and to /events/stream?deltas=true, and its
// event store keeps none.
func TestFleetDeltas(t *testing.T) {
	t.Parallel()
	specs := streamingSpecs(t)
	for _, b := range fleetBrokers {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			fleetDeltas(t, specs, b.setup(t))
		})
	}
}

func fleetDeltas(t *testing.T, specs string, b fleetBroker) {
	s := startFleetServe(t, "serve", specs, filepath.Join(t.TempDir(), "serve"), b, "--publish-events")
	w := startFleetProc(t, "worker-1", "worker", "start", "--broker", b.workerURL, "--specs", specs, "--agents", "writer",
		"--heartbeat-seconds", "1", "--log-format", "json", "--runtime-id", "worker-1")
	w.waitLog(t, regexp.MustCompile(`"msg":"worker_started"`))
	ctx, cancel := context.WithTimeout(t.Context(), fleetWait)
	defer cancel()

	// What the worker broadcasts to publishers: seen on the broker itself
	// where a subscription can take every publisher's events subject
	// (NATS; redis-server's broadcast channels have no wildcard).
	var onBroker atomic.Int64
	watched := strings.HasPrefix(b.workerURL, "nats://")
	if watched {
		br, err := broker.Open(ctx, b.workerURL, broker.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = br.Close() })
		sub, err := br.SubscribeBroadcast(ctx, "svc.events.*", func(_ context.Context, _ string, data []byte) {
			evs, _ := bridge.Decode(data)
			for _, ev := range evs {
				if ev.EventType == svc.EventAgentDelta {
					onBroker.Add(1)
				}
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Stop() })
	}
	c := newFleetClient(t, s.url)
	testutil.Within(t, fleetWait, "the serve node to know the worker", func() bool {
		_, ok := workerIn(runtimeStats(t, c), "worker-1")
		return ok
	})

	// Nobody reads the answer: no delta goes over the broker.
	code, body := c.must(http.MethodPost, "/agents/writer/run", `{"id":"unread","input":"x"}`)
	var res svc.AgentResult
	if code != http.StatusOK || json.Unmarshal(body, &res) != nil || string(res.Output) != `"`+writerAnswer+`"` {
		t.Fatalf("run nobody reads: %d %s", code, body)
	}
	if res.Metadata.Backend == "local" {
		t.Fatalf("the run did not go to the worker: %s", body)
	}
	time.Sleep(200 * time.Millisecond) // a relayed delta would have come by now
	if n := onBroker.Load(); n != 0 {
		t.Errorf("the worker sent %d deltas of a run nobody reads", n)
	}

	events := readStreamFrames(openStream(t, ctx, http.MethodGet, s.url+"/events/stream?deltas=true", "", nil).Body)

	// A submitted run, followed on the serve node.
	resp := openStream(t, ctx, http.MethodPost, s.url+"/submit", `{"target":"writer","task":{"id":"followed","input":"x"}}`,
		map[string]string{"Content-Type": "application/json"})
	var sub struct {
		RunID string `json:"run_id"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&sub); err != nil || sub.RunID == "" {
		t.Fatalf("submit: %d %v", resp.StatusCode, err)
	}
	var text strings.Builder
	var deltas int
	completed := false
	for f := range readStreamFrames(openStream(t, ctx, http.MethodGet, s.url+"/runs/"+sub.RunID+"/stream?deltas=true", "", nil).Body) {
		switch f.event {
		case "delta":
			var ev svc.RunEvent
			if err := json.Unmarshal([]byte(f.data), &ev); err != nil || ev.Type != svc.RunDelta || ev.Agent != "writer" || ev.TaskID != "followed" || f.hasID {
				t.Fatalf("delta frame %+v: %+v %v", f, ev, err)
			}
			if completed {
				t.Error("a delta after agent_completed")
			}
			deltas++
			text.WriteString(ev.Text)
		case "agent_completed":
			completed = true
		}
	}
	code, body = c.must(http.MethodGet, "/runs/"+sub.RunID+"/result", "")
	if code != http.StatusOK || json.Unmarshal(body, &res) != nil || string(res.Output) != `"`+writerAnswer+`"` {
		t.Fatalf("result of the followed run: %d %s", code, body)
	}
	if !completed || deltas < 2 || text.String() != writerAnswer {
		t.Errorf("followed run: %d deltas before agent_completed (%v) make %q, want several making %q", deltas, completed, text.String(), writerAnswer)
	}

	// A run answered as an event stream: the deltas, then the result.
	text.Reset()
	var result *svc.AgentResult
	for f := range readStreamFrames(openStream(t, ctx, http.MethodPost, s.url+"/agents/writer/run", `{"id":"streamed","input":"x"}`,
		map[string]string{"Accept": "text/event-stream", "Content-Type": "application/json"}).Body) {
		switch f.event {
		case "delta":
			var d struct {
				Agent, Text string
			}
			if err := json.Unmarshal([]byte(f.data), &d); err != nil || d.Agent != "writer" || result != nil {
				t.Fatalf("delta frame %q (after the result: %v): %v", f.data, result != nil, err)
			}
			text.WriteString(d.Text)
		case "result":
			result = new(svc.AgentResult)
			if err := json.Unmarshal([]byte(f.data), result); err != nil {
				t.Fatalf("result frame %q: %v", f.data, err)
			}
		}
	}
	if result == nil || string(result.Output) != `"`+writerAnswer+`"` || text.String() != writerAnswer {
		t.Errorf("run as an event stream: deltas make %q, result %+v; want %q", text.String(), result, writerAnswer)
	}

	// The serve node's emitters: both runs' deltas on /events/stream, each
	// once, and none in its event store.
	got := map[string]*strings.Builder{"followed": {}, "streamed": {}}
	testutil.Within(t, fleetWait, "both runs' deltas on /events/stream?deltas=true", func() bool {
		for {
			select {
			case f, ok := <-events:
				if !ok {
					t.Fatal("/events/stream ended")
				}
				var ev svc.RuntimeEvent
				if json.Unmarshal([]byte(f.data), &ev) == nil && ev.EventType == svc.EventAgentDelta && got[ev.TaskID] != nil {
					if len(ev.Payload) != 2 {
						t.Errorf("agent_delta payload %v, want text and index", ev.Payload)
					}
					text, _ := ev.Payload["text"].(string)
					got[ev.TaskID].WriteString(text)
				}
			default:
				return got["followed"].String() == writerAnswer && got["streamed"].String() == writerAnswer
			}
		}
	})
	resp = openStream(t, ctx, http.MethodGet, s.url+"/events?limit=1000", "", nil)
	all, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(all), `"followed"`) || strings.Contains(string(all), "agent_delta") {
		t.Errorf("the serve node's event store (%d): want the followed run's events and no agent_delta: %.300s", resp.StatusCode, all)
	}
	if watched && onBroker.Load() == 0 {
		t.Error("no delta seen on the broker: the check of the unread run proves nothing")
	}
}

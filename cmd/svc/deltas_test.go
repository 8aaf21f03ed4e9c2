package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc"
)

// streamFrame is one frame of an event stream.
type streamFrame struct {
	id, event, data string
	hasID           bool
}

// readStreamFrames reads the frames of an event stream until it ends or ctx
// does, sending each to the returned channel.
func readStreamFrames(body io.Reader) <-chan streamFrame {
	out := make(chan streamFrame, 1024)
	go func() {
		defer close(out)
		sc := bufio.NewScanner(body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var f streamFrame
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if f.event != "" || f.data != "" {
					out <- f
				}
				f = streamFrame{}
			case strings.HasPrefix(line, "id: "):
				f.id, f.hasID = line[4:], true
			case strings.HasPrefix(line, "event: "):
				f.event = line[7:]
			case strings.HasPrefix(line, "data: "):
				f.data = line[6:]
			}
		}
	}()
	return out
}

// streamingSpecs has an agent that streams a fixed answer word by word,
// 30 ms apart, after 300 ms (time to subscribe).
func streamingSpecs(t *testing.T) string {
	return writeSpecs(t, map[string]string{
		"agents/writer.yaml": "version: 1\nname: writer\nmodel: test:echo\nmodel_settings: {output: \"one two three four five six\", latency_ms: 300, stream_interval_ms: 30}\n",
	})
}

const writerAnswer = "one two three four five six"

func openStream(t *testing.T, ctx context.Context, method, url, body string, hdr map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// A run asked for as text/event-stream answers with its deltas as they
// come, then the AgentResult; the text of the deltas is the answer.
func TestServeRunAsEventStream(t *testing.T) {
	t.Parallel()
	s := startServe(t, nil, "--specs", streamingSpecs(t), "--delta-interval-ms", "0")
	resp := openStream(t, t.Context(), http.MethodPost, s.url+"/agents/writer/run", `{"input":"x"}`,
		map[string]string{"Accept": "text/event-stream", "Content-Type": "application/json"})
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var text strings.Builder
	var deltas int
	var result *svc.AgentResult
	for f := range readStreamFrames(resp.Body) {
		switch f.event {
		case "delta":
			var d struct {
				Agent string `json:"agent"`
				Index int    `json:"index"`
				Text  string `json:"text"`
			}
			if err := json.Unmarshal([]byte(f.data), &d); err != nil || d.Agent != "writer" || d.Index != deltas {
				t.Fatalf("delta frame %q: %+v, %v", f.data, d, err)
			}
			if result != nil {
				t.Fatal("a delta after the result")
			}
			deltas++
			text.WriteString(d.Text)
		case "result":
			result = new(svc.AgentResult)
			if err := json.Unmarshal([]byte(f.data), result); err != nil {
				t.Fatalf("result frame %q: %v", f.data, err)
			}
		default:
			t.Fatalf("unexpected frame %+v", f)
		}
	}
	if result == nil || !result.Success || string(result.Output) != `"`+writerAnswer+`"` {
		t.Fatalf("result %+v", result)
	}
	// With coalescing off, each word the model streamed is a delta.
	if text.String() != writerAnswer || deltas != 6 {
		t.Errorf("%d deltas make %q, want the 6 words of %q", deltas, text.String(), writerAnswer)
	}

	// A failed run ends the stream with an error frame holding the problem.
	resp = openStream(t, t.Context(), http.MethodPost, s.url+"/agents/writer/run", `{"input":"x","token_budget":1}`,
		map[string]string{"Accept": "text/event-stream", "Content-Type": "application/json"})
	var last streamFrame
	for f := range readStreamFrames(resp.Body) {
		last = f
	}
	var p struct {
		Error  string `json:"error"`
		Status int    `json:"status"`
	}
	if last.event != "error" || json.Unmarshal([]byte(last.data), &p) != nil || p.Error != "BudgetExceededError" || p.Status != 429 {
		t.Errorf("last frame %+v: want an error frame with the BudgetExceededError problem", last)
	}
}

// /events/stream carries agent_delta events only to a subscriber that asks
// (?deltas=true); /runs/{id}/stream carries a followed run's deltas, with
// no SSE id, only with ?deltas=true, and nobody else sees them.
func TestServeDeltaSubscriptions(t *testing.T) {
	s := startServe(t, nil, "--specs", streamingSpecs(t))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	all := readStreamFrames(openStream(t, ctx, http.MethodGet, s.url+"/events/stream?deltas=true", "", nil).Body)
	plain := readStreamFrames(openStream(t, ctx, http.MethodGet, s.url+"/events/stream", "", nil).Body)

	if resp := openStream(t, ctx, http.MethodGet, s.url+"/events/stream?deltas=maybe", "", nil); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("deltas=maybe: status %d, want 400", resp.StatusCode)
	}

	resp := openStream(t, ctx, http.MethodPost, s.url+"/submit", `{"target":"writer","task":{"input":"x"}}`, map[string]string{"Content-Type": "application/json"})
	var sub struct {
		RunID string `json:"run_id"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&sub); err != nil || sub.RunID == "" {
		t.Fatalf("submit: %d %v", resp.StatusCode, err)
	}
	followed := readStreamFrames(openStream(t, ctx, http.MethodGet, s.url+"/runs/"+sub.RunID+"/stream?deltas=true", "", nil).Body)
	unfollowed := readStreamFrames(openStream(t, ctx, http.MethodGet, s.url+"/runs/"+sub.RunID+"/stream", "", nil).Body)

	var text strings.Builder
	var sawCompleted bool
	for f := range followed {
		switch f.event {
		case "delta":
			if f.hasID {
				t.Errorf("delta frame with id %q: deltas are not stored, so they have none", f.id)
			}
			if sawCompleted {
				t.Error("a delta after agent_completed")
			}
			var ev svc.RunEvent
			if err := json.Unmarshal([]byte(f.data), &ev); err != nil || ev.Type != svc.RunDelta || ev.RunID != sub.RunID || ev.Agent != "writer" {
				t.Fatalf("delta %q: %+v %v", f.data, ev, err)
			}
			text.WriteString(ev.Text)
		case "agent_completed":
			sawCompleted = true
		}
	}
	if text.String() != writerAnswer || !sawCompleted {
		t.Errorf("followed stream: deltas make %q (want %q), completed %v", text.String(), writerAnswer, sawCompleted)
	}
	for f := range unfollowed {
		if f.event == "delta" {
			t.Errorf("a stream without ?deltas=true got %+v", f)
		}
	}

	// The events: agent_delta only where asked for, ending with the run.
	collect := func(frames <-chan streamFrame) (deltas int, completed bool) {
		for !completed {
			select {
			case f := <-frames:
				var ev svc.RuntimeEvent
				if f.data == "" || json.Unmarshal([]byte(f.data), &ev) != nil {
					continue
				}
				switch ev.EventType {
				case svc.EventAgentDelta:
					deltas++
				case svc.EventAgentCompleted:
					completed = true
				}
			case <-ctx.Done():
				t.Fatal("no agent_completed on /events/stream")
			}
		}
		return deltas, completed
	}
	if n, _ := collect(all); n == 0 {
		t.Error("/events/stream?deltas=true saw no agent_delta")
	}
	if n, _ := collect(plain); n != 0 {
		t.Errorf("/events/stream saw %d agent_delta events without asking", n)
	}

	// Deltas are live only: the event store kept none.
	resp = openStream(t, ctx, http.MethodGet, s.url+"/events?event_type=agent_completed&limit=10", "", nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/events: %d", resp.StatusCode)
	}
	resp = openStream(t, ctx, http.MethodGet, s.url+"/events?limit=1000", "", nil)
	body, _ := io.ReadAll(resp.Body)
	if strings.Contains(string(body), "agent_delta") {
		t.Errorf("the event store kept agent_delta events: %.300s", body)
	}
}

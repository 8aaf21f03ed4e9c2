package client

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"testing/iotest"

	svc "github.com/svc-dev/svc"
)

func TestReadSSE(t *testing.T) {
	ev := func(seq int64, typ svc.RunEventType) svc.RunEvent {
		return svc.RunEvent{Seq: seq, Type: typ, RunID: "r"}
	}
	frame := func(e svc.RunEvent) string {
		b, _ := json.Marshal(e)
		return string(b)
	}
	for _, tc := range []struct {
		name, in string
		want     []svc.RunEvent
	}{
		{"frames", "id: 1\nevent: agent_started\ndata: " + frame(ev(1, svc.RunAgentStarted)) + "\n\n" +
			": ping\n\nid: 2\nevent: agent_completed\ndata: " + frame(ev(2, svc.RunAgentCompleted)) + "\n\n",
			[]svc.RunEvent{ev(1, svc.RunAgentStarted), ev(2, svc.RunAgentCompleted)}},
		{"CRLF and lone CR", "id: 1\r\ndata: " + frame(ev(1, svc.RunAgentStarted)) + "\r\n\r\n" +
			"data: " + frame(ev(2, svc.RunRunCancelled)) + "\r\r",
			[]svc.RunEvent{ev(1, svc.RunAgentStarted), ev(2, svc.RunRunCancelled)}},
		{"malformed data skipped", "data: {not json\n\ndata: " + frame(ev(3, svc.RunAgentFailed)) + "\n\n",
			[]svc.RunEvent{ev(3, svc.RunAgentFailed)}},
		{"id fills a missing seq", "id: 9\ndata: {\"type\":\"agent_started\",\"run_id\":\"r\"}\n\n",
			[]svc.RunEvent{ev(9, svc.RunAgentStarted)}},
		{"data split over lines", "data: {\"seq\":4,\ndata: \"type\":\"agent_started\",\"run_id\":\"r\"}\n\n",
			[]svc.RunEvent{ev(4, svc.RunAgentStarted)}},
		{"no space after colon", "data:" + frame(ev(5, svc.RunGroupCompleted)) + "\n\n",
			[]svc.RunEvent{ev(5, svc.RunGroupCompleted)}},
		{"unterminated frame dropped", "data: " + frame(ev(1, svc.RunAgentStarted)), nil},
		{"only comments", ": ping\n\n: ping\n\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// One byte at a time, so every split point is exercised.
			var got []svc.RunEvent
			if err := readSSE(iotest.OneByteReader(strings.NewReader(tc.in)), func(e svc.RunEvent) bool {
				got = append(got, e)
				return true
			}); err != nil {
				t.Fatal(err)
			}
			if !slices.EqualFunc(got, tc.want, func(a, b svc.RunEvent) bool {
				return a.Seq == b.Seq && a.Type == b.Type && a.RunID == b.RunID
			}) {
				t.Errorf("events = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestReadSSEStops(t *testing.T) {
	in := strings.Repeat("data: {\"seq\":1,\"type\":\"agent_started\"}\n\n", 5)
	n := 0
	err := readSSE(strings.NewReader(in), func(svc.RunEvent) bool { n++; return n < 2 })
	if err != errStopped || n != 2 {
		t.Errorf("readSSE after emit said stop: %v with %d events, want errStopped after 2", err, n)
	}
}

func FuzzReadSSE(f *testing.F) {
	for _, s := range []string{
		"id: 1\nevent: agent_started\ndata: {\"seq\":1,\"type\":\"agent_started\",\"run_id\":\"r\",\"agent\":null}\n\n",
		": ping\n\n", "data: x\r\n\r\n", "id: -3\ndata: {}\n\n", "data\n\n", "\r", "",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		frames := 0
		_ = readSSE(strings.NewReader(string(data)), func(e svc.RunEvent) bool {
			frames++
			if e.Seq < 0 && !strings.Contains(string(data), "-") {
				t.Fatalf("negative seq %d from %q", e.Seq, data)
			}
			return true
		})
		// Every emitted frame ended with a blank line; there cannot be more
		// of them than line ends.
		if ends := strings.Count(string(data), "\n") + strings.Count(string(data), "\r"); frames > ends {
			t.Fatalf("%d frames from %d line ends", frames, ends)
		}
	})
}

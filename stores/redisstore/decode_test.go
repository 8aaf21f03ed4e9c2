package redisstore

import (
	"testing"
	"time"

	"github.com/svc-dev/svc"
)

// FuzzDecodeEntry feeds stream entries as another process (or a person with
// redis-cli) could have written them: decodeEntry must not panic, and what
// eventFields writes must come back unchanged.
func FuzzDecodeEntry(f *testing.F) {
	f.Add("1-0", "agent_started", "2025-03-14T15:09:26.535897Z", "a", "t", "", false)
	f.Add("7-1", "", "", "", "", "", true)
	f.Add("-1-0", "x", "nope", "", "", "boom", false)
	f.Add("99999999999999999999-0", "agent_failed", "2025-03-14T15:09:26Z", "", "", "e", false)
	f.Fuzz(func(t *testing.T, id, typ, ts, agent, task, errText string, end bool) {
		values := map[string]any{"type": typ, "ts": ts, "agent": agent, "task_id": task, "error": errText}
		if end {
			values["end"] = "1"
		}
		ev, isEnd, err := decodeEntry(id, values)
		if err == nil && !isEnd && (ev.Seq <= 0 || ev.Type == "") {
			t.Fatalf("decodeEntry(%q) accepted %+v", id, ev)
		}

		// Round trip of what the store writes.
		in := svc.RunEvent{Type: svc.RunEventType(typ), Agent: agent, TaskID: task, Error: errText,
			Timestamp: time.Unix(0, int64(len(ts))*1_000_003).UTC()}
		if in.Type == "" {
			return
		}
		fields := eventFields(in)
		m := map[string]any{}
		for i := 0; i < len(fields); i += 2 {
			m[fields[i].(string)] = fields[i+1]
		}
		got, isEnd, err := decodeEntry("5-0", m)
		in.Seq = 5
		if err != nil || isEnd || got.Seq != in.Seq || got.Type != in.Type || got.Agent != in.Agent ||
			got.TaskID != in.TaskID || got.Error != in.Error || !got.Timestamp.Equal(in.Timestamp) {
			t.Fatalf("round trip of %+v = %+v, end %v, %v", in, got, isEnd, err)
		}
	})
}

// FuzzDecodeRecord: any hash must decode to a valid record or an error.
func FuzzDecodeRecord(f *testing.F) {
	f.Add("r1", "running", "2025-03-14T15:09:26.535897Z", "2025-03-14T15:09:27Z", `{"total":1}`, `{"a":1}`, true, true)
	f.Add("", "bogus", "x", "y", "{", "", false, false)
	f.Fuzz(func(t *testing.T, id, state, created, updated, progress, result string, hasProgress, hasResult bool) {
		h := map[string]string{"run_id": id, "state": state, "created_at": created, "updated_at": updated}
		if hasProgress {
			h["progress"] = progress
		}
		if hasResult {
			h["result"] = result
		}
		rec, err := decodeRecord(h)
		if err != nil {
			return
		}
		if rec.RunID != id || !rec.State.Valid() || (rec.Progress != nil) != hasProgress || hasResult && string(rec.Result) != result {
			t.Fatalf("decodeRecord(%v) = %+v", h, rec)
		}
	})
}

func TestNextID(t *testing.T) {
	for in, want := range map[string]string{"0-0": "0-1", "5-0": "5-1", "5-1": "5-2", "12-99": "12-100", "bad": "bad"} {
		if got := nextID(in); got != want {
			t.Errorf("nextID(%q) = %q, want %q", in, got, want)
		}
	}
}

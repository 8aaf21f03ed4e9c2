package pebblestore

import (
	"bytes"
	"testing"
)

// FuzzDecodeRecord: a record read from disk decodes to a valid record or an
// error, and a decoded record survives encoding unchanged.
func FuzzDecodeRecord(f *testing.F) {
	f.Add([]byte(`{"run_id":"r1","target":"echo","kind":"agent","state":"running","progress":{"total":2},` +
		`"result":"eyJhIjoxfQ==","reason":"x","created_at":"2025-03-14T15:09:26.535897Z","updated_at":"2025-03-14T15:09:27Z","last_seq":3}`))
	f.Add([]byte(`{"run_id":"","state":"bogus"}`))
	f.Add([]byte(`{"run_id":"r","state":"pending","last_seq":-1}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"run_id":"r","state":"running","created_at":"2025-03-14T15:09:26Z","updated_at":"2025-03-14T15:09:26Z",` +
		`"last_seq":1,"step_seq":2,"step_bytes":9,"resumed":3}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := decodeRecord(b)
		if err != nil {
			return
		}
		if st.RunID == "" || !st.State.Valid() || st.LastSeq < 0 {
			t.Fatalf("decodeRecord accepted %+v", st)
		}
		enc, err := encodeRecord(st)
		if err != nil {
			t.Fatalf("encodeRecord(%+v): %v", st, err)
		}
		again, err := decodeRecord(enc)
		if err != nil {
			t.Fatalf("decodeRecord of its own encoding %s: %v", enc, err)
		}
		if again.RunID != st.RunID || again.State != st.State || again.LastSeq != st.LastSeq ||
			again.Resumed != st.Resumed || again.StepSeq != st.StepSeq || again.Steps != st.StepSeq ||
			!bytes.Equal(again.Result, st.Result) || !again.CreatedAt.Equal(st.CreatedAt) ||
			(again.Progress == nil) != (st.Progress == nil) || again.Progress != nil && *again.Progress != *st.Progress {
			t.Fatalf("round trip changed %+v into %+v", st, again)
		}
	})
}

// A record written before runs could be resumed (no resumed field, no
// step fields) loads as a run never resumed, without steps.
func TestDecodeOldRecord(t *testing.T) {
	st, err := decodeRecord([]byte(`{"run_id":"r1","target":"echo","kind":"agent","state":"running",` +
		`"created_at":"2025-03-14T15:09:26.535897Z","updated_at":"2025-03-14T15:09:27Z","last_seq":3}`))
	if err != nil || st.Resumed != 0 || st.Steps != 0 || st.Task != nil || st.State != "running" || st.LastSeq != 3 {
		t.Fatalf("decodeRecord of an old record = %+v, %v", st, err)
	}
	if _, err := decodeRecord([]byte(`{"run_id":"r1","state":"running","last_seq":0,"resumed":-1}`)); err == nil {
		t.Error("decodeRecord accepted a negative resumed")
	}
}

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
			!bytes.Equal(again.Result, st.Result) || !again.CreatedAt.Equal(st.CreatedAt) ||
			(again.Progress == nil) != (st.Progress == nil) || again.Progress != nil && *again.Progress != *st.Progress {
			t.Fatalf("round trip changed %+v into %+v", st, again)
		}
	})
}

package fleetwire_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/fleetwire"
)

// TestEnvelopeDeltasTo: a task that asks for deltas gets them relayed to
// the publisher its result goes to, even when its events go to another
// (relay_to): that publisher holds the listener.
func TestEnvelopeDeltasTo(t *testing.T) {
	e := sampleTask()
	if got := e.DeltasTo(); got != "" {
		t.Errorf("DeltasTo without deltas = %q", got)
	}
	e.Deltas, e.RelayTo = true, fleetwire.EventSubject("origin")
	if got := e.DeltasTo(); got != "svc.events.rt1" {
		t.Errorf("DeltasTo = %q, want the reply_to publisher's events subject", got)
	}
	e.PublishEvents = false
	if got := e.DeltasTo(); got != "svc.events.rt1" {
		t.Errorf("DeltasTo without publish_events = %q", got)
	}
	e.ReplyTo = "elsewhere"
	if got := e.DeltasTo(); got != "" {
		t.Errorf("DeltasTo with a foreign reply_to = %q", got)
	}
	r := fleetwire.Envelope{Kind: fleetwire.MsgResult, TaskID: "t", Result: &svc.AgentResult{}, DeltaCount: -1}
	if _, err := r.Encode(); err == nil {
		t.Error("a negative delta_count encoded")
	}
}

// TestEnvelopeDeltasOlderPeer: the deltas flag and the delta count are
// plain JSON fields an older worker or publisher ignores, and left out of
// the signature, so such a peer, which drops them before it checks the
// MAC, still verifies a signed task that asks for deltas (or a result
// that counts them); on the wire they are absent when unset.
func TestEnvelopeDeltasOlderPeer(t *testing.T) {
	keys := map[string][]byte{"k": []byte("key")}
	for _, e := range []*fleetwire.Envelope{
		func() *fleetwire.Envelope { e := sampleTask(); e.Deltas = true; return e }(),
		{Kind: fleetwire.MsgResult, TaskID: "t", SpanID: "s", Attempt: 1, Result: &svc.AgentResult{Success: true}, DeltaCount: 7},
	} {
		if err := e.Sign("k", keys["k"]); err != nil {
			t.Fatal(err)
		}
		data, err := e.Encode()
		if err != nil {
			t.Fatal(err)
		}
		// What an older peer re-encodes: the envelope without the fields.
		var m map[string]json.RawMessage
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
		if len(m["deltas"])+len(m["delta_count"]) == 0 {
			t.Fatalf("%s: neither deltas nor delta_count on the wire", data)
		}
		delete(m, "deltas")
		delete(m, "delta_count")
		old, _ := json.Marshal(m)
		got, err := fleetwire.Decode(old)
		if err != nil {
			t.Fatal(err)
		}
		if err := got.Verify(keys); err != nil {
			t.Errorf("%s without the delta fields: %v", e.Kind, err)
		}
		// And the signature still covers the rest.
		got.TaskID = "other"
		if err := got.Verify(keys); err == nil {
			t.Errorf("%s: a tampered task id verified", e.Kind)
		}
	}
	plain, _ := sampleTask().Encode()
	if bytes.Contains(plain, []byte(`"deltas"`)) || strings.Contains(string(plain), "delta_count") {
		t.Errorf("a task without deltas carries the fields: %s", plain)
	}
}

package fleetwire_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/fleetwire"
)

func taskBatch(t *testing.T, keyID string, key []byte, envs ...fleetwire.Envelope) []byte {
	t.Helper()
	w := fleetwire.NewBatchWriter(fleetwire.MsgTasks, "triage", fleetwire.ResultSubject("pub-1"), "")
	for i := range envs {
		item, err := fleetwire.EncodeItem(fleetwire.MsgTasks, &envs[i])
		if err != nil {
			t.Fatal(err)
		}
		w.Add(item)
	}
	data, err := w.Seal(keyID, key)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// twoTasks are two tasks as a publisher builds them (agent and reply_to
// set: the batch carries them once).
func twoTasks() []fleetwire.Envelope {
	envs := []fleetwire.Envelope{
		{TaskID: "a", RunID: "r", SpanID: "s1", Input: json.RawMessage(`{"n":1}`), Depth: 1, Attempt: 3, Deltas: true,
			Metadata: map[string]string{"k": "v"}},
		{TaskID: "b", RunID: "r", SpanID: "s2", Input: json.RawMessage(`"x"`), Deadline: 1_900_000_000_000, PublishEvents: true},
	}
	for i := range envs {
		envs[i].Agent, envs[i].ReplyTo = "triage", fleetwire.ResultSubject("pub-1")
	}
	return envs
}

// TestBatchRoundTrip: the tasks of a batch come out as the envelopes that
// went in, each with the agent and reply subject the batch carries once,
// and a signed batch verifies with the key.
func TestBatchRoundTrip(t *testing.T) {
	keys := map[string][]byte{"k1": []byte("0123456789abcdef")}
	data := taskBatch(t, "k1", keys["k1"], twoTasks()...)
	if !fleetwire.IsBatch(data) {
		t.Fatalf("IsBatch(%s) = false", data)
	}
	b, err := fleetwire.DecodeBatch(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Verify(keys); err != nil {
		t.Fatalf("Verify = %v", err)
	}
	envs, err := b.Envelopes()
	if err != nil {
		t.Fatal(err)
	}
	if len(envs) != 2 {
		t.Fatalf("%d envelopes", len(envs))
	}
	for i, e := range envs {
		want := twoTasks()[i]
		if e.Kind != fleetwire.MsgTask || e.Agent != "triage" || e.ReplyTo != fleetwire.ResultSubject("pub-1") || e.V != fleetwire.Version {
			t.Errorf("item %d: kind %q agent %q reply_to %q v %d", i, e.Kind, e.Agent, e.ReplyTo, e.V)
		}
		if e.TaskID != want.TaskID || e.SpanID != want.SpanID || string(e.Input) != string(want.Input) || e.Depth != want.Depth ||
			e.Attempt != want.Attempt || e.Deltas != want.Deltas || e.Deadline != want.Deadline || e.PublishEvents != want.PublishEvents ||
			e.Metadata["k"] != want.Metadata["k"] {
			t.Errorf("item %d = %+v, want %+v", i, e, want)
		}
	}
}

// TestBatchSignature: a batch with a changed byte anywhere in its items
// or shared fields, signed with another key, or unsigned, is refused.
func TestBatchSignature(t *testing.T) {
	keys := map[string][]byte{"k1": []byte("0123456789abcdef")}
	data := taskBatch(t, "k1", keys["k1"], twoTasks()...)
	for _, tamper := range []struct{ from, to string }{
		{`"n":1`, `"n":2`}, {`"task_id":"b"`, `"task_id":"c"`}, {`"agent":"triage"`, `"agent":"billing"`},
		{`svc.results.pub-1`, `svc.results.pub-2`}, {`"deltas":true`, `"deltas":false`},
	} {
		bad := bytes.Replace(data, []byte(tamper.from), []byte(tamper.to), 1)
		if bytes.Equal(bad, data) {
			t.Fatalf("%q not in %s", tamper.from, data)
		}
		b, err := fleetwire.DecodeBatch(bad)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Verify(keys); !errors.Is(err, fleetwire.ErrBadSignature) {
			t.Errorf("%s → %s: Verify = %v, want ErrBadSignature", tamper.from, tamper.to, err)
		}
	}
	other := taskBatch(t, "k1", []byte("another key, 16+"), twoTasks()...)
	if b, _ := fleetwire.DecodeBatch(other); b.Verify(keys) == nil {
		t.Error("a batch signed with another key verified")
	}
	if b, _ := fleetwire.DecodeBatch(taskBatch(t, "", nil, twoTasks()...)); !errors.Is(b.Verify(keys), fleetwire.ErrUnsigned) {
		t.Error("an unsigned batch was not ErrUnsigned")
	}
	if b, _ := fleetwire.DecodeBatch(taskBatch(t, "k9", []byte("0123456789abcdef"), twoTasks()...)); !errors.Is(b.Verify(keys), fleetwire.ErrUnknownKey) {
		t.Error("a batch signed with an unknown key id was not ErrUnknownKey")
	}
}

// TestBatchRefusedByVersion1Decoder: what a worker of an earlier release
// does with a batch: Decode (its only decoder) refuses it, naming the
// version, so it dead-letters the message rather than running anything.
func TestBatchRefusedByVersion1Decoder(t *testing.T) {
	_, err := fleetwire.Decode(taskBatch(t, "", nil, twoTasks()...))
	if err == nil || !strings.Contains(err.Error(), "version 2 not supported") {
		t.Errorf("Decode(batch) = %v, want version 2 not supported", err)
	}
}

// TestBatchItemsChecked: a batch whose item lacks what a task needs is
// refused whole, with the item's index.
func TestBatchItemsChecked(t *testing.T) {
	_, err := fleetwire.EncodeItem(fleetwire.MsgTasks, &fleetwire.Envelope{TaskID: "a", Agent: "triage", ReplyTo: "svc.results.p"})
	if err == nil {
		t.Error("an item without input encoded")
	}
	raw := []byte(`{"v":2,"kind":"tasks","agent":"triage","reply_to":"svc.results.p","items":[{"task_id":"a","input":1,"depth":0},{"task_id":"","input":1,"depth":0}]}`)
	b, err := fleetwire.DecodeBatch(raw)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Envelopes(); err == nil || !strings.Contains(err.Error(), "item 1") {
		t.Errorf("Envelopes = %v, want item 1 refused", err)
	}
	for _, bad := range []string{`{"v":2,"kind":"tasks","items":[]}`, `{"v":2,"kind":"nope","items":[]}`, `{"v":3,"kind":"results","items":[]}`,
		`{"v":2,"kind":"results","items":{}}`, `{"v":2,"kind":"results","items":[]} x`} {
		if _, err := fleetwire.DecodeBatch([]byte(bad)); err == nil {
			t.Errorf("DecodeBatch(%s) = nil error", bad)
		}
	}
	res := svc.AgentResult{TaskID: "a", Success: true}
	w := fleetwire.NewBatchWriter(fleetwire.MsgResults, "", "", "worker-1")
	item, err := fleetwire.EncodeItem(fleetwire.MsgResults, &fleetwire.Envelope{TaskID: "a", SpanID: "s", Attempt: 2, Result: &res})
	if err != nil {
		t.Fatal(err)
	}
	w.Add(item)
	data, _ := w.Seal("", nil)
	rb, err := fleetwire.DecodeBatch(data)
	if err != nil {
		t.Fatal(err)
	}
	envs, err := rb.Envelopes()
	if err != nil || len(envs) != 1 || envs[0].Kind != fleetwire.MsgResult || envs[0].RuntimeID != "worker-1" || !envs[0].Result.Success {
		t.Errorf("results batch = %+v, %v", envs, err)
	}
}

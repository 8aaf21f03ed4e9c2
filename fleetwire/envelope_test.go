package fleetwire_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/fleetwire"
)

func sampleTask() *fleetwire.Envelope {
	e := &fleetwire.Envelope{
		Kind: fleetwire.MsgTask, TaskID: "t1", RunID: "r1", TraceID: "tr", SpanID: "s1",
		Agent: "triage", Input: json.RawMessage(`{"text":"<hi> & bye","n":1.5e3}`),
		Metadata: map[string]string{"b": "2", "a": "1"}, Depth: 2,
		ReplyTo: fleetwire.ResultSubject("rt1"), PublishEvents: true, Attempt: 1,
	}
	e.SetDeadline(time.UnixMilli(1_800_000_000_123))
	return e
}

func TestEnvelopeRoundTrip(t *testing.T) {
	e := sampleTask()
	data, err := e.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := fleetwire.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if got.V != 1 || got.TaskID != "t1" || got.Agent != "triage" || got.Depth != 2 ||
		!got.DeadlineTime().Equal(time.UnixMilli(1_800_000_000_123)) || !reflect.DeepEqual(got.Metadata, e.Metadata) {
		t.Fatalf("round trip changed the envelope: %+v", got)
	}
	var m map[string]any
	_ = json.Unmarshal(data, &m)
	for _, k := range []string{"v", "kind", "task_id", "run_id", "trace_id", "span_id", "agent", "input", "depth", "deadline", "reply_to", "publish_events", "attempt"} {
		if _, ok := m[k]; !ok {
			t.Errorf("wire form lacks %q: %s", k, data)
		}
	}
	if got.Expired(time.UnixMilli(1_800_000_000_000)) || !got.Expired(time.UnixMilli(1_800_000_000_123)) {
		t.Error("Expired is wrong around the deadline")
	}
}

func TestEnvelopeResultRoundTrip(t *testing.T) {
	res := svc.AgentResult{AgentName: "a", TaskID: "t1", Success: false, Error: &svc.ErrorInfo{Type: "ModelError", Message: "boom"},
		Metadata: svc.ResultMetadata{TraceID: "tr", DurationMS: 12.345678901234, TokensUsed: 7, CostUSD: 0.1 + 0.2, Backend: "broker:nats"}}
	e := &fleetwire.Envelope{Kind: fleetwire.MsgResult, TaskID: "t1", Result: &res, RuntimeID: "w1"}
	if err := e.Sign("k1", []byte("secret")); err != nil {
		t.Fatal(err)
	}
	data, err := e.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := fleetwire.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := got.Verify(map[string][]byte{"k1": []byte("secret")}); err != nil {
		t.Fatalf("Verify after the wire: %v", err)
	}
	if got.Result.Metadata.CostUSD != res.Metadata.CostUSD || got.Result.Error.Type != "ModelError" || got.RuntimeID != "w1" {
		t.Fatalf("result changed: %+v", got.Result)
	}
}

func TestEnvelopeSignVerify(t *testing.T) {
	keys := map[string][]byte{"old": []byte("k-old"), "new": []byte("k-new")}
	e := sampleTask()
	if err := e.Verify(keys); !errors.Is(err, fleetwire.ErrUnsigned) {
		t.Fatalf("unsigned: %v", err)
	}
	if err := e.Sign("new", keys["new"]); err != nil {
		t.Fatal(err)
	}
	data, _ := e.Encode()
	got, err := fleetwire.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := got.Verify(keys); err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if err := got.Verify(map[string][]byte{"old": keys["old"]}); !errors.Is(err, fleetwire.ErrUnknownKey) {
		t.Errorf("unknown key: %v", err)
	}
	if err := got.Verify(map[string][]byte{"new": []byte("other")}); !errors.Is(err, fleetwire.ErrBadSignature) {
		t.Errorf("wrong key: %v", err)
	}
	tampered := []*fleetwire.Envelope{}
	for _, f := range []func(*fleetwire.Envelope){
		func(e *fleetwire.Envelope) { e.Depth = 0 },
		func(e *fleetwire.Envelope) { e.Input = json.RawMessage(`{"text":"other"}`) },
		func(e *fleetwire.Envelope) { e.ReplyTo = "svc.results.evil" },
		func(e *fleetwire.Envelope) { e.Metadata["a"] = "x" },
		func(e *fleetwire.Envelope) { e.KeyID = "old" },
		func(e *fleetwire.Envelope) { e.Sig = e.Sig[:len(e.Sig)-2] + "AA" },
		func(e *fleetwire.Envelope) { e.Sig = "!!" },
	} {
		c, _ := fleetwire.Decode(data)
		f(c)
		tampered = append(tampered, c)
	}
	for i, c := range tampered {
		if err := c.Verify(keys); err == nil {
			t.Errorf("tampered envelope %d verified", i)
		}
	}
	if err := e.Sign("x", nil); err == nil {
		t.Error("Sign with an empty key succeeded")
	}
}

func TestDecodeEnvelopeRejects(t *testing.T) {
	for name, in := range map[string]string{
		"not json":       `nope`,
		"version":        `{"v":2,"kind":"cancel","run_id":"r"}`,
		"no version":     `{"kind":"cancel","run_id":"r"}`,
		"no kind":        `{"v":1}`,
		"unknown kind":   `{"v":1,"kind":"other"}`,
		"task no agent":  `{"v":1,"kind":"task","task_id":"t","reply_to":"x","input":1}`,
		"task no input":  `{"v":1,"kind":"task","task_id":"t","agent":"a","reply_to":"x"}`,
		"task no reply":  `{"v":1,"kind":"task","task_id":"t","agent":"a","input":1}`,
		"result no body": `{"v":1,"kind":"result","task_id":"t"}`,
		"cancel no run":  `{"v":1,"kind":"cancel"}`,
		"negative depth": `{"v":1,"kind":"cancel","run_id":"r","depth":-1}`,
		"trailing data":  `{"v":1,"kind":"cancel","run_id":"r"} {}`,
		"wrong type":     `{"v":1,"kind":"cancel","run_id":7}`,
	} {
		if _, err := fleetwire.Decode([]byte(in)); err == nil {
			t.Errorf("%s: %s accepted", name, in)
		} else if !strings.HasPrefix(err.Error(), "envelope: ") {
			t.Errorf("%s: error %q lacks the envelope prefix", name, err)
		}
	}
	if _, err := fleetwire.Decode([]byte(`{"v":1,"kind":"task","task_id":"t","agent":"a","reply_to":"x","input":null}`)); err != nil {
		t.Errorf("null input refused: %v", err)
	}
}

func TestSubjects(t *testing.T) {
	for got, want := range map[string]string{
		fleetwire.TaskSubject("triage"):                          "svc.tasks.triage",
		fleetwire.ResultSubject("rt"):                            "svc.results.rt",
		fleetwire.EventSubject("rt"):                             "svc.events.rt",
		fleetwire.DeadLetterSubject("svc.tasks.triage"):          "svc.dead.tasks.triage",
		fleetwire.DeadLetterSubject("other.x"):                   "svc.dead.other.x",
		fleetwire.SubjectWorkers + "|" + fleetwire.SubjectCancel: "svc.workers|svc.cancel",
	} {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
}

// FuzzDecodeEnvelope: the decoder never panics, and what it accepts
// re-encodes to bytes it decodes to the same envelope, so a signature made by
// the sender verifies at the receiver.
func FuzzDecodeEnvelope(f *testing.F) {
	data, _ := sampleTask().Encode()
	f.Add(data)
	f.Add([]byte(`{"v":1,"kind":"result","task_id":"t","result":{"agent_name":"a","output":{"x":[1,2.50,"\u003c"]},"metadata":{"cost_usd":1e-7}}}`))
	f.Add([]byte(`{"v":1,"kind":"cancel","run_id":"r","sig":"abc","key_id":"k"}`))
	f.Add([]byte(`{"v":1,"kind":"task","task_id":"t","agent":"a","reply_to":"x","input":"\xff"}`))
	key := []byte("fuzz-key")
	f.Fuzz(func(t *testing.T, in []byte) {
		e, err := fleetwire.Decode(in)
		if err != nil {
			return
		}
		if err := e.Sign("k", key); err != nil {
			return // e.g. raw input that cannot be re-encoded
		}
		wire, err := json.Marshal(e)
		if err != nil {
			t.Fatalf("signed envelope does not encode: %v", err)
		}
		back, err := fleetwire.Decode(wire)
		if err != nil {
			t.Fatalf("re-encoded envelope refused: %v\n%s", err, wire)
		}
		if err := back.Verify(map[string][]byte{"k": key}); err != nil {
			t.Fatalf("signature does not survive the wire: %v\n%s", err, wire)
		}
	})
}

func TestEnvelopeEventsTo(t *testing.T) {
	e := sampleTask()
	if got := e.EventsTo(); got != "svc.events.rt1" {
		t.Errorf("EventsTo = %q", got)
	}
	e.PublishEvents = false
	if got := e.EventsTo(); got != "" {
		t.Errorf("EventsTo without publish_events = %q", got)
	}
	e.PublishEvents, e.ReplyTo = true, "elsewhere"
	if got := e.EventsTo(); got != "" {
		t.Errorf("EventsTo with a foreign reply_to = %q", got)
	}
}

// A task a worker dispatched for a run nested in its own task relays its
// events to the outermost publisher (relay_to), never to a subject that is
// not an events subject.
func TestEnvelopeRelayTo(t *testing.T) {
	e := sampleTask()
	e.RelayTo = fleetwire.EventSubject("origin")
	if got := e.EventsTo(); got != "svc.events.origin" {
		t.Errorf("EventsTo with relay_to = %q", got)
	}
	for _, bad := range []string{fleetwire.TaskSubject("echo"), "svc.events.", fleetwire.ResultSubject("rt1")} {
		e.RelayTo = bad
		if got := e.EventsTo(); got != "" {
			t.Errorf("EventsTo with relay_to %q = %q, want none", bad, got)
		}
	}
	e.RelayTo, e.PublishEvents = fleetwire.EventSubject("origin"), false
	if got := e.EventsTo(); got != "" {
		t.Errorf("EventsTo without publish_events = %q", got)
	}
	e.PublishEvents, e.TokenBudget = true, -1
	if _, err := e.Encode(); err == nil {
		t.Error("a negative token_budget encoded")
	}
}

func TestKeyring(t *testing.T) {
	var off *fleetwire.Keyring
	e := sampleTask()
	if err := off.Sign(e); err != nil || e.Sig != "" {
		t.Errorf("nil keyring signed: %v %q", err, e.Sig)
	}
	if err := off.Verify(e); err != nil {
		t.Errorf("nil keyring refused an unsigned envelope: %v", err)
	}
	if k, err := fleetwire.ParseKeyring("  "); k != nil || err != nil {
		t.Errorf("empty spec = %v, %v", k, err)
	}
	k, err := fleetwire.ParseKeyring("new:0123456789abcdef-new, old:0123456789abcdef-old")
	if err != nil || k.SignID != "new" || len(k.Keys) != 2 {
		t.Fatalf("ParseKeyring = %+v, %v", k, err)
	}
	if err := k.Sign(e); err != nil || e.KeyID != "new" {
		t.Fatalf("Sign: %v, key id %q", err, e.KeyID)
	}
	if err := k.Verify(e); err != nil {
		t.Errorf("Verify: %v", err)
	}
	oldOnly := &fleetwire.Keyring{SignID: "old", Keys: map[string][]byte{"old": []byte("0123456789abcdef-old")}}
	if err := oldOnly.Verify(e); !errors.Is(err, fleetwire.ErrUnknownKey) {
		t.Errorf("Verify without the signing key = %v", err)
	}
	if err := k.Verify(sampleTask()); !errors.Is(err, fleetwire.ErrUnsigned) {
		t.Errorf("Verify of an unsigned envelope with keys = %v", err)
	}
	for _, bad := range []string{"nocolon", ":0123456789abcdef", "id:", "a:0123456789abcdef,a:0123456789abcdef", "short:s3cret", "a b:0123456789abcdef"} {
		if _, err := fleetwire.ParseKeyring(bad); err == nil {
			t.Errorf("ParseKeyring(%q) accepted", bad)
		}
	}
}

func TestLoadKeyring(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := write("keys", "# rotated 2026-11\n\nnew:0123456789abcdef-new\n  old : 0123456789abcdef-old  \n")
	k, err := fleetwire.LoadKeyring(p)
	if err != nil {
		t.Fatal(err)
	}
	if k.SignID != "new" || string(k.Keys["old"]) != "0123456789abcdef-old" || len(k.Keys) != 2 {
		t.Fatalf("LoadKeyring = %+v", k)
	}
	// The file and the environment variable give the same keys.
	env, err := fleetwire.ParseKeyring("new:0123456789abcdef-new,old:0123456789abcdef-old")
	if err != nil {
		t.Fatal(err)
	}
	e := sampleTask()
	if err := env.Sign(e); err != nil {
		t.Fatal(err)
	}
	if err := k.Verify(e); err != nil {
		t.Errorf("a key from the env var does not verify with the file's: %v", err)
	}
	for name, c := range map[string]struct{ body, want string }{
		"short":   {"ok:0123456789abcdef\n# c\nweak:abc\n", ":3: "},
		"nocolon": {"\njust-a-secret-without-id\n", ":2: "},
		"dup":     {"a:0123456789abcdef\na:0123456789abcdef\n", ":2: "},
		"empty":   {"# nothing\n", "no keys"},
	} {
		p := write(name, c.body)
		_, err := fleetwire.LoadKeyring(p)
		if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: LoadKeyring = %v, want an error naming %s and %q", name, err, p, c.want)
		}
	}
	if _, err := fleetwire.LoadKeyring(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing file was accepted")
	}
}

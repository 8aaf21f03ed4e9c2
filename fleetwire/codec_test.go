package fleetwire

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/svc-dev/svc"
)

// randomEnvelope is an envelope with every field set or not at random,
// strings drawn to include what JSON must escape.
func randomEnvelope(rng *rand.Rand) Envelope {
	strs := []string{"", "t-1", "ünïcödé ✓", "quote\" back\\slash", "ctl\x01\n\t\r", "<html>&", "\u2028line\u2029", "😀 astral",
		"019a7c5e-7a0b-7000-8000-0123456789ab"}
	s := func() string { return strs[rng.IntN(len(strs))] }
	raws := []string{`{"n":1,"text":"hello world"}`, `"x"`, `[1,2.5,-3e10,true,null,{"a":{}}]`, `null`, `12`}
	e := Envelope{TaskID: s(), RunID: s(), TraceID: s(), ParentTraceID: s(), SpanID: s(), Agent: s(),
		Depth: rng.IntN(5), Deadline: rng.Int64N(2e12), ReplyTo: s(), PublishEvents: rng.IntN(2) == 0,
		TokenBudget: rng.Int64N(1e6), RelayTo: s(), Attempt: rng.IntN(9), Deltas: rng.IntN(2) == 0, DeltaCount: rng.IntN(50),
		RuntimeID: s(), Delivery: rng.IntN(4)}
	if rng.IntN(2) == 0 {
		e.Input = json.RawMessage(raws[rng.IntN(len(raws))])
	}
	if rng.IntN(3) == 0 {
		e.Metadata = map[string]string{s() + "k": s(), "b": s()}
	}
	if rng.IntN(2) == 0 {
		r := &svc.AgentResult{AgentName: s(), TaskID: s(), Success: rng.IntN(2) == 0,
			Metadata: svc.ResultMetadata{TraceID: s(), DurationMS: rng.Float64() * 1000, TokensUsed: rng.Int64N(1e9),
				CostUSD: rng.Float64() / 1e3, Model: s(), Attempts: rng.IntN(4), Backend: s(), CostUnknown: rng.IntN(2) == 0,
				CachedTokens: rng.Int64N(100)}}
		if rng.IntN(2) == 0 {
			r.Output = json.RawMessage(raws[rng.IntN(len(raws))])
		}
		if rng.IntN(2) == 0 {
			r.Error = &svc.ErrorInfo{Type: s(), Message: s(), Reason: s()}
		}
		if rng.IntN(2) == 0 {
			r.Metadata.ModelsTried = []string{s(), s()}
		}
		e.Result = r
	}
	return e
}

// normal is e as encoding/json would give it back: a result's absent
// output reads as null.
func normal(e Envelope) Envelope {
	if e.Result != nil && len(e.Result.Output) == 0 {
		r := *e.Result
		r.Output = json.RawMessage("null")
		e.Result = &r
	}
	return e
}

// TestItemCodecAgreesWithEncodingJSON: what the hand-written codec
// writes, encoding/json reads as the same envelope, and what
// encoding/json writes, the codec reads as the same envelope, for
// envelopes with every field set or not and strings that need escaping.
func TestItemCodecAgreesWithEncodingJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		e := randomEnvelope(rng)
		want := normal(e)
		mine, err := encodeItem(&e)
		if err != nil {
			t.Fatal(err)
		}
		var viaStd Envelope
		if err := json.Unmarshal(mine, &viaStd); err != nil {
			t.Fatalf("%d: encoding/json refuses %s: %v", i, mine, err)
		}
		if !reflect.DeepEqual(viaStd, want) {
			t.Fatalf("%d: encoding/json read\n%+v\nfrom %s, want\n%+v", i, viaStd, mine, want)
		}
		std, err := json.Marshal([]Envelope{e})
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeItems(std)
		if err != nil {
			t.Fatalf("%d: decodeItems(%s): %v", i, std, err)
		}
		if len(got) != 1 || !reflect.DeepEqual(got[0], want) {
			t.Fatalf("%d: decodeItems read\n%+v\nfrom %s, want\n%+v", i, got, std, want)
		}
	}
}

// TestItemCodecRefusesBadJSON: input that is not JSON is refused on the
// way out (a batch with it would be refused whole), and broken or
// truncated items on the way in.
func TestItemCodecRefusesBadJSON(t *testing.T) {
	if _, err := encodeItem(&Envelope{TaskID: "t", Input: json.RawMessage(`{"a":`)}); err == nil {
		t.Error("an item with input {\"a\": encoded")
	}
	if _, err := encodeItem(&Envelope{TaskID: "t", Result: &svc.AgentResult{Output: json.RawMessage(`nul`)}}); err == nil {
		t.Error("a result with output nul encoded")
	}
	good, err := encodeItem(&Envelope{TaskID: "t", Input: json.RawMessage(`{"a":[1,"\u00e9"]}`), Metadata: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	doc := "[" + string(good) + "]"
	for n := range len(doc) {
		if _, err := decodeItems([]byte(doc[:n])); err == nil {
			t.Errorf("truncated item %q decoded", doc[:n])
		}
	}
	for _, bad := range []string{`[{"task_id":1}]`, `[{"depth":"2"}]`, `[{"depth":1.5}]`, `[{"input":tru}]`, `[{"task_id":"a\x01"}]`,
		`[{"task_id":"\q"}]`, `[{"result":{"success":"yes"}}]`, `[{}] x`, `[{"a":01}]`} {
		if _, err := decodeItems([]byte(bad)); err == nil {
			t.Errorf("decodeItems(%q) = nil error", bad)
		}
	}
	// Unknown keys are skipped: a later release may add fields.
	got, err := decodeItems([]byte(`[{"task_id":"t","future":{"x":[1,{"y":null}]},"depth":2}]`))
	if err != nil || len(got) != 1 || got[0].TaskID != "t" || got[0].Depth != 2 {
		t.Errorf("decodeItems with an unknown key = %+v, %v", got, err)
	}
}

func FuzzDecodeItems(f *testing.F) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 20 {
		e := randomEnvelope(rng)
		b, _ := json.Marshal([]Envelope{e})
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		items, err := decodeItems(data)
		if err != nil {
			return
		}
		// What it accepts, encoding/json accepts (the reverse need not
		// hold: encoding/json matches keys without regard to case).
		var std []Envelope
		if err := json.Unmarshal(data, &std); err != nil && !strings.Contains(err.Error(), "cannot unmarshal") {
			t.Fatalf("decodeItems accepted %q, encoding/json: %v", data, err)
		}
		for i := range items {
			if _, err := encodeItem(&items[i]); err != nil && !strings.Contains(err.Error(), "not valid JSON") &&
				!strings.Contains(err.Error(), "unsupported number") {
				t.Fatalf("item %d of %q does not encode again: %v", i, data, err)
			}
		}
	})
}

// BenchmarkItemCodec compares the codec with encoding/json on a result
// item like those of a gather of test:echo tasks.
func BenchmarkItemCodec(b *testing.B) {
	res := svc.AgentResult{AgentName: "echo", TaskID: "12345", Success: true, Output: json.RawMessage(`{"n":12345,"text":"hello world"}`),
		Metadata: svc.ResultMetadata{TraceID: "019a7c5e-7a0b-7000-8000-0123456789ab", DurationMS: 0.012, Model: "test:echo", Attempts: 1, Backend: "local"}}
	e := Envelope{TaskID: "12345", RunID: "019a7c5e-7a0b-7000-8000-0123456789ab", TraceID: "019a7c5e-7a0b-7000-8000-0123456789ab",
		SpanID: "019a7c5e-7a0b-7000-8000-0123456789ac", Attempt: 7, Result: &res, Delivery: 1}
	doc := []byte("[" + strings.Repeat(string(must(encodeItem(&e)))+",", 99) + string(must(encodeItem(&e))) + "]")
	b.Run("codec", func(b *testing.B) {
		for range b.N {
			if _, err := encodeItem(&e); err != nil {
				b.Fatal(err)
			}
			if _, err := decodeItems(doc); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding_json", func(b *testing.B) {
		for range b.N {
			if _, err := json.Marshal(&e); err != nil {
				b.Fatal(err)
			}
			var items []Envelope
			if err := json.Unmarshal(doc, &items); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(fmt.Sprint(err))
	}
	return b
}

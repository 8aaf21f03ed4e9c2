package fleetwire

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"strconv"
)

// BatchVersion is the version of a Batch: a message of many tasks or many
// results. A worker or publisher of an earlier release decodes it as an
// Envelope and refuses it ("version 2 not supported"), so a publisher
// sends batches only to an agent whose live workers all announced that
// they take them (BatchesPayloadKey); Envelope (version 1) stays the form
// of a single task, a single result and a cancel.
const BatchVersion = 2

// Batch message kinds.
const (
	// MsgTasks: many tasks of one agent, all answered on one ReplyTo.
	MsgTasks MsgKind = "tasks"
	// MsgResults: many results of one worker for one publisher.
	MsgResults MsgKind = "results"
)

// BatchesPayloadKey is the key of worker_started and worker_heartbeat
// payloads by which a worker says it takes batches (true).
const BatchesPayloadKey = "batches"

// MaxBatchBytes bounds the encoded items of one batch, well under
// svc.MaxPayloadBytes: an item that would take a batch past it starts the
// next one (an item alone may be larger, up to what one envelope may be).
const MaxBatchBytes = 1 << 20

// Batch is a message of many tasks (MsgTasks) or many results
// (MsgResults). Fields every item shares travel once: the agent and
// reply subject of tasks, the worker's runtime id of results. It is signed
// once, over those fields and the exact bytes of Items, so a receiver
// checks it without encoding anything again.
type Batch struct {
	V    int     `json:"v"`
	Kind MsgKind `json:"kind"`
	// Agent and ReplyTo are every task's (MsgTasks).
	Agent   string `json:"agent,omitempty"`
	ReplyTo string `json:"reply_to,omitempty"`
	// RuntimeID is the worker that produced every result (MsgResults).
	RuntimeID string `json:"runtime_id,omitempty"`
	KeyID     string `json:"key_id,omitempty"`
	Sig       string `json:"sig,omitempty"`
	// Items is the JSON array of the items: task envelopes without kind,
	// agent and reply_to, or result envelopes without kind and
	// runtime_id.
	Items json.RawMessage `json:"items"`
}

// batchDomain separates batch MACs from envelope MACs under the same key.
const batchDomain = "svc-batch-v2\n"

// BatchWriter builds a Batch's items from envelopes encoded one at a time
// (EncodeItem), possibly by many goroutines, and seals it.
type BatchWriter struct {
	kind                    MsgKind
	agent, replyTo, runtime string
	items                   []byte
	n                       int
}

// NewBatchWriter starts a batch of kind (MsgTasks or MsgResults) with the
// fields its items share.
func NewBatchWriter(kind MsgKind, agent, replyTo, runtimeID string) *BatchWriter {
	return &BatchWriter{kind: kind, agent: agent, replyTo: replyTo, runtime: runtimeID, items: append(make([]byte, 0, 4096), '[')}
}

// Add appends one item encoded by EncodeItem.
func (w *BatchWriter) Add(item []byte) {
	if w.n > 0 {
		w.items = append(w.items, ',')
	}
	w.items = append(w.items, item...)
	w.n++
}

// Len is the number of items added; Size their encoded bytes.
func (w *BatchWriter) Len() int  { return w.n }
func (w *BatchWriter) Size() int { return len(w.items) }

// Seal signs the batch with key when it is not empty and returns its wire
// form.
func (w *BatchWriter) Seal(keyID string, key []byte) ([]byte, error) {
	if w.n == 0 {
		return nil, errors.New("batch: no items")
	}
	items := append(w.items, ']')
	b := Batch{V: BatchVersion, Kind: w.kind, Agent: w.agent, ReplyTo: w.replyTo, RuntimeID: w.runtime}
	if len(key) > 0 {
		b.KeyID = keyID
		b.Sig = base64.RawURLEncoding.EncodeToString(b.mac(key, items))
	}
	out := make([]byte, 0, len(items)+256)
	out = append(out, `{"v":`...)
	out = strconv.AppendInt(out, BatchVersion, 10)
	out = appendField(out, "kind", string(b.Kind))
	out = appendField(out, "agent", b.Agent)
	out = appendField(out, "reply_to", b.ReplyTo)
	out = appendField(out, "runtime_id", b.RuntimeID)
	out = appendField(out, "key_id", b.KeyID)
	out = appendField(out, "sig", b.Sig)
	out = append(out, `,"items":`...)
	out = append(out, items...)
	return append(out, '}'), nil
}

// appendField appends ,"name":"value" when value is not empty.
func appendField(out []byte, name, value string) []byte {
	if value == "" {
		return out
	}
	out = append(out, ',', '"')
	out = append(out, name...)
	out = append(out, '"', ':')
	q, _ := json.Marshal(value) // a string always marshals
	return append(out, q...)
}

// EncodeItem validates env as an item of a batch of kind and encodes it
// without the fields the batch carries. env is not changed.
func EncodeItem(kind MsgKind, env *Envelope) ([]byte, error) {
	c := *env
	c.V = Version
	switch kind {
	case MsgTasks:
		c.Kind = MsgTask
	case MsgResults:
		c.Kind = MsgResult
	default:
		return nil, fmt.Errorf("batch: kind %q", kind)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	c.V, c.Kind, c.KeyID, c.Sig = 0, "", "", ""
	if kind == MsgTasks {
		c.Agent, c.ReplyTo = "", ""
	} else {
		c.RuntimeID = ""
	}
	return encodeItem(&c)
}

// mac is the HMAC-SHA256 of the batch's shared fields and items.
func (b *Batch) mac(key, items []byte) []byte {
	h := hmac.New(sha256.New, key)
	writeField(h, batchDomain)
	for _, s := range []string{string(b.Kind), b.Agent, b.ReplyTo, b.RuntimeID} {
		writeField(h, s)
	}
	h.Write(items)
	return h.Sum(nil)
}

// writeField writes s with its length, so fields cannot run into each
// other.
func writeField(h hash.Hash, s string) {
	var n [8]byte
	h.Write(strconv.AppendInt(n[:0], int64(len(s)), 10))
	h.Write([]byte{':'})
	h.Write([]byte(s))
}

// IsBatch reports whether data is a batch rather than a single envelope:
// the version is BatchVersion. It looks only at the start of the message,
// where Seal puts "v".
func IsBatch(data []byte) bool {
	return bytes.HasPrefix(data, []byte(`{"v":2,`))
}

// DecodeBatch parses a batch and checks its shape; Verify checks its
// signature and Envelopes decodes its items.
func DecodeBatch(data []byte) (*Batch, error) {
	var b Batch
	if err := readBatch(data, &b); err != nil {
		return nil, fmt.Errorf("batch: %w", err)
	}
	if b.V != BatchVersion {
		return nil, fmt.Errorf("batch: version %d not supported (want %d)", b.V, BatchVersion)
	}
	switch b.Kind {
	case MsgTasks:
		if b.Agent == "" || b.ReplyTo == "" {
			return nil, errors.New("batch: tasks without agent or reply_to")
		}
	case MsgResults:
	default:
		return nil, fmt.Errorf("batch: unknown kind %q", b.Kind)
	}
	if len(b.Items) == 0 || b.Items[0] != '[' {
		return nil, errors.New("batch: items not an array")
	}
	return &b, nil
}

// Verify checks Sig against keys[KeyID], in constant time, as
// Envelope.Verify does.
func (b *Batch) Verify(keys map[string][]byte) error {
	if b.Sig == "" {
		return ErrUnsigned
	}
	key, ok := keys[b.KeyID]
	if !ok || len(key) == 0 {
		return fmt.Errorf("%w %q", ErrUnknownKey, b.KeyID)
	}
	got, err := base64.RawURLEncoding.DecodeString(b.Sig)
	if err != nil || !hmac.Equal(got, b.mac(key, b.Items)) {
		return ErrBadSignature
	}
	return nil
}

// Envelopes decodes the items as whole envelopes of their kind (MsgTask or
// MsgResult), the batch's shared fields filled in, each validated.
func (b *Batch) Envelopes() ([]Envelope, error) {
	items, err := decodeItems(b.Items)
	if err != nil {
		return nil, fmt.Errorf("batch: %w", err)
	}
	if len(items) == 0 {
		return nil, errors.New("batch: no items")
	}
	for i := range items {
		e := &items[i]
		e.V, e.KeyID, e.Sig = Version, "", ""
		if b.Kind == MsgTasks {
			e.Kind, e.Agent, e.ReplyTo = MsgTask, b.Agent, b.ReplyTo
		} else {
			e.Kind, e.RuntimeID = MsgResult, b.RuntimeID
		}
		if err := e.Validate(); err != nil {
			return nil, fmt.Errorf("batch: item %d: %w", i, err)
		}
	}
	return items, nil
}

// readBatch reads a batch's fields; Items is the array's bytes within
// data, not copied (nor parsed: Envelopes does that).
func readBatch(data []byte, b *Batch) error {
	r := &reader{data: data}
	err := r.each(func(k []byte) error {
		var err error
		switch string(k) {
		case "v":
			b.V, err = r.int()
		case "kind":
			var s string
			s, err = r.optString()
			b.Kind = MsgKind(s)
		case "agent":
			b.Agent, err = r.optString()
		case "reply_to":
			b.ReplyTo, err = r.optString()
		case "runtime_id":
			b.RuntimeID, err = r.optString()
		case "key_id":
			b.KeyID, err = r.optString()
		case "sig":
			b.Sig, err = r.optString()
		case "items":
			r.ws()
			start := r.i
			if err = r.skip(); err == nil {
				b.Items = data[start:r.i:r.i]
			}
		default:
			err = r.skip()
		}
		return err
	})
	if err == nil && r.peek() != 0 {
		err = r.fail("data after the object")
	}
	return err
}

// encodeItem is the item codec's encoder (codec.go).
func encodeItem(e *Envelope) ([]byte, error) { return appendItem(make([]byte, 0, 512), e) }

// Package fleetwire is the wire format of the distributed mode: the JSON
// Envelope a publisher and its workers exchange through a broker, its
// signing and the Keyring (and key files) it is signed with, the subject
// names every process of a fleet agrees on, and KeepAlive, which keeps a
// delivery's ack deadline moving while its task runs. It imports only the
// root package; dispatch, worker and the brokers import it.
package fleetwire

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/svc-dev/svc"
)

// Version is the version of the wire envelope; a decoder refuses any other.
const Version = 1

// MsgKind says what an Envelope carries: the envelope's "kind" field. (An
// error's kind is svc.Kind; a submitted run's target is svc.TargetKind.)
type MsgKind string

// Message kinds.
const (
	// MsgTask: a publisher asks a worker to run Agent on Input (published
	// on TaskSubject(agent)).
	MsgTask MsgKind = "task"
	// MsgResult: a worker's answer to a task (published on the task's
	// ReplyTo, a ResultSubject), carrying Result and RuntimeID.
	MsgResult MsgKind = "result"
	// MsgCancel: cancel what runs of RunID (broadcast on SubjectCancel).
	MsgCancel MsgKind = "cancel"
)

// Envelope is the JSON message of the distributed mode
// (docs/distributed.md, "What goes on the wire"). One type serves tasks, results and cancels, so every
// message is decoded, checked and signed the same way; fields a kind does not
// use are left empty.
type Envelope struct {
	V    int     `json:"v"`
	Kind MsgKind `json:"kind"`

	TaskID        string `json:"task_id,omitempty"`
	RunID         string `json:"run_id,omitempty"`
	TraceID       string `json:"trace_id,omitempty"`
	ParentTraceID string `json:"parent_trace_id,omitempty"`
	SpanID        string `json:"span_id,omitempty"`
	Agent         string `json:"agent,omitempty"`
	// Input is the task's input, any JSON value.
	Input json.RawMessage `json:"input,omitempty"`
	// Metadata is the TaskSpec's metadata.
	Metadata map[string]string `json:"metadata,omitempty"`
	// Depth is the spawn depth of the task, checked by the worker's
	// runtime against max_spawn_depth.
	Depth int `json:"depth"`
	// Deadline (unix milliseconds, 0 for none) is when the publisher stops
	// waiting; a worker does not start a task past it.
	Deadline int64 `json:"deadline,omitempty"`
	// ReplyTo is the subject of the result (the publisher's ResultSubject).
	ReplyTo string `json:"reply_to,omitempty"`
	// PublishEvents asks the worker to relay the task's RuntimeEvents on
	// EventSubject of the publisher.
	PublishEvents bool `json:"publish_events,omitempty"`
	// TokenBudget (0 for none) is the token cap the task's run may use:
	// what was left of the cap of the run that dispatched it, so a nested
	// run on another worker cannot spend more than its parent had.
	TokenBudget int64 `json:"token_budget,omitempty"`
	// RelayTo, with PublishEvents, is where the task's events go when it
	// is not the ReplyTo's publisher: a run nested in a task and dispatched
	// by a worker relays to the publisher of the outermost task. It must
	// be an EventSubject.
	RelayTo string `json:"relay_to,omitempty"`
	// Attempt is the publisher's dispatch attempt (1-based), not the
	// broker's delivery count.
	Attempt int `json:"attempt,omitempty"`
	// Deltas says someone on the publisher reads the task's streamed
	// answer: the worker streams its model calls (unless the agent says
	// stream: false) and relays their deltas on the EventSubject of the
	// ReplyTo's publisher (DeltasTo), each agent_delta tagged with the
	// task's DispatchKey. Absent (false): no deltas.
	Deltas bool `json:"deltas,omitempty"`
	// DeltaCount, on a result, is how many deltas the worker relayed for
	// the task: the publisher waits a moment for those still on their way
	// before it hands the result on, so the text comes before the result.
	DeltaCount int `json:"delta_count,omitempty"`

	// Result is the AgentResult of a MsgResult envelope.
	Result *svc.AgentResult `json:"result,omitempty"`
	// RuntimeID is the runtime id of the worker that produced a result.
	RuntimeID string `json:"runtime_id,omitempty"`
	// Delivery, on a result, is the broker's delivery count of the task
	// at the worker that ran it: 2 or more when the task was redelivered
	// (a worker died or stalled with it), 0 or 1 otherwise.
	Delivery int `json:"delivery,omitempty"`

	// KeyID names the key Sig was made with.
	KeyID string `json:"key_id,omitempty"`
	// Sig is the HMAC-SHA256 of the envelope (see Sign), base64url.
	Sig string `json:"sig,omitempty"`
}

// DeadlineTime is Deadline as a time; zero when there is none.
func (e *Envelope) DeadlineTime() time.Time {
	if e.Deadline == 0 {
		return time.Time{}
	}
	return time.UnixMilli(e.Deadline)
}

// SetDeadline sets Deadline from t; a zero t clears it.
func (e *Envelope) SetDeadline(t time.Time) {
	if t.IsZero() {
		e.Deadline = 0
		return
	}
	e.Deadline = t.UnixMilli()
}

// Expired reports whether the envelope's deadline has passed at now.
func (e *Envelope) Expired(now time.Time) bool {
	return e.Deadline != 0 && now.UnixMilli() >= e.Deadline
}

// EventsTo is where a worker relays a task's RuntimeEvents: when
// PublishEvents is set, RelayTo when given (and an EventSubject), else,
// when ReplyTo is a ResultSubject, the EventSubject of that same
// publisher; "" otherwise.
func (e *Envelope) EventsTo() string {
	if !e.PublishEvents {
		return ""
	}
	if e.RelayTo != "" {
		if id, ok := strings.CutPrefix(e.RelayTo, subjectEvents); ok && id != "" {
			return e.RelayTo
		}
		return ""
	}
	id, ok := strings.CutPrefix(e.ReplyTo, subjectResults)
	if !ok || id == "" {
		return ""
	}
	return EventSubject(id)
}

// DeltasTo is where a worker relays the deltas of a task that asked for
// them (Deltas): the EventSubject of the publisher the result goes to,
// which holds the listener, even when the task's events go elsewhere
// (RelayTo); "" when the task did not ask or ReplyTo is not a
// ResultSubject.
func (e *Envelope) DeltasTo() string {
	if !e.Deltas {
		return ""
	}
	id, ok := strings.CutPrefix(e.ReplyTo, subjectResults)
	if !ok || id == "" {
		return ""
	}
	return EventSubject(id)
}

// DispatchKey names one dispatch of a task: its span_id and attempt. A
// publisher matches a result to its dispatch by it, and a relayed delta
// (whose payload carries it, see emitters/bridge) to the run listening.
func DispatchKey(span string, attempt int) string { return span + "/" + strconv.Itoa(attempt) }

// Encode validates and marshals the envelope (setting V when it is 0).
func (e *Envelope) Encode() ([]byte, error) {
	if e.V == 0 {
		e.V = Version
	}
	if err := e.Validate(); err != nil {
		return nil, err
	}
	return json.Marshal(e)
}

// Decode parses and validates one envelope from the wire. It does not
// check the signature: call Verify when keys are configured.
func Decode(data []byte) (*Envelope, error) {
	var e Envelope
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&e); err != nil {
		return nil, fmt.Errorf("envelope: %w", err)
	}
	if dec.More() {
		return nil, errors.New("envelope: data after the JSON object")
	}
	if err := e.Validate(); err != nil {
		return nil, err
	}
	return &e, nil
}

// Validate checks the version and the fields the kind needs.
func (e *Envelope) Validate() error {
	if e.V != Version {
		return fmt.Errorf("envelope: version %d not supported (want %d)", e.V, Version)
	}
	if e.Depth < 0 || e.Attempt < 0 || e.Deadline < 0 || e.TokenBudget < 0 || e.DeltaCount < 0 {
		return errors.New("envelope: negative depth, attempt, deadline, token budget or delta count")
	}
	switch e.Kind {
	case MsgTask:
		switch {
		case e.TaskID == "":
			return errors.New("envelope: task without task_id")
		case e.Agent == "":
			return errors.New("envelope: task without agent")
		case e.ReplyTo == "":
			return errors.New("envelope: task without reply_to")
		case len(e.Input) == 0:
			return errors.New("envelope: task without input")
		}
	case MsgResult:
		switch {
		case e.TaskID == "":
			return errors.New("envelope: result without task_id")
		case e.Result == nil:
			return errors.New("envelope: result without result")
		}
	case MsgCancel:
		if e.RunID == "" {
			return errors.New("envelope: cancel without run_id")
		}
	case "":
		return errors.New("envelope: no kind")
	default:
		return fmt.Errorf("envelope: unknown kind %q", e.Kind)
	}
	return nil
}

// Signature errors, returned by Verify.
var (
	ErrUnsigned     = errors.New("envelope: not signed")
	ErrUnknownKey   = errors.New("envelope: signed with an unknown key")
	ErrBadSignature = errors.New("envelope: bad signature")
)

// sigDomain separates envelope MACs from any other use of the same key.
const sigDomain = "svc-envelope-v1\n"

// mac is the HMAC-SHA256 of the envelope's JSON with Sig empty, and
// without Deltas and DeltaCount: a worker or publisher of an earlier
// version drops those fields it does not know before it checks the MAC,
// so signing them would make it refuse every task that asks for deltas.
// Leaving them out gives a forger nothing: turning deltas on streams the
// task's own text to the publisher the signed reply_to names, turning
// them off or changing the count only costs the listener deltas (or a
// short wait for them). Go's JSON
// encoding of this struct is a fixed point of decode-then-encode (field order
// is the struct's, map keys are sorted, raw JSON is compacted, floats print
// in their shortest exact form), so the receiver recomputes the same bytes
// from what it decoded.
func (e *Envelope) mac(key []byte) ([]byte, error) {
	c := *e
	c.Sig, c.Deltas, c.DeltaCount = "", false, 0
	b, err := json.Marshal(&c)
	if err != nil {
		return nil, fmt.Errorf("envelope: %w", err)
	}
	h := hmac.New(sha256.New, key)
	h.Write([]byte(sigDomain))
	h.Write(b)
	return h.Sum(nil), nil
}

// Sign sets KeyID to keyID and Sig to the envelope's HMAC-SHA256 under key.
// Sign after setting every other field: any later change breaks it.
func (e *Envelope) Sign(keyID string, key []byte) error {
	if len(key) == 0 {
		return errors.New("envelope: empty signing key")
	}
	if e.V == 0 {
		e.V = Version
	}
	e.KeyID = keyID
	e.Sig = ""
	m, err := e.mac(key)
	if err != nil {
		return err
	}
	e.Sig = base64.RawURLEncoding.EncodeToString(m)
	return nil
}

// Verify checks Sig against the key keys[KeyID], in constant time. It fails
// with ErrUnsigned, ErrUnknownKey or ErrBadSignature. Several keys let a
// fleet rotate: sign with the new id while every process still accepts the
// old one.
func (e *Envelope) Verify(keys map[string][]byte) error {
	if e.Sig == "" {
		return ErrUnsigned
	}
	key, ok := keys[e.KeyID]
	if !ok || len(key) == 0 {
		return fmt.Errorf("%w %q", ErrUnknownKey, e.KeyID)
	}
	got, err := base64.RawURLEncoding.DecodeString(e.Sig)
	if err != nil {
		return ErrBadSignature
	}
	want, err := e.mac(key)
	if err != nil {
		return err
	}
	if !hmac.Equal(got, want) {
		return ErrBadSignature
	}
	return nil
}

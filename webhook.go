package svc

import (
	"context"
	"encoding/json"
	"strings"
	"time"
)

// Webhooks: a batch (POST /batches) or a submitted run (POST /submit) may
// name a callback_url, which gets one signed POST when the batch or run
// ends. The delivery is kept in the run store (WebhookStore) from the
// moment the batch or run is accepted, so neither a restart nor the death
// of the process loses it; package webhook sends it, with retries.

// CallbackState is where a callback's delivery stands:
//
//	waiting → pending → delivered | failed
type CallbackState string

// Callback states.
const (
	// CallbackWaiting: the batch or run has not ended yet.
	CallbackWaiting CallbackState = "waiting"
	// CallbackPending: it ended; the POST is to be sent, or to be sent
	// again after a failed attempt (NextAttemptAt says when).
	CallbackPending CallbackState = "pending"
	// CallbackDelivered: the receiver answered 2xx.
	CallbackDelivered CallbackState = "delivered"
	// CallbackFailed: the receiver refused it (a 4xx but 408 and 429), or
	// the attempts went on for WebhookMaxAge without a 2xx.
	CallbackFailed CallbackState = "failed"
)

// Terminal reports whether s is final.
func (s CallbackState) Terminal() bool { return s == CallbackDelivered || s == CallbackFailed }

// Valid reports whether s is one of the four states.
func (s CallbackState) Valid() bool {
	switch s {
	case CallbackWaiting, CallbackPending, CallbackDelivered, CallbackFailed:
		return true
	}
	return false
}

// WebhookMaxAge is how long a callback is retried after its batch or run
// ended.
const WebhookMaxAge = 24 * time.Hour

// CallbackStatus is the delivery log of a callback_url: the "callback" of
// GET /batches/{id} and GET /runs/{id}/status.
type CallbackStatus struct {
	URL   string        `json:"url"`
	State CallbackState `json:"state"`
	// Attempts counts the POSTs sent.
	Attempts int `json:"attempts"`
	// LastStatus is the HTTP status of the last answer; absent before the
	// first and when the last attempt got none.
	LastStatus int `json:"last_status,omitempty"`
	// LastError says why the last attempt failed; absent after a 2xx.
	LastError string `json:"last_error,omitempty"`
	// NextAttemptAt is when the next attempt is due (pending only).
	NextAttemptAt *time.Time `json:"next_attempt_at,omitempty"`
}

// CallbackKind says what a callback reports on.
type CallbackKind string

// Callback kinds: the "type" of a callback's body and the prefix of its
// delivery id.
const (
	CallbackBatch CallbackKind = "batch"
	CallbackRun   CallbackKind = "run"
)

// WebhookID is the delivery id of the callback of a batch or run: also
// its X-Svc-Delivery header, the same on every attempt.
func WebhookID(kind CallbackKind, id string) string { return string(kind) + ":" + id }

// SplitWebhookID splits a delivery id into its kind and the batch or run id.
func SplitWebhookID(deliveryID string) (CallbackKind, string, bool) {
	k, id, ok := strings.Cut(deliveryID, ":")
	if !ok || id == "" || (CallbackKind(k) != CallbackBatch && CallbackKind(k) != CallbackRun) {
		return "", "", false
	}
	return CallbackKind(k), id, true
}

// WebhookDelivery is a callback as a WebhookStore keeps it.
type WebhookDelivery struct {
	// ID is WebhookID of the batch or run.
	ID         string        `json:"id"`
	URL        string        `json:"url"`
	State      CallbackState `json:"state"`
	Attempts   int           `json:"attempts"`
	LastStatus int           `json:"last_status,omitempty"`
	LastError  string        `json:"last_error,omitempty"`
	// NextAt is when the sender looks at the delivery again: for a
	// waiting one, whether its batch or run has ended; for a pending one,
	// the next attempt. Ignored once terminal.
	NextAt    time.Time `json:"next_at"`
	CreatedAt time.Time `json:"created_at"`
	// EndedAt is when the batch or run was seen ended and Body made:
	// attempts stop WebhookMaxAge after it.
	EndedAt time.Time `json:"ended_at,omitzero"`
	// Body is what every attempt sends, made once (pending onwards).
	Body json.RawMessage `json:"body,omitempty"`
}

// Status is the delivery log GET /batches/{id} and /runs/{id}/status show.
func (d *WebhookDelivery) Status() *CallbackStatus {
	st := &CallbackStatus{URL: d.URL, State: d.State, Attempts: d.Attempts, LastStatus: d.LastStatus, LastError: d.LastError}
	if d.State == CallbackPending {
		at := d.NextAt.UTC()
		st.NextAttemptAt = &at
	}
	return st
}

// CheckWebhook refuses, as a SpecValidationError, a delivery a store must
// not keep.
func CheckWebhook(d *WebhookDelivery) error {
	switch {
	case d.ID == "":
		return Errorf(KindSpecValidation, "webhook: empty id")
	case d.URL == "":
		return Errorf(KindSpecValidation, "webhook %q: empty url", d.ID)
	case !d.State.Valid():
		return Errorf(KindSpecValidation, "webhook %q: unknown state %q", d.ID, d.State)
	case len(d.Body) > 0 && !json.Valid(d.Body):
		return Errorf(KindSpecValidation, "webhook %q: body is not a JSON value", d.ID)
	}
	return nil
}

// UnknownWebhook is the RegistryError of a delivery id no store knows.
func UnknownWebhook(id string) error { return Errorf(KindRegistry, "unknown webhook %q", id) }

// WebhookEnded is the RunStateError of a change to a delivered or failed
// webhook.
func WebhookEnded(id string, state CallbackState) error {
	return Errorf(KindRunState, "webhook %q is %s: it takes no more changes", id, state)
}

// WebhookStore is the durable queue of callbacks. Every store in stores/
// implements it; package stores/storetest checks it (the Webhook
// subtests).
type WebhookStore interface {
	// CreateWebhook stores a new delivery (CheckWebhook); a duplicate id
	// is a RunStateError and changes nothing.
	CreateWebhook(ctx context.Context, d WebhookDelivery) error
	// GetWebhook returns a delivery; an unknown id is a RegistryError.
	GetWebhook(ctx context.Context, id string) (WebhookDelivery, error)
	// UpdateWebhook replaces a delivery that is not terminal; a delivered
	// or failed one is a RunStateError (WebhookEnded), an unknown one a
	// RegistryError, and neither is changed.
	UpdateWebhook(ctx context.Context, d WebhookDelivery) error
	// ClaimWebhooks returns up to limit deliveries that are not terminal
	// and due (NextAt <= now), earliest first (ties by id), and moves their NextAt to
	// now+lease in the same atomic step, so that no other caller (another
	// serve node on a shared store) claims them before the lease ends; a
	// claimer that dies leaves them due again then.
	ClaimWebhooks(ctx context.Context, now time.Time, lease time.Duration, limit int) ([]WebhookDelivery, error)
}

// Callbacks is what takes the callback_url of a batch or a submitted run:
// package webhook's Sender. The runtime and the batch manager call it.
type Callbacks interface {
	// CheckCallback refuses (a SpecValidationError, 400) a URL that will
	// not be sent to: not http(s), a private address without the server's
	// leave, or no signing key configured.
	CheckCallback(ctx context.Context, url string) error
	// ArmCallback stores the callback of a batch or run that is about to
	// be stored, before it is: the callback is sent once it ends.
	ArmCallback(ctx context.Context, kind CallbackKind, id, url string) error
	// Ended says a batch or run has ended, so its callback goes out now
	// rather than at the next look.
	Ended(kind CallbackKind, id string)
	// Callback returns the delivery log of a batch or run; nil when it
	// has no callback.
	Callback(ctx context.Context, kind CallbackKind, id string) *CallbackStatus
}

package storetest

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc"
)

// The Webhook subtests check svc.WebhookStore, the durable queue of
// callbacks: a delivery kept whole, terminal deliveries final, and
// claims that hand each due delivery to one claimer until its lease ends.

func webhookStore(t *testing.T, s svc.RunStore) svc.WebhookStore {
	t.Helper()
	w, ok := s.(svc.WebhookStore)
	if !ok {
		t.Fatalf("%T is not a svc.WebhookStore", s)
	}
	return w
}

func delivery(i int, next time.Time) svc.WebhookDelivery {
	return svc.WebhookDelivery{ID: svc.WebhookID(svc.CallbackBatch, batchID(i)), URL: fmt.Sprintf("https://example.com/hook/%d", i),
		State: svc.CallbackWaiting, NextAt: next, CreatedAt: ts(i)}
}

func sameDelivery(t *testing.T, what string, got, want svc.WebhookDelivery) {
	t.Helper()
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if string(g) != string(w) {
		t.Errorf("%s:\n got %s\nwant %s", what, g, w)
	}
}

func testWebhooks(t *testing.T, s svc.RunStore) {
	w := webhookStore(t, s)
	ctx := t.Context()
	d := delivery(1, ts(10))
	mustOK(t, "CreateWebhook", w.CreateWebhook(ctx, d))
	got, err := w.GetWebhook(ctx, d.ID)
	mustOK(t, "GetWebhook", err)
	sameDelivery(t, "created", got, d)

	dup := d
	dup.URL = "https://example.com/other"
	mustKind(t, "CreateWebhook duplicate", w.CreateWebhook(ctx, dup), svc.ErrRunState)
	got, _ = w.GetWebhook(ctx, d.ID)
	sameDelivery(t, "after a duplicate create", got, d)

	_, err = w.GetWebhook(ctx, "batch:nope")
	mustKind(t, "GetWebhook unknown", err, svc.ErrRegistry)
	mustKind(t, "UpdateWebhook unknown", w.UpdateWebhook(ctx, delivery(9, ts(1))), svc.ErrRegistry)
	bad := delivery(2, ts(1))
	bad.URL = ""
	mustKind(t, "CreateWebhook without url", w.CreateWebhook(ctx, bad), svc.ErrSpecValidation)
	bad = delivery(2, ts(1))
	bad.Body = json.RawMessage(`{"a":`)
	mustKind(t, "CreateWebhook bad body", w.CreateWebhook(ctx, bad), svc.ErrSpecValidation)
	if _, err := w.GetWebhook(ctx, bad.ID); err == nil {
		t.Errorf("a refused delivery was stored")
	}

	// Pending with a body (the same JSON value; a store may compact it),
	// then delivered: final.
	d.State, d.Attempts, d.LastStatus, d.LastError = svc.CallbackPending, 1, 500, "HTTP 500"
	d.EndedAt, d.NextAt = ts(11), ts(12)
	d.Body = json.RawMessage(`{"type": "batch",  "batch": {"s": "é"}}`)
	mustOK(t, "UpdateWebhook pending", w.UpdateWebhook(ctx, d))
	got, _ = w.GetWebhook(ctx, d.ID)
	sameDelivery(t, "pending", got, d)
	d.State, d.Attempts, d.LastStatus, d.LastError = svc.CallbackDelivered, 2, 200, ""
	mustOK(t, "UpdateWebhook delivered", w.UpdateWebhook(ctx, d))
	late := d
	late.State, late.Attempts = svc.CallbackPending, 3
	mustKind(t, "UpdateWebhook after delivered", w.UpdateWebhook(ctx, late), svc.ErrRunState)
	got, _ = w.GetWebhook(ctx, d.ID)
	sameDelivery(t, "delivered", got, d)
	claimed, err := w.ClaimWebhooks(ctx, ts(1_000_000), time.Minute, 10)
	mustOK(t, "ClaimWebhooks", err)
	if len(claimed) != 0 {
		t.Errorf("a delivered webhook was claimed: %v", claimed)
	}
}

func ids(ds []svc.WebhookDelivery) []string {
	out := []string{}
	for _, d := range ds {
		out = append(out, d.ID)
	}
	return out
}

func testWebhookClaim(t *testing.T, s svc.RunStore) {
	w := webhookStore(t, s)
	ctx := t.Context()
	// Due at 30, 10, 20 (ms after base), one failed, one not due.
	for i, at := range []int{30, 10, 20, 5, 500} {
		d := delivery(i, ts(at))
		if i == 3 {
			d.State = svc.CallbackFailed
		}
		mustOK(t, "CreateWebhook", w.CreateWebhook(ctx, d))
	}
	now := ts(100)
	got, err := w.ClaimWebhooks(ctx, now, time.Second, 2)
	mustOK(t, "ClaimWebhooks", err)
	want := []string{delivery(1, now).ID, delivery(2, now).ID}
	if !slices.Equal(ids(got), want) {
		t.Fatalf("claimed %v, want the two due earliest %v", ids(got), want)
	}
	for _, d := range got {
		if !d.NextAt.Equal(now.Add(time.Second)) {
			t.Errorf("claimed %s: NextAt %v, want now+lease %v", d.ID, d.NextAt, now.Add(time.Second))
		}
		stored, _ := w.GetWebhook(ctx, d.ID)
		if !stored.NextAt.Equal(now.Add(time.Second)) {
			t.Errorf("stored %s: NextAt %v, want the lease's end", d.ID, stored.NextAt)
		}
	}
	got, err = w.ClaimWebhooks(ctx, now, time.Second, 10)
	mustOK(t, "ClaimWebhooks again", err)
	if want := []string{delivery(0, now).ID}; !slices.Equal(ids(got), want) {
		t.Errorf("second claim %v, want only the one left %v", ids(got), want)
	}
	// The leases end: claimable again.
	got, err = w.ClaimWebhooks(ctx, now.Add(2*time.Second), time.Second, 10)
	mustOK(t, "ClaimWebhooks after the leases", err)
	// Earliest first (4 was due at 500 ms), ties by id.
	if want := []string{delivery(4, now).ID, delivery(0, now).ID, delivery(1, now).ID, delivery(2, now).ID}; !slices.Equal(ids(got), want) {
		t.Errorf("after the leases: %v, want %v", ids(got), want)
	}
	// An update moves NextAt; a delivered one leaves the queue.
	d, _ := w.GetWebhook(ctx, delivery(1, now).ID)
	d.State, d.NextAt = svc.CallbackDelivered, ts(0)
	mustOK(t, "UpdateWebhook", w.UpdateWebhook(ctx, d))
	d, _ = w.GetWebhook(ctx, delivery(2, now).ID)
	d.NextAt = ts(1)
	mustOK(t, "UpdateWebhook", w.UpdateWebhook(ctx, d))
	got, err = w.ClaimWebhooks(ctx, ts(2), time.Second, 10)
	mustOK(t, "ClaimWebhooks", err)
	if want := []string{delivery(2, now).ID}; !slices.Equal(ids(got), want) {
		t.Errorf("after updates: %v, want %v", ids(got), want)
	}
	if _, err := w.ClaimWebhooks(ctx, now, time.Second, 0); err == nil {
		t.Errorf("ClaimWebhooks with limit 0: no error")
	}
}

// testWebhookClaimConcurrent: claimers racing over the same due
// deliveries get each one once.
func testWebhookClaimConcurrent(t *testing.T, s svc.RunStore) {
	w := webhookStore(t, s)
	ctx := t.Context()
	const n = 60
	for i := range n {
		mustOK(t, "CreateWebhook", w.CreateWebhook(ctx, delivery(i, ts(i))))
	}
	now := ts(1000)
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			for {
				got, err := w.ClaimWebhooks(ctx, now, time.Hour, 7)
				if err != nil {
					t.Errorf("ClaimWebhooks: %v", err)
					return
				}
				if len(got) == 0 {
					return
				}
				mu.Lock()
				for _, d := range got {
					seen[d.ID]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(seen) != n {
		t.Errorf("claimed %d deliveries, want %d", len(seen), n)
	}
	for id, k := range seen {
		if k != 1 {
			t.Errorf("%s claimed %d times", id, k)
		}
	}
}

// reopenWebhooks queues a pending delivery, for RunReopen: after the
// reopen it is there, whole and due (a callback survives a restart).
func reopenWebhooks(t *testing.T, s svc.RunStore) func(t *testing.T, s svc.RunStore) {
	w := webhookStore(t, s)
	d := delivery(7, ts(20))
	d.State, d.Attempts, d.LastStatus, d.LastError, d.EndedAt = svc.CallbackPending, 1, 503, "HTTP 503", ts(10)
	d.Body = json.RawMessage(`{"type":"run","id":"r"}`)
	mustOK(t, "CreateWebhook", w.CreateWebhook(t.Context(), d))
	return func(t *testing.T, s svc.RunStore) {
		w := webhookStore(t, s)
		got, err := w.GetWebhook(t.Context(), d.ID)
		mustOK(t, "GetWebhook after reopen", err)
		sameDelivery(t, "after reopen", got, d)
		claimed, err := w.ClaimWebhooks(t.Context(), ts(30), time.Minute, 5)
		mustOK(t, "ClaimWebhooks after reopen", err)
		if len(claimed) != 1 || claimed[0].ID != d.ID {
			t.Errorf("claimed after reopen: %v, want %s", ids(claimed), d.ID)
		}
	}
}

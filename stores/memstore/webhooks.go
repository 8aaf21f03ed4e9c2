package memstore

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/svc-dev/svc"
)

var _ svc.WebhookStore = (*Store)(nil)

// webhooks are the store's callbacks (svc.WebhookStore), under their own
// mutex. A claim scans the deliveries not yet terminal, which are few: a
// callback waits for its batch or run, then for its receiver, and leaves
// the scan once delivered or failed.
type webhooks struct {
	mu   sync.Mutex
	m    map[string]svc.WebhookDelivery
	open map[string]struct{} // ids of those not terminal
}

func (w *webhooks) init() {
	if w.m == nil {
		w.m = map[string]svc.WebhookDelivery{}
		w.open = map[string]struct{}{}
	}
}

func cloneDelivery(d svc.WebhookDelivery) svc.WebhookDelivery {
	d.Body = slices.Clone(d.Body)
	return d
}

// CreateWebhook stores a delivery; see svc.WebhookStore.
func (s *Store) CreateWebhook(_ context.Context, d svc.WebhookDelivery) error {
	if err := svc.CheckWebhook(&d); err != nil {
		return err
	}
	w := &s.webhooks
	w.mu.Lock()
	defer w.mu.Unlock()
	w.init()
	if _, ok := w.m[d.ID]; ok {
		return svc.Errorf(svc.KindRunState, "webhook %q exists", d.ID)
	}
	w.m[d.ID] = cloneDelivery(d)
	if !d.State.Terminal() {
		w.open[d.ID] = struct{}{}
	}
	return nil
}

// GetWebhook returns a delivery; see svc.WebhookStore.
func (s *Store) GetWebhook(_ context.Context, id string) (svc.WebhookDelivery, error) {
	w := &s.webhooks
	w.mu.Lock()
	defer w.mu.Unlock()
	d, ok := w.m[id]
	if !ok {
		return svc.WebhookDelivery{}, svc.UnknownWebhook(id)
	}
	return cloneDelivery(d), nil
}

// UpdateWebhook replaces a delivery; see svc.WebhookStore.
func (s *Store) UpdateWebhook(_ context.Context, d svc.WebhookDelivery) error {
	if err := svc.CheckWebhook(&d); err != nil {
		return err
	}
	w := &s.webhooks
	w.mu.Lock()
	defer w.mu.Unlock()
	old, ok := w.m[d.ID]
	if !ok {
		return svc.UnknownWebhook(d.ID)
	}
	if old.State.Terminal() {
		return svc.WebhookEnded(d.ID, old.State)
	}
	w.m[d.ID] = cloneDelivery(d)
	if d.State.Terminal() {
		delete(w.open, d.ID)
	}
	return nil
}

// ClaimWebhooks claims due deliveries; see svc.WebhookStore.
func (s *Store) ClaimWebhooks(_ context.Context, now time.Time, lease time.Duration, limit int) ([]svc.WebhookDelivery, error) {
	if limit <= 0 {
		return nil, svc.Errorf(svc.KindSpecValidation, "claim webhooks: limit %d: want at least 1", limit)
	}
	w := &s.webhooks
	w.mu.Lock()
	defer w.mu.Unlock()
	var due []svc.WebhookDelivery
	for id := range w.open {
		if d := w.m[id]; !d.NextAt.After(now) {
			due = append(due, d)
		}
	}
	slices.SortFunc(due, func(a, b svc.WebhookDelivery) int {
		if c := a.NextAt.Compare(b.NextAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	due = due[:min(len(due), limit)]
	for i := range due {
		due[i].NextAt = now.Add(lease)
		w.m[due[i].ID] = due[i]
		due[i] = cloneDelivery(due[i])
	}
	return due, nil
}

package pebblestore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/svc-dev/svc"
)

var _ svc.WebhookStore = (*Store)(nil)

// Webhooks (svc.WebhookStore): "whk/<id>" holds a delivery (JSON) and,
// while it is not terminal, "whq/<NextAt in Unix microseconds, 20
// digits>/<id>" (empty) puts it in the queue a claim reads in key order:
// earliest first, ties by id. A write is one Batch under the write lock.
const (
	whkPrefix = "whk/"
	whqPrefix = "whq/"
)

func whkKey(id string) []byte { return []byte(whkPrefix + id) }

func whqKey(at time.Time, id string) []byte {
	return fmt.Appendf(nil, "%s%020d/%s", whqPrefix, max(at.UnixMicro(), 0), id)
}

func (s *Store) loadWebhook(id string) (*svc.WebhookDelivery, error) {
	v, closer, err := s.db.Get(whkKey(id))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, svc.UnknownWebhook(id)
	}
	if err != nil {
		return nil, svc.Wrap(svc.KindRuntime, err, "pebblestore: read webhook "+strconv.Quote(id))
	}
	defer closer.Close()
	var d svc.WebhookDelivery
	if err := json.Unmarshal(v, &d); err != nil {
		return nil, svc.Wrap(svc.KindRuntime, err, "pebblestore: corrupt webhook "+strconv.Quote(id))
	}
	return &d, nil
}

// putWebhook writes d and moves its queue entry from old's (nil: none).
func putWebhook(b *pebble.Batch, old, d *svc.WebhookDelivery) error {
	data, err := json.Marshal(d)
	if err != nil {
		return svc.Wrap(svc.KindSpecValidation, err, "webhook "+d.ID)
	}
	if old != nil && !old.State.Terminal() {
		if err := b.Delete(whqKey(old.NextAt, old.ID), nil); err != nil {
			return err
		}
	}
	if !d.State.Terminal() {
		if err := b.Set(whqKey(d.NextAt, d.ID), nil, nil); err != nil {
			return err
		}
	}
	return b.Set(whkKey(d.ID), data, nil)
}

// CreateWebhook stores a delivery; see svc.WebhookStore.
func (s *Store) CreateWebhook(ctx context.Context, d svc.WebhookDelivery) error {
	if err := svc.CheckWebhook(&d); err != nil {
		return err
	}
	return s.write(ctx, func(b *pebble.Batch) ([]string, error) {
		if _, err := s.loadWebhook(d.ID); err == nil {
			return nil, svc.Errorf(svc.KindRunState, "webhook %q exists", d.ID)
		} else if svc.KindOf(err) != svc.KindRegistry {
			return nil, err
		}
		return []string{whkPrefix + d.ID}, putWebhook(b, nil, &d)
	})
}

// GetWebhook returns a delivery; see svc.WebhookStore.
func (s *Store) GetWebhook(ctx context.Context, id string) (svc.WebhookDelivery, error) {
	if err := s.rlock(ctx); err != nil {
		return svc.WebhookDelivery{}, err
	}
	defer s.mu.RUnlock()
	d, err := s.loadWebhook(id)
	if err != nil {
		return svc.WebhookDelivery{}, err
	}
	return *d, nil
}

// UpdateWebhook replaces a delivery; see svc.WebhookStore.
func (s *Store) UpdateWebhook(ctx context.Context, d svc.WebhookDelivery) error {
	if err := svc.CheckWebhook(&d); err != nil {
		return err
	}
	return s.write(ctx, func(b *pebble.Batch) ([]string, error) {
		old, err := s.loadWebhook(d.ID)
		if err != nil {
			return nil, err
		}
		if old.State.Terminal() {
			return nil, svc.WebhookEnded(d.ID, old.State)
		}
		return []string{whkPrefix + d.ID}, putWebhook(b, old, &d)
	})
}

// ClaimWebhooks claims due deliveries in one write; see svc.WebhookStore.
func (s *Store) ClaimWebhooks(ctx context.Context, now time.Time, lease time.Duration, limit int) ([]svc.WebhookDelivery, error) {
	if limit <= 0 {
		return nil, svc.Errorf(svc.KindSpecValidation, "claim webhooks: limit %d: want at least 1", limit)
	}
	var out []svc.WebhookDelivery
	err := s.write(ctx, func(b *pebble.Batch) ([]string, error) {
		out = out[:0]
		// Up to the end of now's microsecond: the keys of that
		// microsecond sort before "<now+1>".
		upper := whqKey(now.Add(time.Microsecond), "")
		it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte(whqPrefix), UpperBound: upper})
		if err != nil {
			return nil, svc.Wrap(svc.KindRuntime, err, "pebblestore: claim webhooks")
		}
		var ids []string
		for ok := it.First(); ok && len(ids) < limit; ok = it.Next() {
			k := string(it.Key())
			ids = append(ids, k[len(whqPrefix)+21:])
		}
		if err := it.Close(); err != nil {
			return nil, svc.Wrap(svc.KindRuntime, err, "pebblestore: claim webhooks")
		}
		var changed []string
		for _, id := range ids {
			old, err := s.loadWebhook(id)
			if err != nil {
				return nil, err
			}
			d := *old
			d.NextAt = now.Add(lease)
			if err := putWebhook(b, old, &d); err != nil {
				return nil, err
			}
			out = append(out, d)
			changed = append(changed, whkPrefix+id)
		}
		return changed, nil
	})
	return out, err
}

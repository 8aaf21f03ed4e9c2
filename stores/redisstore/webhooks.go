package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/svc-dev/svc"
)

var _ svc.WebhookStore = (*Store)(nil)

// Webhooks (svc.WebhookStore), under prefix P:
//
//	P::webhook:<id>   string  the delivery (JSON)
//	P::webhooks:due   zset    the ids of the deliveries not yet terminal,
//	                          scored by NextAt in Unix microseconds
//
// The zset's score is a waiting or pending delivery's NextAt (a claim
// moves it in its script, which does not rewrite the JSON); GetWebhook
// reads it back. Deliveries keep no TTL.

func (s *Store) webhookKey(id string) string { return s.prefix + "::webhook:" + id }
func (s *Store) dueKey() string              { return s.prefix + "::webhooks:due" }

// createWebhookScript: ARGV = id, JSON, score ("" when terminal). {0}, or
// {1} when the delivery exists.
var createWebhookScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return {1} end
redis.call('SET', KEYS[1], ARGV[2])
if ARGV[3] ~= '' then redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1]) end
return {0}
`)

// updateWebhookScript: as create; {0}, {1} unknown, {2} terminal.
var updateWebhookScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return {1} end
if not redis.call('ZSCORE', KEYS[2], ARGV[1]) then return {2} end
redis.call('SET', KEYS[1], ARGV[2])
if ARGV[3] ~= '' then redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1]) else redis.call('ZREM', KEYS[2], ARGV[1]) end
return {0}
`)

// claimWebhooksScript: KEYS[1] the due zset; ARGV = now, next (both Unix
// microseconds), limit, the key prefix of a delivery. The ids claimed
// and their JSON, alternating.
var claimWebhooksScript = redis.NewScript(`
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))
local out = {}
for _, id in ipairs(ids) do
  redis.call('ZADD', KEYS[1], ARGV[2], id)
  out[#out+1] = id
  out[#out+1] = redis.call('GET', ARGV[4] .. id) or ''
end
return out
`)

func (s *Store) webhookDo(ctx context.Context, fn func(context.Context) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return errClosed()
	}
	return fn(ctx)
}

func webhookArgs(d *svc.WebhookDelivery) ([]any, error) {
	if err := svc.CheckWebhook(d); err != nil {
		return nil, err
	}
	data, err := json.Marshal(d)
	if err != nil {
		return nil, svc.Wrap(svc.KindSpecValidation, err, "webhook "+d.ID)
	}
	score := ""
	if !d.State.Terminal() {
		score = strconv.FormatInt(d.NextAt.UnixMicro(), 10)
	}
	return []any{d.ID, data, score}, nil
}

func webhookFail(err error, what, id string) error {
	return svc.Wrap(svc.KindRuntime, err, fmt.Sprintf("redisstore: %s webhook %q", what, id))
}

// CreateWebhook stores a delivery; see svc.WebhookStore.
func (s *Store) CreateWebhook(ctx context.Context, d svc.WebhookDelivery) error {
	args, err := webhookArgs(&d)
	if err != nil {
		return err
	}
	return s.webhookDo(ctx, func(ctx context.Context) error {
		res, err := createWebhookScript.Run(ctx, s.c, []string{s.webhookKey(d.ID), s.dueKey()}, args...).Int64Slice()
		if err != nil {
			return webhookFail(err, "create", d.ID)
		}
		if len(res) > 0 && res[0] == 1 {
			return svc.Errorf(svc.KindRunState, "webhook %q exists", d.ID)
		}
		return nil
	})
}

func decodeWebhook(id string, data string) (svc.WebhookDelivery, error) {
	var d svc.WebhookDelivery
	if err := json.Unmarshal([]byte(data), &d); err != nil {
		return d, svc.Wrap(svc.KindRuntime, err, "redisstore: corrupt webhook "+strconv.Quote(id))
	}
	return d, nil
}

// GetWebhook returns a delivery; see svc.WebhookStore.
func (s *Store) GetWebhook(ctx context.Context, id string) (svc.WebhookDelivery, error) {
	var d svc.WebhookDelivery
	err := s.webhookDo(ctx, func(ctx context.Context) error {
		pipe := s.c.Pipeline()
		get := pipe.Get(ctx, s.webhookKey(id))
		score := pipe.ZScore(ctx, s.dueKey(), id)
		_, _ = pipe.Exec(ctx)
		data, err := get.Result()
		if errors.Is(err, redis.Nil) {
			return svc.UnknownWebhook(id)
		}
		if err != nil {
			return webhookFail(err, "read", id)
		}
		if d, err = decodeWebhook(id, data); err != nil {
			return err
		}
		sc, err := score.Result()
		switch {
		case err == nil && !d.State.Terminal():
			d.NextAt = time.UnixMicro(int64(sc)).UTC()
		case err != nil && !errors.Is(err, redis.Nil):
			return webhookFail(err, "read", id)
		}
		return nil
	})
	return d, err
}

// UpdateWebhook replaces a delivery; see svc.WebhookStore.
func (s *Store) UpdateWebhook(ctx context.Context, d svc.WebhookDelivery) error {
	args, err := webhookArgs(&d)
	if err != nil {
		return err
	}
	return s.webhookDo(ctx, func(ctx context.Context) error {
		res, err := updateWebhookScript.Run(ctx, s.c, []string{s.webhookKey(d.ID), s.dueKey()}, args...).Int64Slice()
		if err != nil {
			return webhookFail(err, "update", d.ID)
		}
		switch {
		case len(res) > 0 && res[0] == 1:
			return svc.UnknownWebhook(d.ID)
		case len(res) > 0 && res[0] == 2:
			old, err := s.GetWebhook(context.WithoutCancel(ctx), d.ID)
			if err != nil {
				return err
			}
			return svc.WebhookEnded(d.ID, old.State)
		}
		return nil
	})
}

// ClaimWebhooks claims due deliveries in one script; see svc.WebhookStore.
func (s *Store) ClaimWebhooks(ctx context.Context, now time.Time, lease time.Duration, limit int) ([]svc.WebhookDelivery, error) {
	if limit <= 0 {
		return nil, svc.Errorf(svc.KindSpecValidation, "claim webhooks: limit %d: want at least 1", limit)
	}
	next := now.Add(lease)
	var out []svc.WebhookDelivery
	err := s.webhookDo(ctx, func(ctx context.Context) error {
		res, err := claimWebhooksScript.Run(ctx, s.c, []string{s.dueKey()}, now.UnixMicro(), next.UnixMicro(), limit,
			s.prefix+"::webhook:").StringSlice()
		if err != nil {
			return webhookFail(err, "claim", "")
		}
		for i := 0; i+1 < len(res); i += 2 {
			if res[i+1] == "" {
				continue // a queue entry without its delivery: nothing to send
			}
			d, err := decodeWebhook(res[i], res[i+1])
			if err != nil {
				return err
			}
			d.NextAt = time.UnixMicro(next.UnixMicro()).UTC()
			out = append(out, d)
		}
		return nil
	})
	return out, err
}

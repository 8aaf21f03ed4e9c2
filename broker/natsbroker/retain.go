package natsbroker

import (
	"context"
	"encoding/base64"
	"errors"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/svc-dev/svc"
)

// retainBucket is the JetStream key-value bucket of Retain's records.
const retainBucket = "svc-retained"

// maxRetain caps a Retain's ttl: the bucket's own max age, after which
// JetStream drops a record whatever it says.
const maxRetain = 7 * 24 * time.Hour

var _ svc.Retainer = (*Broker)(nil)

// bucket returns the retain bucket, creating it on first use (and again
// after a failure: the server may have been away).
func (b *Broker) bucket(ctx context.Context) (jetstream.KeyValue, error) {
	b.kvMu.Lock()
	defer b.kvMu.Unlock()
	if b.kv != nil {
		return b.kv, nil
	}
	kv, err := b.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: retainBucket, TTL: maxRetain,
		Storage: jetstream.FileStorage, History: 1, Description: "svc: cancelled runs (svc.Retainer)"})
	if err != nil {
		return nil, err
	}
	b.kv = kv
	return kv, nil
}

// retainKey encodes key in the characters a KV key may hold.
func retainKey(key string) string { return base64.RawURLEncoding.EncodeToString([]byte(key)) }

// Retain records key in the svc-retained key-value bucket with its expiry
// (unix ms) as the value; ttl is capped at seven days, the bucket's max age.
func (b *Broker) Retain(ctx context.Context, key string, ttl time.Duration) error {
	if b.isClosed() {
		return svc.ErrBrokerClosed
	}
	kv, err := b.bucket(ctx)
	if err != nil {
		return b.wrap("retain", err)
	}
	until := time.Now().Add(min(ttl, maxRetain)).UnixMilli()
	_, err = kv.Put(ctx, retainKey(key), []byte(strconv.FormatInt(until, 10)))
	return b.wrap("retain", err)
}

// Retained reports whether key is in the bucket and its expiry has not
// passed.
func (b *Broker) Retained(ctx context.Context, key string) (bool, error) {
	if b.isClosed() {
		return false, svc.ErrBrokerClosed
	}
	kv, err := b.bucket(ctx)
	if err != nil {
		return false, b.wrap("retained", err)
	}
	e, err := kv.Get(ctx, retainKey(key))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, b.wrap("retained", err)
	}
	until, err := strconv.ParseInt(string(e.Value()), 10, 64)
	if err != nil {
		return false, b.wrap("retained", err)
	}
	return time.Now().UnixMilli() < until, nil
}

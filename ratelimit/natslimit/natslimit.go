// Package natslimit is a ratelimit.Shared store in a NATS JetStream
// key-value bucket: each limit is a token bucket in one key, read, taken
// from and written back with compare-and-set on the key's revision (a
// writer that lost the race reads again). A take is two round trips, more
// under contention; the clock is the taker's (the fleet's hosts keep
// their clocks in step, as NTP does: a skew of s lends or costs about
// s × rate units once).
//
// The bucket (DefaultBucket unless told) is in memory: a budget needs no
// disk, and a restarted server starts the buckets full, as a new one
// does.
package natslimit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/svc-dev/svc/ratelimit"
)

// DefaultBucket is the key-value bucket of the limits.
const DefaultBucket = "svc_ratelimit"

// NodesWindow is how long a node that took from a key counts as one of
// its nodes.
const NodesWindow = 10 * time.Second

// Store is the NATS store. It is safe for concurrent use.
type Store struct {
	kv  jetstream.KeyValue
	now func() time.Time
}

// New returns the store on nc (the broker's connection: natsbroker's
// Conn), creating its bucket ("" for DefaultBucket; a fleet namespace
// may name its own) when there is none.
func New(ctx context.Context, nc *nats.Conn, bucket string) (*Store, error) {
	if bucket == "" {
		bucket = DefaultBucket
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("natslimit: %w", err)
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: bucket, Description: "svc rate limits shared by the fleet",
		History: 1, Storage: jetstream.MemoryStorage, TTL: time.Hour,
	})
	if err != nil {
		return nil, fmt.Errorf("natslimit: bucket %s: %w", bucket, err)
	}
	return &Store{kv: kv, now: time.Now}, nil
}

// Kind is "nats".
func (s *Store) Kind() string { return "nats" }

// state is a key's value.
type state struct {
	Level float64          `json:"level"`
	At    int64            `json:"at"`    // Unix nanoseconds of the last refill
	Nodes map[string]int64 `json:"nodes"` // Unix nanoseconds of each node's last take
}

// Take implements ratelimit.Shared: a read and a compare-and-set write,
// again while another taker wins the race.
func (s *Store) Take(ctx context.Context, key, node string, n, perMinute, burst float64) (ratelimit.Grant, error) {
	k := kvKey(key)
	for {
		var st state
		var rev uint64
		e, err := s.kv.Get(ctx, k)
		switch {
		case err == nil:
			rev = e.Revision()
			if err := json.Unmarshal(e.Value(), &st); err != nil {
				return ratelimit.Grant{}, fmt.Errorf("natslimit: take %s: %w", key, err)
			}
		case errors.Is(err, jetstream.ErrKeyNotFound):
		default:
			return ratelimit.Grant{}, fmt.Errorf("natslimit: take %s: %w", key, err)
		}
		now := s.now().UnixNano()
		rate := perMinute / 60
		if rev == 0 {
			st = state{Level: burst, At: now}
		}
		if now > st.At {
			st.Level += float64(now-st.At) / 1e9 * rate
			st.At = now
		}
		st.Level = math.Min(st.Level, burst)
		if st.Nodes == nil {
			st.Nodes = map[string]int64{}
		}
		st.Nodes[node] = now
		for id, at := range st.Nodes {
			if now-at > int64(NodesWindow) {
				delete(st.Nodes, id)
			}
		}
		g := ratelimit.Grant{Nodes: len(st.Nodes)}
		if st.Level >= n {
			st.Level -= n
		} else {
			g.Wait = time.Duration(math.Ceil((n - st.Level) / rate * float64(time.Second)))
		}
		b, err := json.Marshal(st)
		if err != nil {
			return ratelimit.Grant{}, fmt.Errorf("natslimit: take %s: %w", key, err)
		}
		if rev == 0 {
			_, err = s.kv.Create(ctx, k, b)
		} else {
			_, err = s.kv.Update(ctx, k, b, rev)
		}
		switch {
		case err == nil:
			return g, nil
		case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyRevisionMismatch):
			if ctx.Err() != nil {
				return ratelimit.Grant{}, fmt.Errorf("natslimit: take %s: %w", key, ctx.Err())
			}
			continue // another taker wrote first: read again
		default:
			return ratelimit.Grant{}, fmt.Errorf("natslimit: take %s: %w", key, err)
		}
	}
}

// kvKey is key as a key-value key, which may hold letters, digits, '-',
// '_', '/', '=' and '.': any other byte is written =XX.
func kvKey(key string) string {
	var b strings.Builder
	for i := 0; i < len(key); i++ {
		c := key[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "=%02X", c)
		}
	}
	return b.String()
}

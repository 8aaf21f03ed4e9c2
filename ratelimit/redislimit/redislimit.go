// Package redislimit is a ratelimit.Shared store in Redis: each limit is
// a token bucket that one Lua script refills and takes from, atomically,
// on the server's clock (TIME), so clients' clocks do not matter and
// every take is one round trip.
//
// Layout (prefix "svc:" as the broker's): {prefix}rl:{KEY} is a hash of
// the bucket's level and when it was last refilled; {prefix}rl:{KEY}:nodes
// a sorted set of the nodes that took lately, by when. Both expire when
// unused. KEY is in braces so that both hash to one Redis Cluster slot.
package redislimit

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/svc-dev/svc/ratelimit"
)

// NodesWindow is how long a node that took from a key counts as one of
// its nodes.
const NodesWindow = 10 * time.Second

// take refills KEYS[1] to now at ARGV[2]/60 a second up to ARGV[3], takes
// ARGV[1] units if they are there, notes node ARGV[4] in KEYS[2], and
// returns the seconds to wait (0: taken), as a string (a Lua number
// replies as an integer), and the node count.
var take = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local n, rate, burst = tonumber(ARGV[1]), tonumber(ARGV[2]) / 60, tonumber(ARGV[3])
local v = redis.call('HMGET', KEYS[1], 'level', 'at')
local level, at = tonumber(v[1]), tonumber(v[2])
if level == nil or at == nil then
  level, at = burst, now
end
if now > at then
  level = level + (now - at) * rate
  at = now
end
if level > burst then level = burst end
local wait = 0
if level >= n then
  level = level - n
else
  wait = (n - level) / rate
end
local ttl = math.ceil(burst / rate * 1000) + 60000
redis.call('HSET', KEYS[1], 'level', string.format('%.17g', level), 'at', string.format('%.17g', at))
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('ZADD', KEYS[2], now, ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - tonumber(ARGV[5]))
redis.call('PEXPIRE', KEYS[2], ttl)
return {string.format('%.17g', wait), redis.call('ZCARD', KEYS[2])}
`)

// Store is the Redis store. It is safe for concurrent use.
type Store struct {
	rdb    redis.UniversalClient
	prefix string
}

// New returns the store on rdb (the broker's client: redisbroker's
// Client), its keys starting with prefix ("svc:" when "").
func New(rdb redis.UniversalClient, prefix string) *Store {
	if prefix == "" {
		prefix = "svc:"
	}
	return &Store{rdb: rdb, prefix: prefix}
}

// Kind is "redis".
func (s *Store) Kind() string { return "redis" }

// Take implements ratelimit.Shared: one EVALSHA.
func (s *Store) Take(ctx context.Context, key, node string, n, perMinute, burst float64) (ratelimit.Grant, error) {
	k := s.prefix + "rl:{" + key + "}"
	res, err := take.Run(ctx, s.rdb, []string{k, k + ":nodes"}, n, perMinute, burst, node, NodesWindow.Seconds()).Slice()
	if err != nil {
		return ratelimit.Grant{}, fmt.Errorf("redislimit: take %s: %w", key, err)
	}
	if len(res) != 2 {
		return ratelimit.Grant{}, fmt.Errorf("redislimit: take %s: script answered %v", key, res)
	}
	ws, _ := res[0].(string)
	wait, err := strconv.ParseFloat(ws, 64)
	if err != nil {
		return ratelimit.Grant{}, fmt.Errorf("redislimit: take %s: wait %q: %w", key, ws, err)
	}
	nodes, _ := res[1].(int64)
	return ratelimit.Grant{Wait: time.Duration(wait * float64(time.Second)), Nodes: int(nodes)}, nil
}

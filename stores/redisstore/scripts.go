package redisstore

import "github.com/redis/go-redis/v9"

// The scripts all take KEYS = {record hash, events stream, active set}. A
// change script answers {0, seq}, {1, 0} when the run is unknown, or
// {2, code of the run's state} when the state machine refuses the change;
// numbers only, so every reply decodes the same way.

// prelude is shared by the change scripts. allowed mirrors
// svc.RunState.CanMove; finish is the step into a terminal state: the end
// marker "<seq>-1" after the last event wakes and ends every stream reader,
// the run leaves the active set and its keys get the TTL.
const prelude = `
local allowed = {
  pending = {running = true, cancelled = true},
  running = {completed = true, failed = true, cancelled = true},
}
local codes = {pending = 1, running = 2, completed = 3, failed = 4, cancelled = 5}
local function terminal(s)
  return s == 'completed' or s == 'failed' or s == 'cancelled'
end
local function lastseq()
  return tonumber(redis.call('HGET', KEYS[1], 'seq') or '0')
end
local function finish(seq, id, ttl)
  redis.call('XADD', KEYS[2], string.format('%d-1', seq), 'end', '1')
  redis.call('SREM', KEYS[3], id)
  if ttl > 0 then
    redis.call('PEXPIRE', KEYS[1], ttl)
    redis.call('PEXPIRE', KEYS[2], ttl)
  end
end
`

// createScript: ARGV = {id, field, value, ...}; answers 1, or 0 when the run
// exists. A leftover events stream (its record deleted by hand) is dropped
// so the new run starts at seq 1.
var createScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
redis.call('SADD', KEYS[3], ARGV[1])
return 1
`)

// setStateScript: ARGV = {id, next, reason, now, ttl ms, final event
// fields...}.
var setStateScript = redis.NewScript(prelude + `
local cur = redis.call('HGET', KEYS[1], 'state')
if not cur then return {1, 0} end
local nxt = ARGV[2]
if not (allowed[cur] and allowed[cur][nxt]) then return {2, codes[cur] or 0} end
redis.call('HSET', KEYS[1], 'state', nxt, 'reason', ARGV[3], 'updated_at', ARGV[4])
local seq = lastseq()
if #ARGV > 5 then
  seq = redis.call('HINCRBY', KEYS[1], 'seq', 1)
  redis.call('XADD', KEYS[2], string.format('%d-0', seq), unpack(ARGV, 6))
end
if terminal(nxt) then finish(seq, ARGV[1], tonumber(ARGV[5])) end
return {0, seq}
`)

// appendScript: ARGV = event fields.
var appendScript = redis.NewScript(prelude + `
local cur = redis.call('HGET', KEYS[1], 'state')
if not cur then return {1, 0} end
if terminal(cur) then return {2, codes[cur]} end
local seq = redis.call('HINCRBY', KEYS[1], 'seq', 1)
redis.call('XADD', KEYS[2], string.format('%d-0', seq), unpack(ARGV))
return {0, seq}
`)

// setFieldScript: ARGV = {field, value, now}.
var setFieldScript = redis.NewScript(prelude + `
local cur = redis.call('HGET', KEYS[1], 'state')
if not cur then return {1, 0} end
if terminal(cur) then return {2, codes[cur]} end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2], 'updated_at', ARGV[3])
return {0, 0}
`)

// interruptScript: ARGV = {id, now, ttl ms}; answers 1 when it failed the
// run, 0 when the run was already terminal or is gone (it then only leaves
// the active set).
var interruptScript = redis.NewScript(prelude + `
local cur = redis.call('HGET', KEYS[1], 'state')
if not cur or terminal(cur) then
  redis.call('SREM', KEYS[3], ARGV[1])
  return 0
end
redis.call('HSET', KEYS[1], 'state', 'failed', 'reason', 'interrupted', 'updated_at', ARGV[2])
finish(lastseq(), ARGV[1], tonumber(ARGV[3]))
return 1
`)

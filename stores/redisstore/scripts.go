package redisstore

import "github.com/redis/go-redis/v9"

// The run scripts all take KEYS = {record hash, events stream, active set,
// created index, expiring set}. A change script answers {0, seq}, {1, 0}
// when the run is unknown, or {2, code of the run's state} when the state
// machine refuses the change; numbers only, so every reply decodes the same
// way.
//
// The created index and the expiring set are read and trimmed by member,
// touching the records of other runs (named from the prefix) than the one
// in KEYS: fine on one server, one more reason a Cluster is not supported.

// prelude is shared by the change scripts. allowed mirrors
// svc.RunState.CanMove; finish is the step into a terminal state: the end
// marker "<seq>-1" after the last event wakes and ends every stream reader,
// the run leaves the active set and its keys get the TTL.
const prelude = nowms + `
local allowed = {
  pending = {running = true, cancelled = true},
  running = {completed = true, failed = true, cancelled = true, waiting = true},
  waiting = {running = true, failed = true, cancelled = true},
}
local codes = {pending = 1, running = 2, completed = 3, failed = 4, cancelled = 5, waiting = 6}
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
    redis.call('PEXPIRE', KEYS[1] .. ':steps', ttl)
    redis.call('ZADD', KEYS[5], string.format('%d', nowms() + ttl), id)
  end
end
`

// nowms is the server's clock in Unix milliseconds: the clock PEXPIRE
// counts on. (Scripts are replicated by their effects, so reading the
// clock is allowed before writing.)
const nowms = `
local function nowms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
`

// createScript: ARGV = {id, created_at in Unix microseconds, key prefix,
// field, value, ...}; answers 1, or 0 when the run exists. A leftover events
// stream (its record deleted by hand) is dropped so the new run starts at
// seq 1. It first trims the index of a few runs whose keys have expired:
// each run enters the expiring set at most once per end, so trimming a few
// per Create keeps up with them.
var createScript = redis.NewScript(nowms + trim + create + `
return create(1)
`)

// create is createScript's body, its arguments starting at ARGV[base]:
// {id, created_at, key prefix, field, value, ...}.
const create = `
local function create(base)
  trim(ARGV[base + 2], 16)
  if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
  redis.call('DEL', KEYS[2], KEYS[1] .. ':steps')
  redis.call('HSET', KEYS[1], unpack(ARGV, base + 3))
  redis.call('SADD', KEYS[3], ARGV[base])
  redis.call('ZADD', KEYS[4], ARGV[base + 1], ARGV[base])
  return 1
end
`

// createIdemScript: KEYS = the run keys, then the key's reservation (a
// hash: fp, run; expiring with the TTL) and the set of live keys scored by
// expiry (server clock, Unix milliseconds), for the bound. ARGV =
// {fingerprint, ttl ms, max keys, key, then createScript's ARGV}. Answers
// {0, id} when it created the run, {1, run} when the key holds run with the
// same fingerprint, {2, run} with another, {3, ""} when the run id exists.
// A reservation that expired is gone from Redis, so a live hash is all
// there is to check.
var createIdemScript = redis.NewScript(nowms + trim + create + `
local held = redis.call('HMGET', KEYS[6], 'fp', 'run')
if held[1] then
  if held[1] == ARGV[1] then return {1, held[2]} end
  return {2, held[2]}
end
if create(5) == 0 then return {3, ''} end
local ttl = tonumber(ARGV[2])
redis.call('HSET', KEYS[6], 'fp', ARGV[1], 'run', ARGV[5])
redis.call('PEXPIRE', KEYS[6], ttl)
local now = nowms()
redis.call('ZREMRANGEBYSCORE', KEYS[7], '-inf', now)
redis.call('ZADD', KEYS[7], string.format('%d', now + ttl), ARGV[4])
local over = redis.call('ZCARD', KEYS[7]) - tonumber(ARGV[3])
if over > 0 then
  local old = redis.call('ZPOPMIN', KEYS[7], over)
  for i = 1, #old, 2 do
    redis.call('DEL', ARGV[7] .. '::idem:' .. old[i])
  end
end
return {0, ARGV[5]}
`)

// trim handles up to n runs of the expiring set (KEYS[5]) whose time has
// come: a run whose record is gone leaves the created index (KEYS[4]); one
// whose record lives on is put back at its real expiry, or dropped from the
// set when the record no longer expires (the id was created anew).
const trim = `
local function trim(prefix, n)
  local now = nowms()
  local due = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now, 'LIMIT', 0, n)
  for _, id in ipairs(due) do
    local ttl = redis.call('PTTL', prefix .. ':' .. id)
    if ttl == -2 then
      redis.call('ZREM', KEYS[4], id)
      redis.call('ZREM', KEYS[5], id)
    elseif ttl == -1 then
      redis.call('ZREM', KEYS[5], id)
    else
      redis.call('ZADD', KEYS[5], string.format('%d', now + ttl), id)
    end
  end
end
`

// dropGoneScript: KEYS = {created index, expiring set}, ARGV = {key prefix,
// id, ...}: the runs whose record no longer exists leave both. A listing
// calls it for the members it found without a record; checking again here
// keeps a run created anew under the same id in the meantime.
var dropGoneScript = redis.NewScript(`
for i = 2, #ARGV do
  local id = ARGV[i]
  if redis.call('EXISTS', ARGV[1] .. ':' .. id) == 0 then
    redis.call('ZREM', KEYS[1], id)
    redis.call('ZREM', KEYS[2], id)
  end
end
return 0
`)

// indexScript: KEYS = {record, created index, expiring set}, ARGV = {id,
// created_at in Unix microseconds}: adds a run written before the index to
// it, with its expiry, if the record still exists.
var indexScript = redis.NewScript(nowms + `
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
local ttl = redis.call('PTTL', KEYS[1])
if ttl > 0 then
  redis.call('ZADD', KEYS[3], string.format('%d', nowms() + ttl), ARGV[1])
end
return 1
`)

// setStateScript: ARGV = {id, next, reason, now, ttl ms, this node,
// final event fields...}. A waiting run leaves the active set (no node's
// death interrupts it: it holds nothing) and comes back into it, owned by
// the node that moves it to running (which resumes it), when answered.
var setStateScript = redis.NewScript(prelude + `
local cur = redis.call('HGET', KEYS[1], 'state')
if not cur then return {1, 0} end
local nxt = ARGV[2]
if not (allowed[cur] and allowed[cur][nxt]) then return {2, codes[cur] or 0} end
redis.call('HSET', KEYS[1], 'state', nxt, 'reason', ARGV[3], 'updated_at', ARGV[4])
if nxt == 'waiting' then
  redis.call('SREM', KEYS[3], ARGV[1])
elseif cur == 'waiting' and nxt == 'running' then
  redis.call('SADD', KEYS[3], ARGV[1])
  redis.call('HSET', KEYS[1], 'owner', ARGV[6])
end
local seq = lastseq()
if #ARGV > 6 then
  seq = redis.call('HINCRBY', KEYS[1], 'seq', 1)
  redis.call('XADD', KEYS[2], string.format('%d-0', seq), unpack(ARGV, 7))
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

// appendStepsScript: ARGV = {size, bound, encoded step, ...}. The run's
// step log is the list <record>:steps (named from the record key, as the
// events stream is, and given the TTL with it by finish); its size is the
// record's field step_bytes. Answers {0, the list's new length, which is
// the last step's Seq}, or {3, step_bytes} when the batch would pass the
// bound; all checks come before the one write, so a refusal writes
// nothing.
var appendStepsScript = redis.NewScript(prelude + `
local cur = redis.call('HGET', KEYS[1], 'state')
if not cur then return {1, 0} end
if terminal(cur) then return {2, codes[cur]} end
local have = tonumber(redis.call('HGET', KEYS[1], 'step_bytes') or '0')
local size = tonumber(ARGV[1])
if have + size > tonumber(ARGV[2]) then return {3, have} end
redis.call('HINCRBY', KEYS[1], 'step_bytes', size)
return {0, redis.call('RPUSH', KEYS[1] .. ':steps', unpack(ARGV, 3))}
`)

// setFieldScript: ARGV = {field, value, now}.
var setFieldScript = redis.NewScript(prelude + `
local cur = redis.call('HGET', KEYS[1], 'state')
if not cur then return {1, 0} end
if terminal(cur) then return {2, codes[cur]} end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2], 'updated_at', ARGV[3])
return {0, 0}
`)

// finishScript: ARGV = {id, next, reason, now, ttl ms, "1" when a result
// follows else "0", result, final event fields...}: setStateScript with the
// result, for terminal states only, in one script.
var finishScript = redis.NewScript(prelude + `
local cur = redis.call('HGET', KEYS[1], 'state')
if not cur then return {1, 0} end
local nxt = ARGV[2]
if not (terminal(nxt) and allowed[cur] and allowed[cur][nxt]) then return {2, codes[cur] or 0} end
redis.call('HSET', KEYS[1], 'state', nxt, 'reason', ARGV[3], 'updated_at', ARGV[4])
if ARGV[6] == '1' then redis.call('HSET', KEYS[1], 'result', ARGV[7]) end
local seq = lastseq()
if #ARGV > 7 then
  seq = redis.call('HINCRBY', KEYS[1], 'seq', 1)
  redis.call('XADD', KEYS[2], string.format('%d-0', seq), unpack(ARGV, 8))
end
finish(seq, ARGV[1], tonumber(ARGV[5]))
return {0, seq}
`)

// interruptScript: ARGV = {id, now, ttl ms, target, result, owner, this
// node, mode ("all" or "others"), lease key prefix, claim ("1" or "0"),
// final event fields...}; answers 1 when it failed the run, 0 when the run
// was already terminal or is gone (it then only leaves the active set), 2
// when the run's target or owner is not the one result was made for (the
// caller reads them again), 3 when a live node owns the run: another node
// whose lease key exists, or, in mode "others", this node or no owner (a
// run an older build made: only a node's start fails those), and 4 when,
// with claim "1", the run has a task and it claimed it instead of failing
// it: the owner becomes this node, resumed goes up by one, the state stays
// (the answer is then {4, the record's fields and values, the step log's
// length}, the record as the claim left it).
// Failing is one script too: state failed, reason, the failed result, the
// progress with nothing running (what ran failed with the run), and the
// run_failed event before the end marker. Checking the owner's lease and
// taking the run in one script is what makes a claim atomic: of two nodes
// racing, the second finds the first, live, as the owner.
var interruptScript = redis.NewScript(prelude + `
local cur = redis.call('HGET', KEYS[1], 'state')
if not cur or terminal(cur) then
  redis.call('SREM', KEYS[3], ARGV[1])
  return 0
end
local owner = redis.call('HGET', KEYS[1], 'owner') or ''
if (redis.call('HGET', KEYS[1], 'target') or '') ~= ARGV[4] or owner ~= ARGV[6] then return 2 end
if owner == ARGV[7] or owner == '' then
  if ARGV[8] ~= 'all' then return 3 end
elseif redis.call('EXISTS', ARGV[9] .. owner) == 1 then
  return 3
end
if ARGV[10] == '1' then
  local task = redis.call('HGET', KEYS[1], 'task')
  if task and #task > 0 then
    redis.call('HSET', KEYS[1], 'owner', ARGV[7], 'updated_at', ARGV[2])
    redis.call('HINCRBY', KEYS[1], 'resumed', 1)
    return {4, redis.call('HGETALL', KEYS[1]), redis.call('LLEN', KEYS[1] .. ':steps')}
  end
end
redis.call('HSET', KEYS[1], 'state', 'failed', 'reason', 'interrupted', 'updated_at', ARGV[2], 'result', ARGV[5])
local p = redis.call('HGET', KEYS[1], 'progress')
if p then
  local ok, t = pcall(cjson.decode, p)
  if ok and type(t) == 'table' then
    t.failed = (tonumber(t.failed) or 0) + (tonumber(t.running) or 0)
    t.running = 0
    redis.call('HSET', KEYS[1], 'progress', cjson.encode(t))
  end
end
local seq = redis.call('HINCRBY', KEYS[1], 'seq', 1)
redis.call('XADD', KEYS[2], string.format('%d-0', seq), unpack(ARGV, 11))
finish(seq, ARGV[1], tonumber(ARGV[3]))
return 1
`)

// leaseScript takes or renews a node lease (KEYS[1]) for the Store whose
// token is ARGV[2]: it sets ARGV[1] with a TTL of ARGV[3] ms unless the key
// holds another Store's lease (its value ends with another token, or is an
// older build's, with none), and then answers that lease's PTTL (>= -1)
// instead of -3.
var leaseScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur then
  local tok = string.match(cur, ' (%S+)$')
  if tok ~= ARGV[2] then return redis.call('PTTL', KEYS[1]) end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
return -3
`)

// releaseScript deletes a node lease (KEYS[1]) if it is still the one of
// the Store whose token is ARGV[1].
var releaseScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur and string.match(cur, ' (%S+)$') == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)

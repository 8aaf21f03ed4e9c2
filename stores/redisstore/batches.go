package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/svc-dev/svc"
)

var _ svc.BatchStore = (*Store)(nil)

// Batches (svc.BatchStore), for a batch id under prefix P:
//
//	P::batch:<id>          hash  the record: target, state, max_concurrency,
//	                             total, succeeded, failed, running, tokens,
//	                             cost, reason, resumed, owner, created_at,
//	                             updated_at, seq (the last result's)
//	P::batch:<id>:chunks   hash  chunk number → the chunk's tasks (JSON array)
//	P::batch:<id>:res      hash  task index → its result
//	P::batch:<id>:byidx    zset  the indexes with a result, scored by index
//	P::batch:<id>:byfin    zset  the same, scored by seq (finish order)
//	P::batches             zset  every batch id, score 0 (listed by id: UUIDv7s sort by time)
//	P::batches:open        set   the ids of the batches not yet terminal, for claims
//
// A batch's owner is "<node id>/<token>": ClaimBatches takes a batch whose
// node has no lease (it stopped), or that is this node in another life
// (another token), in the one script that checks the lease. Batches keep
// no TTL.

func (s *Store) batchKey(id string) string { return s.prefix + "::batch:" + id }
func (s *Store) batchKeys(id string) []string {
	k := s.batchKey(id)
	return []string{k, k + ":chunks", k + ":res", k + ":byidx", k + ":byfin", s.prefix + "::batches", s.prefix + "::batches:open"}
}

// batchPrelude mirrors svc.BatchState.CanMove.
const batchPrelude = `
local allowed = {
  queued = {running = true, cancelled = true, failed = true},
  running = {completed = true, failed = true, cancelled = true},
}
local function terminal(s)
  return s == 'completed' or s == 'failed' or s == 'cancelled'
end
`

// createBatchScript: ARGV = id, then field/value pairs. {0} or {1} when
// the batch exists.
var createBatchScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return {1} end
for i = 2, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i+1]) end
redis.call('ZADD', KEYS[6], 0, ARGV[1])
redis.call('SADD', KEYS[7], ARGV[1])
return {0}
`)

// addResultsScript: ARGV = running, now, then index, result, success
// (0|1), tokens, cost for each result. {0, added}, {1} unknown, {2,
// state} terminal.
var addResultsScript = redis.NewScript(batchPrelude + `
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return {1} end
if terminal(state) then return {2, state} end
local n = 0
for i = 3, #ARGV, 5 do
  local idx = ARGV[i]
  if redis.call('HSETNX', KEYS[3], idx, ARGV[i+1]) == 1 then
    local seq = redis.call('HINCRBY', KEYS[1], 'seq', 1)
    redis.call('ZADD', KEYS[4], idx, idx)
    redis.call('ZADD', KEYS[5], seq, idx)
    if ARGV[i+2] == '1' then
      redis.call('HINCRBY', KEYS[1], 'succeeded', 1)
    else
      redis.call('HINCRBY', KEYS[1], 'failed', 1)
    end
    redis.call('HINCRBY', KEYS[1], 'tokens', ARGV[i+3])
    redis.call('HINCRBYFLOAT', KEYS[1], 'cost', ARGV[i+4])
    n = n + 1
  end
end
redis.call('HSET', KEYS[1], 'running', ARGV[1], 'updated_at', ARGV[2])
return {0, n}
`)

// setBatchStateScript: ARGV = id, next, reason, now.
var setBatchStateScript = redis.NewScript(batchPrelude + `
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return {1} end
if not (allowed[state] and allowed[state][ARGV[2]]) then return {2, state} end
redis.call('HSET', KEYS[1], 'state', ARGV[2], 'reason', ARGV[3], 'updated_at', ARGV[4])
if terminal(ARGV[2]) then
  redis.call('HSET', KEYS[1], 'running', 0)
  redis.call('SREM', KEYS[7], ARGV[1])
end
return {0}
`)

// setBatchProviderScript: ARGV = provider ("" removes it), now. {0},
// {1} unknown, {2, state} terminal.
var setBatchProviderScript = redis.NewScript(batchPrelude + `
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return {1} end
if terminal(state) then return {2, state} end
if ARGV[1] == '' then
  redis.call('HDEL', KEYS[1], 'provider')
else
  redis.call('HSET', KEYS[1], 'provider', ARGV[1])
end
redis.call('HSET', KEYS[1], 'updated_at', ARGV[2])
return {0}
`)

// claimBatchesScript: KEYS[1] = the open set; ARGV = owner, this node,
// prefix. It answers the ids it claimed.
var claimBatchesScript = redis.NewScript(`
local out = {}
for _, id in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local key = ARGV[3] .. '::batch:' .. id
  local owner = redis.call('HGET', key, 'owner') or ''
  if owner ~= ARGV[1] then
    local node = string.match(owner, '^(.*)/[^/]*$') or owner
    if node == ARGV[2] or node == '' or redis.call('EXISTS', ARGV[3] .. '::node:' .. node) == 0 then
      redis.call('HSET', key, 'owner', ARGV[1])
      redis.call('HINCRBY', key, 'resumed', 1)
      table.insert(out, id)
    end
  end
end
return out
`)

// bdo runs fn under the store's shared lock, refusing a batch id that
// could name another key.
func (s *Store) bdo(ctx context.Context, id string, fn func(context.Context) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return errClosed()
	}
	if strings.Contains(id, ":") {
		return svc.UnknownBatch(id)
	}
	return fn(ctx)
}

func (s *Store) bfail(err error, what, id string) error {
	return svc.Wrap(svc.KindRuntime, err, fmt.Sprintf("redisstore: %s batch %q", what, id))
}

// PutBatchChunk stores a chunk of tasks; see svc.BatchStore.
func (s *Store) PutBatchChunk(ctx context.Context, batchID string, n int, tasks []json.RawMessage) error {
	if n < 0 {
		return svc.Errorf(svc.KindSpecValidation, "batch %q: negative chunk %d", batchID, n)
	}
	data, err := svc.EncodeBatchChunk(tasks)
	if err != nil {
		return err
	}
	return s.bdo(ctx, batchID, func(ctx context.Context) error {
		if err := s.c.HSet(ctx, s.batchKey(batchID)+":chunks", strconv.Itoa(n), data).Err(); err != nil {
			return s.bfail(err, "store a chunk of", batchID)
		}
		return nil
	})
}

// BatchChunk returns a chunk of tasks; see svc.BatchStore.
func (s *Store) BatchChunk(ctx context.Context, batchID string, n int) ([]json.RawMessage, error) {
	var tasks []json.RawMessage
	err := s.bdo(ctx, batchID, func(ctx context.Context) error {
		v, err := s.c.HGet(ctx, s.batchKey(batchID)+":chunks", strconv.Itoa(n)).Bytes()
		if errors.Is(err, redis.Nil) {
			return svc.Errorf(svc.KindRegistry, "batch %q: no chunk %d", batchID, n)
		}
		if err != nil {
			return s.bfail(err, "read a chunk of", batchID)
		}
		if err := json.Unmarshal(v, &tasks); err != nil {
			return svc.Wrap(svc.KindRuntime, err, "redisstore: corrupt chunk of batch "+strconv.Quote(batchID))
		}
		return nil
	})
	return tasks, err
}

// CreateBatch stores a batch's record; see svc.BatchStore.
func (s *Store) CreateBatch(ctx context.Context, rec svc.BatchRecord) error {
	if err := svc.CheckBatchRecord(&rec); err != nil {
		return err
	}
	t := time.Now()
	if rec.CreatedAt.IsZero() {
		rec.CreatedAt = t
	}
	return s.bdo(ctx, rec.BatchID, func(ctx context.Context) error {
		args := []any{rec.BatchID, "target", rec.Target, "state", string(rec.State), "max_concurrency", rec.MaxConcurrency,
			"total", rec.Counts.Total, "succeeded", 0, "failed", 0, "running", 0, "tokens", 0, "cost", "0", "reason", rec.Reason,
			"resumed", rec.Resumed, "owner", rec.Owner, "created_at", formatTime(rec.CreatedAt), "updated_at", formatTime(t), "seq", 0,
			"mode", string(rec.Mode)}
		if len(rec.Provider) > 0 {
			args = append(args, "provider", string(rec.Provider))
		}
		res, err := createBatchScript.Run(ctx, s.c, s.batchKeys(rec.BatchID), args...).Int64Slice()
		if err != nil {
			return s.bfail(err, "create", rec.BatchID)
		}
		if len(res) > 0 && res[0] == 1 {
			return svc.Errorf(svc.KindRunState, "batch %q exists", rec.BatchID)
		}
		return nil
	})
}

func decodeBatch(id string, h map[string]string) (svc.BatchRecord, error) {
	if len(h) == 0 {
		return svc.BatchRecord{}, svc.UnknownBatch(id)
	}
	var r svc.BatchRecord
	r.BatchID, r.Target, r.State, r.Reason, r.Owner = id, h["target"], svc.BatchState(h["state"]), h["reason"], h["owner"]
	r.MaxConcurrency = int(parseInt(h["max_concurrency"]))
	r.Counts = svc.BatchCounts{Total: parseInt(h["total"]), Succeeded: parseInt(h["succeeded"]), Failed: parseInt(h["failed"]),
		Running: parseInt(h["running"])}
	r.TokensUsed, r.Resumed = parseInt(h["tokens"]), int(parseInt(h["resumed"]))
	r.Mode = svc.BatchMode(h["mode"])
	if p := h["provider"]; p != "" {
		r.Provider = json.RawMessage(p)
	}
	r.CostUSD, _ = strconv.ParseFloat(h["cost"], 64)
	var err1, err2 error
	r.CreatedAt, err1 = time.Parse(time.RFC3339Nano, h["created_at"])
	r.UpdatedAt, err2 = time.Parse(time.RFC3339Nano, h["updated_at"])
	if err := errors.Join(err1, err2); err != nil || !r.State.Valid() {
		return svc.BatchRecord{}, svc.Errorf(svc.KindRuntime, "redisstore: corrupt batch %q", id)
	}
	return r, nil
}

// GetBatch returns a batch's record; see svc.BatchStore.
func (s *Store) GetBatch(ctx context.Context, batchID string) (svc.BatchRecord, error) {
	var rec svc.BatchRecord
	err := s.bdo(ctx, batchID, func(ctx context.Context) error {
		h, err := s.c.HGetAll(ctx, s.batchKey(batchID)).Result()
		if err != nil {
			return s.bfail(err, "read", batchID)
		}
		rec, err = decodeBatch(batchID, h)
		return err
	})
	return rec, err
}

// ListBatches lists batches newest first (their ids are UUIDv7); see
// svc.BatchStore.
func (s *Store) ListBatches(ctx context.Context, cursor string, limit int) (svc.BatchPage, error) {
	limit, err := svc.BatchPageLimit(limit)
	if err != nil {
		return svc.BatchPage{}, err
	}
	page := svc.BatchPage{Batches: []svc.BatchStatus{}}
	err = s.bdo(ctx, "", func(ctx context.Context) error {
		hi := "+"
		if cursor != "" {
			hi = "(" + cursor
		}
		ids, err := s.c.ZRevRangeByLex(ctx, s.prefix+"::batches", &redis.ZRangeBy{Max: hi, Min: "-", Count: int64(limit + 1)}).Result()
		if err != nil {
			return s.bfail(err, "list", "")
		}
		more := len(ids) > limit
		ids = ids[:min(len(ids), limit)]
		cmds := make([]*redis.MapStringStringCmd, len(ids))
		if _, err := s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, id := range ids {
				cmds[i] = p.HGetAll(ctx, s.batchKey(id))
			}
			return nil
		}); err != nil {
			return s.bfail(err, "list", "")
		}
		for i, id := range ids {
			rec, err := decodeBatch(id, cmds[i].Val())
			if svc.KindOf(err) == svc.KindRegistry {
				continue // deleted meanwhile
			}
			if err != nil {
				return err
			}
			page.Batches = append(page.Batches, rec.BatchStatus)
		}
		if more && len(ids) > 0 {
			page.NextCursor = ids[len(ids)-1]
		}
		return nil
	})
	return page, err
}

// AddBatchResults stores results; see svc.BatchStore.
func (s *Store) AddBatchResults(ctx context.Context, batchID string, running int64, results []svc.BatchResult) (int, error) {
	args := []any{running, formatTime(time.Now())}
	for _, r := range results {
		if !json.Valid(r.Result) || r.Index < 0 {
			return 0, svc.Errorf(svc.KindSpecValidation, "batch %q: result %d is not a JSON value at a valid index", batchID, r.Index)
		}
		ok := 0
		if r.Success {
			ok = 1
		}
		args = append(args, r.Index, []byte(r.Result), ok, r.Tokens, strconv.FormatFloat(r.Cost, 'g', -1, 64))
	}
	n := 0
	err := s.bdo(ctx, batchID, func(ctx context.Context) error {
		res, err := addResultsScript.Run(ctx, s.c, s.batchKeys(batchID), args...).Slice()
		if err != nil {
			return s.bfail(err, "store results of", batchID)
		}
		switch code, _ := res[0].(int64); code {
		case 1:
			return svc.UnknownBatch(batchID)
		case 2:
			state, _ := res[1].(string)
			return svc.BatchEnded(batchID, svc.BatchState(state))
		}
		k, _ := res[1].(int64)
		n = int(k)
		return nil
	})
	return n, err
}

// BatchResults reads results; see svc.BatchStore.
func (s *Store) BatchResults(ctx context.Context, batchID string, order svc.BatchOrder, after int64, limit int) ([]svc.BatchResult, error) {
	if order != svc.BatchByIndex && order != svc.BatchByFinish {
		return nil, svc.Errorf(svc.KindSpecValidation, "order %q: want index or finish", order)
	}
	var out []svc.BatchResult
	err := s.bdo(ctx, batchID, func(ctx context.Context) error {
		k := s.batchKey(batchID)
		if n, err := s.c.Exists(ctx, k).Result(); err != nil {
			return s.bfail(err, "read", batchID)
		} else if n == 0 {
			return svc.UnknownBatch(batchID)
		}
		by := k + ":byidx"
		if order == svc.BatchByFinish {
			by = k + ":byfin"
		}
		zs, err := s.c.ZRangeByScoreWithScores(ctx, by, &redis.ZRangeBy{Min: "(" + strconv.FormatInt(after, 10), Max: "+inf",
			Count: int64(limit)}).Result()
		if err != nil {
			return s.bfail(err, "read results of", batchID)
		}
		if len(zs) == 0 {
			return nil
		}
		members := make([]string, len(zs))
		for i, z := range zs {
			members[i] = z.Member.(string)
		}
		var vals *redis.SliceCmd
		var seqs *redis.FloatSliceCmd
		if _, err := s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			vals = p.HMGet(ctx, k+":res", members...)
			if order == svc.BatchByIndex {
				seqs = p.ZMScore(ctx, k+":byfin", members...)
			}
			return nil
		}); err != nil {
			return s.bfail(err, "read results of", batchID)
		}
		for i, z := range zs {
			v, _ := vals.Val()[i].(string)
			idx, _ := strconv.ParseInt(members[i], 10, 64)
			r := svc.BatchResult{Index: idx, Result: json.RawMessage(v)}
			if order == svc.BatchByIndex {
				r.Seq = int64(seqs.Val()[i])
			} else {
				r.Seq = int64(z.Score)
			}
			out = append(out, r)
		}
		return nil
	})
	return out, err
}

// SetBatchState moves a batch; see svc.BatchStore.
func (s *Store) SetBatchState(ctx context.Context, batchID string, next svc.BatchState, reason string) error {
	return s.bdo(ctx, batchID, func(ctx context.Context) error {
		res, err := setBatchStateScript.Run(ctx, s.c, s.batchKeys(batchID), batchID, string(next), reason, formatTime(time.Now())).Slice()
		if err != nil {
			return s.bfail(err, "set the state of", batchID)
		}
		switch code, _ := res[0].(int64); code {
		case 1:
			return svc.UnknownBatch(batchID)
		case 2:
			state, _ := res[1].(string)
			return svc.BatchMoveRefused(batchID, svc.BatchState(state), next)
		}
		return nil
	})
}

// SetBatchProvider replaces a batch's Provider value; see svc.BatchStore.
func (s *Store) SetBatchProvider(ctx context.Context, batchID string, provider json.RawMessage) error {
	if err := svc.CheckBatchProvider(batchID, provider); err != nil {
		return err
	}
	return s.bdo(ctx, batchID, func(ctx context.Context) error {
		res, err := setBatchProviderScript.Run(ctx, s.c, s.batchKeys(batchID), string(provider), formatTime(time.Now())).Slice()
		if err != nil {
			return s.bfail(err, "set the provider value of", batchID)
		}
		switch code, _ := res[0].(int64); code {
		case 1:
			return svc.UnknownBatch(batchID)
		case 2:
			state, _ := res[1].(string)
			return svc.BatchEnded(batchID, svc.BatchState(state))
		}
		return nil
	})
}

// ClaimBatches claims the unfinished batches whose owner's node has no
// live lease, or is this node in an earlier life; see svc.BatchStore.
func (s *Store) ClaimBatches(ctx context.Context, owner string) ([]svc.BatchRecord, error) {
	var out []svc.BatchRecord
	err := s.bdo(ctx, "", func(ctx context.Context) error {
		node := owner
		if i := strings.LastIndexByte(owner, '/'); i >= 0 {
			node = owner[:i]
		}
		ids, err := claimBatchesScript.Run(ctx, s.c, []string{s.prefix + "::batches:open"}, owner, node, s.prefix).StringSlice()
		if err != nil {
			return s.bfail(err, "claim", "")
		}
		slices.Sort(ids)
		for _, id := range ids {
			h, err := s.c.HGetAll(ctx, s.batchKey(id)).Result()
			if err != nil {
				return s.bfail(err, "read", id)
			}
			rec, err := decodeBatch(id, h)
			if err != nil {
				return err
			}
			out = append(out, rec)
		}
		return nil
	})
	return out, err
}

// DeleteBatch removes a batch; see svc.BatchStore.
func (s *Store) DeleteBatch(ctx context.Context, batchID string) error {
	return s.bdo(ctx, batchID, func(ctx context.Context) error {
		keys := s.batchKeys(batchID)
		_, err := s.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Del(ctx, keys[:5]...)
			p.ZRem(ctx, keys[5], batchID)
			p.SRem(ctx, keys[6], batchID)
			return nil
		})
		if err != nil {
			return s.bfail(err, "delete", batchID)
		}
		return nil
	})
}

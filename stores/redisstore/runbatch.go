package redisstore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/svc-dev/svc"
)

var _ svc.RunBatchWriter = (*Store)(nil)

// appendBatchScript: ARGV = {now, progress JSON or "", step log bound,
// number of events, then each event as its field count and fields, then
// each step as its size and encoding}. Answers {0, the last event's seq
// (0 without events), steps written, the step log's new length, its size
// in bytes} or appendScript's refusals; the checks come before any write,
// and steps are written while they fit the bound.
var appendBatchScript = redis.NewScript(prelude + `
local cur = redis.call('HGET', KEYS[1], 'state')
if not cur then return {1, 0} end
if terminal(cur) then return {2, codes[cur]} end
if ARGV[2] ~= '' then redis.call('HSET', KEYS[1], 'progress', ARGV[2], 'updated_at', ARGV[1]) end
local ne = tonumber(ARGV[4])
local seq = 0
local i = 5
if ne > 0 then
  seq = redis.call('HINCRBY', KEYS[1], 'seq', ne) - ne
  for e = 1, ne do
    local k = tonumber(ARGV[i])
    seq = seq + 1
    redis.call('XADD', KEYS[2], string.format('%d-0', seq), unpack(ARGV, i + 1, i + k))
    i = i + k + 1
  end
end
local have = tonumber(redis.call('HGET', KEYS[1], 'step_bytes') or '0')
local bound = tonumber(ARGV[3])
local n, add, last = 0, 0, 0
local steps = {}
while i < #ARGV do
  local size = tonumber(ARGV[i])
  if have + add + size > bound then break end
  add = add + size
  n = n + 1
  steps[n] = ARGV[i + 1]
  i = i + 2
end
if n > 0 then
  redis.call('HINCRBY', KEYS[1], 'step_bytes', add)
  last = redis.call('RPUSH', KEYS[1] .. ':steps', unpack(steps))
end
return {0, seq, n, last, have + add}
`)

// AppendBatch writes a run's progress, events and steps in one script
// through the commit queue; see svc.RunBatchWriter.
func (s *Store) AppendBatch(ctx context.Context, runID string, b svc.RunBatch) (svc.RunBatchResult, error) {
	var res svc.RunBatchResult
	if len(b.Steps) > 0 {
		if err := svc.CheckSteps(b.Steps); err != nil {
			return res, err
		}
	}
	now := time.Now()
	args := make([]any, 4, 4+len(b.Events)*9+len(b.Steps)*2)
	args[0], args[1], args[2], args[3] = formatTime(now), "", s.maxStepBytes, len(b.Events)
	if b.Progress != nil {
		p, err := json.Marshal(b.Progress)
		if err != nil {
			return res, svc.Wrap(svc.KindRuntime, err, "redisstore: encode progress")
		}
		args[1] = p
	}
	for _, ev := range b.Events {
		f := eventFields(ev)
		args = append(args, len(f))
		args = append(args, f...)
	}
	for _, st := range b.Steps {
		if st.Timestamp.IsZero() {
			st.Timestamp = now
		}
		v, err := json.Marshal(stepJSON{Kind: st.Kind, Key: st.Key, Data: st.Data, Timestamp: st.Timestamp.UTC()})
		if err != nil {
			return res, svc.Wrap(svc.KindRuntime, err, fmt.Sprintf("redisstore: encode step of run %q", runID))
		}
		args = append(args, st.Size(), v)
	}
	err := s.do(ctx, runID, func(ctx context.Context) error {
		r, err := s.eval(ctx, appendBatchScript, s.keys(runID), args...).Int64Slice()
		if err != nil {
			return s.fail(err, "write to", runID)
		}
		switch {
		case len(r) == 2 && r[0] == 1:
			return notFound(runID)
		case len(r) == 2 && r[0] == 2:
			return refused(runID, reply{state: stateNames[r[1]]}, "write")
		case len(r) != 5 || r[0] != 0 || r[2] < 0 || r[2] > int64(len(b.Steps)):
			return svc.Errorf(svc.KindRuntime, "redisstore: write to run %q: unexpected reply %v", runID, r)
		}
		res = svc.RunBatchResult{LastEvent: r[1], Steps: int(r[2])}
		if res.Steps > 0 {
			res.LastStep = r[3]
		}
		if res.Steps < len(b.Steps) {
			res.Full = svc.StepLogFull(runID, r[4], b.Steps[res.Steps].Size(), s.maxStepBytes)
		}
		return nil
	})
	if err != nil {
		return svc.RunBatchResult{}, err
	}
	return res, nil
}

package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/stores/internal/follow"
)

// How streams follow writes from any process without a connection each:
//
// One goroutine per Store, the hub, runs XREAD BLOCK over the events streams
// of every run some Stream is waiting on, and wakes that run's readers when
// its stream grows. Each reader then fetches what it has not sent with a
// short XRANGE from its own position. The hub only signals, so readers at
// different positions of one run share it, and a burst of entries costs one
// wake-up.
//
// Each Stream runs the stores' follow loop (stores/internal/follow) with
// the hub as its wake-up.
//
// No write is missed: the hub starts watching a run at (or before) the
// position its first reader starts from, and reports every entry after what
// it last saw, so each entry is reported after it exists and the reader it
// wakes reads after that. A reader's wake channel holds one signal, so
// wake-ups coalesce but never block the hub.
//
// The hub's XREAD also covers a private "wake" stream (P::wake:<random>): an
// entry added there interrupts the hub when a run starts being watched while
// it blocks, and when the store closes, as go-redis cannot abort a blocking
// read through its context.

// subscriber is one Stream's wake-up.
type subscriber struct{ wake chan struct{} }

// watched is a run some Stream follows.
type watched struct {
	subs map[*subscriber]struct{}
	from string // stream id the hub starts after, set by the first reader
}

// recheck is how often an idle reader checks its run still exists, for a run
// whose keys were deleted under it; a terminal run always ends its streams
// through its end marker instead.
const recheck = 5 * time.Second

// Stream replays runID's events with Seq > after and follows new ones,
// written by any process, until the run is terminal and every event was
// sent, ctx ends or the store closes. The caller must drain the channel or
// cancel ctx.
func (s *Store) Stream(ctx context.Context, runID string, after int64) (<-chan svc.RunEvent, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, errClosed()
	}
	if strings.Contains(runID, ":") {
		return nil, notFound(runID)
	}
	after = max(after, 0)
	vals, err := s.c.HMGet(ctx, s.recKey(runID), "state", "seq").Result()
	if err != nil {
		return nil, s.fail(err, "read", runID)
	}
	if vals[0] == nil {
		return nil, notFound(runID)
	}
	// Start reading no later than the last event, so a resume past the end
	// still meets the end marker; Seq > after filters what is sent.
	last, _ := vals[1].(string)
	cursor := seqID(min(after, parseInt(last)), 0)

	sub := &subscriber{wake: make(chan struct{}, 1)}
	s.watch(runID, sub, cursor)
	out := make(chan svc.RunEvent)
	// Stop when either the caller's context or the store's ends.
	sctx, cancel := context.WithCancel(ctx)
	unhook := context.AfterFunc(s.ctx, cancel)
	s.wg.Add(1) // under the read lock: Close cannot be waiting yet
	go func() {
		defer s.wg.Done()
		defer close(out)
		defer s.unwatch(runID, sub)
		defer cancel()
		defer unhook()
		s.follow(sctx, runID, after, cursor, sub, out)
	}()
	return out, nil
}

// follow runs the stores' follow loop over the run's events stream: each
// read is an XRANGE from the last entry seen; the end marker ends the
// stream, as do a vanished run and garbage in the stream (the channel
// cannot carry an error). Redis errors are retried with a backoff. The hub
// wakes the loop; the recheck poll notices a run deleted under it.
func (s *Store) follow(ctx context.Context, runID string, after int64, cursor string, sub *subscriber, out chan<- svc.RunEvent) {
	evKey := s.evKey(runID)
	follow.Run(ctx, nil, after, follow.Source{
		Arm: func() <-chan struct{} { return sub.wake },
		Read: func(ctx context.Context, _ int64) ([]svc.RunEvent, bool, bool, error) {
			msgs, err := s.c.XRangeN(ctx, evKey, nextID(cursor), "+", readBatch).Result()
			if err != nil {
				return nil, false, false, err
			}
			if len(msgs) == 0 {
				n, err := s.c.Exists(ctx, s.recKey(runID)).Result()
				return nil, err == nil && n == 0, false, err
			}
			evs := make([]svc.RunEvent, 0, len(msgs))
			for _, m := range msgs {
				cursor = m.ID
				ev, end, err := decodeEntry(m.ID, m.Values)
				if end || err != nil {
					return evs, true, false, nil
				}
				ev.RunID = runID
				evs = append(evs, ev)
			}
			return evs, false, len(msgs) == readBatch, nil
		},
		Poll:  recheck,
		Retry: func(error) bool { return true },
	}, out)
}

// watch registers sub for runID's writes, starting the hub if needed.
func (s *Store) watch(runID string, sub *subscriber, from string) {
	s.hubMu.Lock()
	w := s.watching[runID]
	if w == nil {
		w = &watched{subs: map[*subscriber]struct{}{}, from: from}
		s.watching[runID] = w
	}
	w.subs[sub] = struct{}{}
	if !s.hubStarted {
		s.hubStarted = true
		s.wakeKey = s.prefix + "::wake:" + randomHex()
		s.wg.Add(1) // the caller holds s.mu shared: Close cannot be waiting
		go func() {
			defer s.wg.Done()
			s.hub()
		}()
	}
	blocked := s.hubBlocked
	s.hubMu.Unlock()
	poke(s.hubKick)
	if blocked {
		s.wakeHub(s.ctx)
	}
}

func (s *Store) unwatch(runID string, sub *subscriber) {
	s.hubMu.Lock()
	defer s.hubMu.Unlock()
	if w := s.watching[runID]; w != nil {
		delete(w.subs, sub)
		if len(w.subs) == 0 {
			delete(s.watching, runID)
		}
	}
}

// hub is the store's one blocking reader; see the comment at the top.
func (s *Store) hub() {
	cursors := map[string]string{} // run id → last entry id the hub saw
	wakeCursor := "0-0"
	backoff := retryMin
	for s.ctx.Err() == nil {
		s.hubMu.Lock()
		for id := range cursors {
			if s.watching[id] == nil {
				delete(cursors, id)
			}
		}
		for id, w := range s.watching {
			if _, ok := cursors[id]; !ok {
				cursors[id] = w.from
			}
		}
		s.hubBlocked = len(cursors) > 0
		s.hubMu.Unlock()
		if len(cursors) == 0 {
			select {
			case <-s.hubKick:
			case <-s.ctx.Done():
			}
			continue
		}

		keys := make([]string, 0, 2*len(cursors)+2)
		ids := make([]string, 0, len(cursors)+1)
		runs := make(map[string]string, len(cursors)) // key → run id
		for id, c := range cursors {
			k := s.evKey(id)
			keys, ids, runs[k] = append(keys, k), append(ids, c), id
		}
		keys, ids = append(keys, s.wakeKey), append(ids, wakeCursor)
		res, err := s.c.XRead(s.ctx, &redis.XReadArgs{Streams: append(keys, ids...), Count: readBatch, Block: block}).Result()

		s.hubMu.Lock()
		s.hubBlocked = false
		s.hubMu.Unlock()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			if !sleep(s.ctx, backoff) {
				return
			}
			backoff = min(2*backoff, retryMax)
			continue
		}
		backoff = retryMin
		for _, xs := range res {
			if len(xs.Messages) == 0 {
				continue
			}
			lastID := xs.Messages[len(xs.Messages)-1].ID
			if xs.Stream == s.wakeKey {
				wakeCursor = lastID
				continue
			}
			id, ok := runs[xs.Stream]
			if !ok {
				continue
			}
			cursors[id] = lastID
			s.hubMu.Lock()
			if w := s.watching[id]; w != nil {
				for sub := range w.subs {
					poke(sub.wake)
				}
			}
			s.hubMu.Unlock()
		}
	}
}

// wakeHub interrupts the hub's XREAD. The wake stream keeps one entry and
// expires, so a crashed process leaves nothing behind for long.
func (s *Store) wakeHub(ctx context.Context) {
	_, _ = s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.XAdd(ctx, &redis.XAddArgs{Stream: s.wakeKey, MaxLen: 1, Values: []any{"w", 1}})
		p.PExpire(ctx, s.wakeKey, time.Minute)
		return nil
	})
}

const (
	retryMin = 50 * time.Millisecond
	retryMax = 2 * time.Second
)

// poke signals c without blocking; a pending signal suffices.
func poke(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// sleep waits d, reporting false if ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// nextID is the smallest stream id after id ("5-0" → "5-1"), so XRANGE can
// start after a position without the "(" syntax of Redis 6.2.
func nextID(id string) string {
	ms, seq, _ := strings.Cut(id, "-")
	n, err := strconv.ParseUint(seq, 10, 64)
	if err != nil {
		return id
	}
	return ms + "-" + strconv.FormatUint(n+1, 10)
}

func randomHex() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

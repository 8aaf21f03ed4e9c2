// Package redisbroker is the svc.Broker on Redis: Streams with consumer
// groups for work subjects, Pub/Sub for broadcasts.
//
// Layout on the server (prefix "svc:" by default):
//
//   - a work subject is the stream {prefix}q:{subject}, one entry per
//     message (field "d"); its consumer group is created with MKSTREAM
//     from the start of the stream, so messages published before the first
//     member subscribes wait for it. An acked entry is XACKed and XDELed:
//     the stream holds only work not yet done.
//   - each member reads new entries with XREADGROUP under its consumer id
//     (SubscribeOptions.ConsumerID, stable across restarts with
//     `svc worker start --consumer-id`), at most as many as it has free
//     handler slots, and reclaims with XAUTOCLAIM every entry of the group
//     idle longer than its AckWait: the entries of a member that died, hung
//     or nacked. The delivery count Redis keeps per pending entry is the
//     Attempt; past MaxDeliver the entry is written as a DeadLetter record
//     to the dead-letter subject's stream and removed.
//   - InProgress is XCLAIM to the same consumer with JUSTID, which resets
//     the entry's idle time without counting a delivery; Nack sets the idle
//     time so the entry becomes reclaimable after the delay (a delay longer
//     than AckWait is cut to AckWait). Ack, Nack and InProgress check in
//     one script that this member still owns the entry.
//   - a member that stops holding nothing leaves the group; members remove
//     the group's other members that hold nothing and have been silent for
//     Options.ConsumerTTL (crashed processes with generated ids).
//   - the streams of publishers' inboxes (svc.results.*) expire a day after
//     their last message, dead letters (svc.dead.*) a week after; a member
//     recreates its group when its stream has gone.
//   - a broadcast subject is the Pub/Sub channel {prefix}b:{subject}.
//
// It needs Redis 6.2 or later (XAUTOCLAIM).
package redisbroker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/broker/internal/flow"
	"github.com/svc-dev/svc/fleetwire"
)

// Options configure a connection.
type Options struct {
	// Prefix starts every key and channel; default "svc:".
	Prefix string
	// Name is the client name the server shows (CLIENT LIST); default
	// "svc".
	Name string
	// Logger receives failures of the background loops; nil is silent.
	Logger *zap.Logger
	// ConsumerTTL is how long a group member that holds no entries may stay
	// silent before the other members remove it from the group (the members
	// of crashed processes with generated ids would otherwise pile up);
	// default an hour. Removing a live member that holds nothing is
	// harmless: Redis recreates it with its next entry.
	ConsumerTTL time.Duration
}

// maxBlock bounds one blocking read, so a stopping member notices soon.
const maxBlock = 500 * time.Millisecond

// Broker is a Redis connection pool.
type Broker struct {
	panics flow.Panics
	rdb    *redis.Client
	// blocking serves the members' blocking XREADGROUPs, one connection
	// each, so that they never take the connections commands need.
	blocking *redis.Client
	o        Options
	log      *zap.Logger

	subs flow.Registry[*subscription] // live subscriptions; closed after Close
}

var (
	_ svc.Broker   = (*Broker)(nil)
	_ svc.Retainer = (*Broker)(nil)
)

func (b *Broker) retainKey(key string) string { return b.o.Prefix + "r:" + key }

// Retain records key as a Redis key that expires after ttl.
func (b *Broker) Retain(ctx context.Context, key string, ttl time.Duration) error {
	if b.isClosed() {
		return svc.ErrBrokerClosed
	}
	return b.wrap("retain", b.rdb.Set(ctx, b.retainKey(key), 1, max(ttl, time.Millisecond)).Err())
}

// Retained reports whether key's Redis key exists (it has not expired).
func (b *Broker) Retained(ctx context.Context, key string) (bool, error) {
	if b.isClosed() {
		return false, svc.ErrBrokerClosed
	}
	n, err := b.rdb.Exists(ctx, b.retainKey(key)).Result()
	if err != nil {
		return false, b.wrap("retained", err)
	}
	return n > 0, nil
}

// Connect opens a client for url (redis://[user:password@]host:port[/db],
// rediss:// for TLS) and pings the server.
func Connect(ctx context.Context, url string, o Options) (*Broker, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, svc.PermanentBrokerError("redisbroker", "", err)
	}
	if o.Prefix == "" {
		o.Prefix = "svc:"
	}
	if o.Name == "" {
		o.Name = "svc"
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.ConsumerTTL <= 0 {
		o.ConsumerTTL = time.Hour
	}
	opt.ClientName = o.Name
	rdb := redis.NewClient(opt)
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, flow.Wrap("redisbroker", "connect to "+opt.Addr, err, permanent)
	}
	bopt := *opt
	bopt.PoolSize = 1 << 12 // connections are made as members block, not up front
	bopt.MinIdleConns = 0
	bopt.MaxIdleConns = 0
	b := &Broker{
		rdb: rdb, blocking: redis.NewClient(&bopt), o: o,
		log: o.Logger.With(zap.String("broker", "redis")),
	}
	b.panics.Log = b.log
	return b, nil
}

// HandlerPanics is how many panics of its handlers this client recovered
// (each logged with its stack, its delivery abandoned).
func (b *Broker) HandlerPanics() int64 { return b.panics.Count() }

// Scheme is "redis".
func (b *Broker) Scheme() string { return "redis" }

// Client is the underlying client.
func (b *Broker) Client() *redis.Client { return b.rdb }

func (b *Broker) streamKey(subject string) string  { return b.o.Prefix + "q:" + subject }
func (b *Broker) channelKey(subject string) string { return b.o.Prefix + "b:" + subject }

func (b *Broker) isClosed() bool { return b.subs.Closed() }

// Ping sends PING.
func (b *Broker) Ping(ctx context.Context) error {
	if b.isClosed() {
		return svc.ErrBrokerClosed
	}
	return b.wrap("ping", b.rdb.Ping(ctx).Err())
}

// Close stops every subscription and closes the pool.
func (b *Broker) Close() error {
	subs, first := b.subs.Close()
	if !first {
		return nil
	}
	for _, s := range subs {
		_ = s.Stop()
	}
	return errors.Join(b.blocking.Close(), b.rdb.Close())
}

func (b *Broker) track(s *subscription) error { return b.subs.Track(s) }

func (b *Broker) untrack(s *subscription) { b.subs.Untrack(s) }

func (b *Broker) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	if b.isClosed() || errors.Is(err, redis.ErrClosed) {
		return flow.Wrap("redisbroker", op, svc.ErrBrokerClosed, nil)
	}
	return flow.Wrap("redisbroker", op, err, permanent)
}

// permanent tells a reply the server will give again (a wrong type, an
// unknown command, a refused script) from a failure of the connection or
// of a server that is loading, busy, failing over or short of memory,
// which a later call may not meet.
func permanent(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) || errors.Is(err, redis.Nil) {
		return false
	}
	for _, p := range []string{"LOADING", "BUSY", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "READONLY", "OOM", "MOVED", "ASK"} {
		if strings.HasPrefix(re.Error(), p+" ") {
			return false
		}
	}
	return true
}

func checkSubject(subject string) error { return flow.CheckSubject("redisbroker", subject) }

// Publish appends data to the subject's stream.
func (b *Broker) Publish(ctx context.Context, subject string, data []byte) error {
	if b.isClosed() {
		return svc.ErrBrokerClosed
	}
	if err := checkSubject(subject); err != nil {
		return err
	}
	if err := flow.CheckSize("redisbroker", len(data)); err != nil {
		return err
	}
	key := b.streamKey(subject)
	add := &redis.XAddArgs{Stream: key, Values: []any{"d", data}}
	var err error
	if ttl := expiry(subject); ttl > 0 {
		pipe := b.rdb.TxPipeline()
		pipe.XAdd(ctx, add)
		pipe.Expire(ctx, key, ttl)
		_, err = pipe.Exec(ctx)
	} else {
		err = b.rdb.XAdd(ctx, add).Err()
	}
	return b.wrap("publish to "+subject, err)
}

// expiry is how long the stream of subject outlives its last message: a
// publisher's inbox (a new one each process) a day, dead letters a week,
// tasks for ever. Members recreate an expired stream's group.
func expiry(subject string) time.Duration {
	switch {
	case strings.HasPrefix(subject, "svc.results."):
		return 24 * time.Hour
	case strings.HasPrefix(subject, "svc.dead."):
		return 7 * 24 * time.Hour
	}
	return 0
}

// Lua scripts: each checks that the entry is still pending for this consumer
// before touching it, so a member whose entry was reclaimed cannot settle or
// extend it. KEYS[1] stream; ARGV[1] group, ARGV[2] consumer, ARGV[3] id.
const ownedLua = `
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if p[1] == nil or p[1][2] ~= ARGV[2] then return 0 end
`

var (
	// ARGV[4]: idle time to set in ms (0: the deadline starts over).
	touchScript = redis.NewScript(ownedLua + `
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3], 'IDLE', ARGV[4], 'JUSTID')
return 1`)
	ackScript = redis.NewScript(ownedLua + `
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
redis.call('XDEL', KEYS[1], ARGV[3])
return 1`)
	// reclaim: XAUTOCLAIM then each claimed entry's delivery count.
	// ARGV[3] min idle ms, ARGV[4] cursor, ARGV[5] count. Returns
	// {next cursor, {id, data or false, deliveries}...}.
	reclaimScript = redis.NewScript(`
local r = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4], 'COUNT', ARGV[5])
local out = {r[1]}
for _, e in ipairs(r[2]) do
  local id = e[1]
  local data = false
  if e[2] then
    for i = 1, #e[2], 2 do
      if e[2][i] == 'd' then data = e[2][i + 1] end
    end
  end
  local n = 0
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], id, id, 1)
  if p[1] then n = p[1][4] end
  table.insert(out, {id, data, n})
end
return out`)
	// prune deletes the group's other consumers that hold nothing and have
	// been idle longer than ARGV[3] ms.
	pruneScript = redis.NewScript(`
local n = 0
for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])) do
  local f = {}
  for i = 1, #c, 2 do f[c[i]] = c[i + 1] end
  if f['name'] ~= ARGV[2] and f['pending'] == 0 and f['idle'] > tonumber(ARGV[3]) then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], f['name'])
    n = n + 1
  end
end
return n`)
	// dropConsumer deletes a consumer that holds no entries.
	dropConsumerScript = redis.NewScript(`
local p = redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[2])
if #p == 0 then redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2]) end
return 1`)
)

var errLost = svc.PermanentBrokerError("redisbroker", "", errors.New("delivery no longer held (its ack deadline passed and another member took it)"))

// Subscribe joins opts.Group on subject as consumer opts.ConsumerID.
func (b *Broker) Subscribe(ctx context.Context, subject string, opts svc.SubscribeOptions, h svc.Handler) (svc.Subscription, error) {
	if h == nil {
		return nil, flow.Refused("redisbroker", "Subscribe needs a handler")
	}
	if err := checkSubject(subject); err != nil {
		return nil, err
	}
	if b.isClosed() {
		return nil, svc.ErrBrokerClosed
	}
	opts = opts.WithDefaults(subject)
	m := &member{b: b, subject: subject, key: b.streamKey(subject), opts: opts, h: h}
	if err := m.createGroup(ctx); err != nil {
		return nil, err
	}
	m.fs = flow.New(opts.Prefetch, nil)
	m.fs.Panics, m.fs.Subject = &b.panics, subject
	s := &subscription{fs: m.fs}
	s.cleanup = func() {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = dropConsumerScript.Run(cctx, b.rdb, []string{m.key}, opts.Group, opts.ConsumerID).Err()
		b.untrack(s)
	}
	if err := b.track(s); err != nil {
		return nil, err
	}
	m.fs.Loop(m.run)
	return s, nil
}

type member struct {
	b       *Broker
	subject string
	key     string
	opts    svc.SubscribeOptions
	h       svc.Handler
	fs      *flow.Sub
}

func (m *member) createGroup(ctx context.Context) error {
	err := m.b.rdb.XGroupCreateMkStream(ctx, m.key, m.opts.Group, "0").Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return m.b.wrap("create group "+m.opts.Group, err)
	}
	return nil
}

// reclaimEvery is how often a member looks for entries idle past the ack
// deadline.
func (m *member) reclaimEvery() time.Duration {
	return min(max(m.opts.AckWait/4, 20*time.Millisecond), 5*time.Second)
}

// run takes the free handler slots, fills them first with reclaimed entries
// (when a reclaim is due), then with new ones, until the subscription stops.
func (m *member) run(ctx context.Context) {
	every := m.reclaimEvery()
	nextReclaim := time.Now()
	pruneEvery := min(m.b.o.ConsumerTTL/2, 5*time.Minute)
	nextPrune := time.Now().Add(pruneEvery)
	cursor := "0-0"
	backoff := 50 * time.Millisecond
	fail := func(op string, err error) bool {
		if ctx.Err() != nil {
			return false
		}
		if strings.HasPrefix(err.Error(), "NOGROUP") {
			// The stream expired (or was deleted): start it afresh.
			if m.createGroup(ctx) == nil {
				return true
			}
		}
		m.b.log.Warn(op+" failed", zap.String("subject", m.subject), zap.Error(err))
		select {
		case <-ctx.Done():
			return false
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
		return true
	}
	for {
		if !m.fs.Acquire() {
			return
		}
		n := 1
		for m.fs.TryAcquire() {
			n++
		}
		used := 0
		var err error
		if !time.Now().Before(nextPrune) {
			nextPrune = time.Now().Add(pruneEvery)
			if err := pruneScript.Run(ctx, m.b.rdb, []string{m.key}, m.opts.Group, m.opts.ConsumerID,
				m.b.o.ConsumerTTL.Milliseconds()).Err(); err != nil && ctx.Err() == nil {
				m.b.log.Debug("pruning idle consumers failed", zap.String("subject", m.subject), zap.Error(err))
			}
		}
		if !time.Now().Before(nextReclaim) {
			var k int
			k, cursor, err = m.reclaim(ctx, cursor, n)
			used += k
			if err != nil {
				m.release(n - used)
				if !fail("reclaim", err) {
					return
				}
				continue
			}
			if cursor == "0-0" {
				nextReclaim = time.Now().Add(every)
			}
		}
		if used < n {
			block := min(time.Until(nextReclaim), maxBlock)
			var k int
			k, err = m.read(ctx, n-used, max(block, time.Millisecond))
			used += k
		}
		m.release(n - used)
		if err != nil {
			if !fail("read", err) {
				return
			}
			continue
		}
		backoff = 50 * time.Millisecond
	}
}

func (m *member) release(n int) {
	for range n {
		m.fs.Release()
	}
}

// read takes up to n new entries and dispatches them; it returns how many.
func (m *member) read(ctx context.Context, n int, block time.Duration) (int, error) {
	res, err := m.b.blocking.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: m.opts.Group, Consumer: m.opts.ConsumerID, Streams: []string{m.key, ">"},
		Count: int64(n), Block: block,
	}).Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	k := 0
	for _, st := range res {
		for _, e := range st.Messages {
			data, _ := e.Values["d"].(string)
			m.dispatch(e.ID, []byte(data), 1)
			k++
		}
	}
	return k, nil
}

// reclaim claims up to n entries idle past the ack deadline, from cursor on.
func (m *member) reclaim(ctx context.Context, cursor string, n int) (int, string, error) {
	res, err := reclaimScript.Run(ctx, m.b.rdb, []string{m.key},
		m.opts.Group, m.opts.ConsumerID, m.opts.AckWait.Milliseconds(), cursor, n).Slice()
	if err != nil {
		return 0, cursor, err
	}
	if len(res) == 0 {
		return 0, "0-0", nil
	}
	next, _ := res[0].(string)
	if next == "" {
		next = "0-0"
	}
	k := 0
	for _, r := range res[1:] {
		e, ok := r.([]any)
		if !ok || len(e) != 3 {
			continue
		}
		id, _ := e[0].(string)
		data, present := e[1].(string)
		count, _ := e[2].(int64)
		if !present {
			// Deleted from the stream while pending: nothing to deliver.
			_ = ackScript.Run(ctx, m.b.rdb, []string{m.key}, m.opts.Group, m.opts.ConsumerID, id).Err()
			continue
		}
		if k == n { // cannot happen with COUNT n; never overfill the slots
			break
		}
		m.dispatch(id, []byte(data), int(count))
		k++
	}
	return k, next, nil
}

// dispatch hands one entry (holding one slot) to the handler, or to the dead
// letter once it has been delivered MaxDeliver times already.
func (m *member) dispatch(id string, data []byte, attempt int) {
	a := &acker{m: m, id: id}
	if m.fs.Stopping() {
		// Arrived as the member stops: make it reclaimable at once.
		m.fs.Go(func(context.Context) { _ = a.Nack(context.Background(), 0) })
		return
	}
	if m.opts.MaxDeliver > 0 && attempt > m.opts.MaxDeliver {
		m.fs.Go(func(ctx context.Context) { m.deadLetter(ctx, a, data, attempt-1) })
		return
	}
	d := &svc.Delivery{Subject: m.subject, Data: data, Attempt: attempt, ID: id, AckWait: m.opts.AckWait, Acker: a}
	m.fs.Go(func(ctx context.Context) { m.h(ctx, d) })
}

func (m *member) deadLetter(ctx context.Context, a *acker, data []byte, deliveries int) {
	dl := svc.DeadLetter{
		Subject: m.subject, Data: data, Deliveries: deliveries, At: time.Now().UTC(),
		Reason: fmt.Sprintf("not acknowledged after %d deliveries", deliveries),
	}
	if m.opts.OnDeadLetter != nil {
		m.opts.OnDeadLetter(ctx, dl)
	}
	rec, err := json.Marshal(dl)
	if err == nil {
		// A context of its own: the record must land even while stopping.
		pctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err = m.b.Publish(pctx, fleetwire.DeadLetterSubject(m.subject), rec); err == nil {
			err = a.Ack(pctx)
		}
	}
	if err != nil {
		m.b.log.Warn("dead letter not completed; the entry stays", zap.String("subject", m.subject), zap.Error(err))
	}
}

type acker struct {
	m  *member
	id string
}

func (a *acker) run(ctx context.Context, op string, s *redis.Script, args ...any) error {
	m := a.m
	if m.b.isClosed() {
		return svc.ErrBrokerClosed
	}
	all := append([]any{m.opts.Group, m.opts.ConsumerID, a.id}, args...)
	ok, err := s.Run(ctx, m.b.rdb, []string{m.key}, all...).Int()
	if err != nil {
		return m.b.wrap(op, err)
	}
	if ok == 0 {
		return errLost
	}
	return nil
}

func (a *acker) Ack(ctx context.Context) error { return a.run(ctx, "ack", ackScript) }

func (a *acker) Nack(ctx context.Context, delay time.Duration) error {
	idle := max(a.m.opts.AckWait-delay, 0)
	return a.run(ctx, "nack", touchScript, idle.Milliseconds())
}

func (a *acker) InProgress(ctx context.Context) error {
	return a.run(ctx, "in-progress", touchScript, 0)
}

// Broadcast publishes data on the subject's channel.
func (b *Broker) Broadcast(ctx context.Context, subject string, data []byte) error {
	if b.isClosed() {
		return svc.ErrBrokerClosed
	}
	if err := checkSubject(subject); err != nil {
		return err
	}
	return b.wrap("broadcast to "+subject, b.rdb.Publish(ctx, b.channelKey(subject), data).Err())
}

// SubscribeBroadcast subscribes a connection of its own to the subject's
// channel; it returns once the server has confirmed the subscription.
func (b *Broker) SubscribeBroadcast(ctx context.Context, subject string, h svc.BroadcastHandler) (svc.Subscription, error) {
	if h == nil {
		return nil, flow.Refused("redisbroker", "SubscribeBroadcast needs a handler")
	}
	if err := checkSubject(subject); err != nil {
		return nil, err
	}
	if b.isClosed() {
		return nil, svc.ErrBrokerClosed
	}
	ps := b.rdb.Subscribe(ctx, b.channelKey(subject))
	if _, err := ps.Receive(ctx); err != nil { // the confirmation
		_ = ps.Close()
		return nil, b.wrap("subscribe to "+subject, err)
	}
	fs := flow.New(1, nil)
	s := &subscription{fs: fs}
	s.before = func() { _ = ps.Close() } // ends the blocked receive
	s.cleanup = func() { b.untrack(s) }
	if err := b.track(s); err != nil {
		_ = ps.Close()
		return nil, err
	}
	fs.Loop(func(ctx context.Context) {
		for {
			msg, err := ps.Receive(ctx)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				if errors.Is(err, redis.ErrClosed) {
					return
				}
				// go-redis reconnects and resubscribes on the next Receive;
				// what was published meanwhile is lost, as broadcasts may be.
				select {
				case <-ctx.Done():
					return
				case <-time.After(100 * time.Millisecond):
				}
				continue
			}
			if m, ok := msg.(*redis.Message); ok {
				func() {
					defer b.panics.Recover(subject)
					h(ctx, subject, []byte(m.Payload))
				}()
			}
		}
	})
	return s, nil
}

type subscription struct {
	fs      *flow.Sub
	before  func()
	cleanup func()
	b1, b2  sync.Once
}

func (s *subscription) Stop() error { return s.end(s.fs.Stop) }

func (s *subscription) Drain(ctx context.Context) error {
	return s.end(func() error { return s.fs.Drain(ctx) })
}

func (s *subscription) end(finish func() error) error {
	if s.before != nil {
		s.b1.Do(s.before)
	}
	err := finish()
	s.b2.Do(s.cleanup)
	return err
}

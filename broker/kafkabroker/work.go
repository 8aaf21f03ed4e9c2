package kafkabroker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/broker/internal/flow"
	"github.com/svc-dev/svc/fleetwire"
)

// Errors of a delivery settled too late.
var (
	errExpired = svc.PermanentBrokerError("kafkabroker", "", errors.New("ack deadline passed: the message was redelivered"))
	errMoved   = svc.PermanentBrokerError("kafkabroker", "", errors.New("the message's partition moved to another member, which reads it again"))
)

type entry struct {
	rec       *kgo.Record
	id        string
	prior     int // deliveries before this record was read
	delivered bool
	flow.Settlement
}

// wsub is one member of a work subject's consumer group.
type wsub struct {
	b       *Broker
	subject string
	topic   string
	opts    svc.SubscribeOptions
	h       svc.Handler
	cl      *kgo.Client
	fs      *flow.Sub
	log     *zap.Logger

	mu        sync.Mutex
	parts     map[int32][]*entry // read, not yet committed past, by offset
	committed map[int32]int64
	meta      map[int32]string        // the metadata last committed
	earlier   map[int32]map[int64]int // deliveries of records read before this member got the partition (commit metadata)
	closing   bool

	commitMu sync.Mutex

	synced   chan struct{} // closed after the first join
	syncOnce sync.Once
}

// Subscribe joins the subject's consumer group.
func (b *Broker) Subscribe(ctx context.Context, subject string, opts svc.SubscribeOptions, h svc.Handler) (svc.Subscription, error) {
	if b.subs.Closed() {
		return nil, svc.ErrBrokerClosed
	}
	if err := checkSubject(subject); err != nil {
		return nil, err
	}
	opts = opts.WithDefaults(subject)
	s := &wsub{
		b: b, subject: subject, topic: b.workTopic(subject), opts: opts, h: h,
		parts: map[int32][]*entry{}, committed: map[int32]int64{}, meta: map[int32]string{}, earlier: map[int32]map[int64]int{},
		log: b.log.With(zap.String("subject", subject), zap.String("consumer", opts.ConsumerID)),
	}
	if err := b.ensureTopic(ctx, s.topic, b.o.Partitions); err != nil {
		return nil, err
	}
	kopts := append([]kgo.Opt{
		kgo.SeedBrokers(b.seeds...),
		kgo.ClientID(b.o.Name + "-" + opts.ConsumerID),
		kgo.ConsumerGroup(b.groupName(subject, opts.Group)),
		kgo.ConsumeTopics(s.topic),
		kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxPartitionBytes(maxMessageBytes),
		kgo.FetchMaxWait(500 * time.Millisecond),
		kgo.HeartbeatInterval(300 * time.Millisecond),
		kgo.SessionTimeout(10 * time.Second),
		kgo.OnPartitionsAssigned(s.assigned),
		kgo.OnPartitionsRevoked(s.revoked),
		kgo.OnPartitionsLost(s.lost),
		kgo.ProducerBatchMaxBytes(maxMessageBytes),
	}, b.o.ExtraOpts...)
	s.synced = make(chan struct{})
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		return nil, b.wrap("subscribe to "+s.topic, err)
	}
	s.cl = cl
	s.fs = flow.New(opts.Prefetch, s.finish)
	s.fs.Panics, s.fs.Subject = &b.panics, subject
	if err := b.subs.Track(s); err != nil {
		cl.Close()
		return nil, err
	}
	s.fs.Loop(s.poll)
	s.fs.Loop(s.reap)
	if err := s.awaitLive(ctx); err != nil {
		_ = s.Stop()
		return nil, b.wrap("join the group of "+s.topic, err)
	}
	return s, nil
}

// assigned runs after each join of the group, before the new partitions
// are read: it reads the delivery counts their last owner left in the
// commit metadata, and the first one tells awaitLive the member is in.
func (s *wsub) assigned(ctx context.Context, cl *kgo.Client, got map[string][]int32) {
	defer s.syncOnce.Do(func() { close(s.synced) })
	if len(got[s.topic]) == 0 {
		return
	}
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	offs, err := kadm.NewClient(cl).FetchOffsets(fctx, s.b.groupName(s.subject, s.opts.Group))
	if err == nil {
		err = offs.Error()
	}
	if err != nil {
		s.log.Warn("read the delivery counts of the partitions assigned; records a crashed member held count from their header", zap.Error(err))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range got[s.topic] {
		o, ok := offs.Lookup(s.topic, p)
		if !ok {
			continue
		}
		if n := decodeDeliveries(o.Metadata, o.At); len(n) > 0 {
			s.earlier[p] = n
		}
	}
}

// awaitLive returns once the member has joined the group and got its
// assignment. Until then the members already in keep reading every
// partition they had, so a Subscribe that returned at once let them take
// all the work published just after it. With the cooperative protocol the
// join is the first of two rounds: the partitions that move to the new
// member are taken from their old owners in it and handed over in the
// second, which may wait up to RevokeWait on their handlers; Subscribe does
// not wait for that round, as the moved partitions are read by nobody else
// meanwhile. It waits at most joinWait (a member not in by then still joins
// later) and fails only when ctx ends first.
func (s *wsub) awaitLive(ctx context.Context) error {
	wait := time.NewTimer(joinWait)
	defer wait.Stop()
	select {
	case <-s.synced:
	case <-ctx.Done():
		return ctx.Err()
	case <-wait.C:
		s.log.Warn("subscribed before joining the group", zap.Duration("waited", joinWait))
	}
	return nil
}

// joinWait bounds how long Subscribe waits to join the group.
const joinWait = 30 * time.Second

func (s *wsub) Stop() error                     { return s.fs.Stop() }
func (s *wsub) Drain(ctx context.Context) error { return s.fs.Drain(ctx) }

// poll reads at most as many records as there are free handler slots.
func (s *wsub) poll(ctx context.Context) {
	for {
		if !s.fs.Acquire() {
			return
		}
		n := 1
		for s.fs.TryAcquire() {
			n++
		}
		fetches := s.cl.PollRecords(ctx, n)
		recs := fetches.Records()
		failed := false
		fetches.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.Canceled) && !errors.Is(err, kgo.ErrClientClosed) {
				failed = true
				s.log.Warn("fetch", zap.String("topic", t), zap.Int32("partition", p), zap.Error(err))
			}
		})
		for range n - len(recs) {
			s.fs.Release()
		}
		es := make([]*entry, len(recs))
		fns := make([]func(context.Context), len(recs))
		for i, r := range recs {
			es[i], fns[i] = s.dispatch(r)
		}
		if len(recs) > 0 {
			// The deliveries are committed (as metadata) before the
			// handlers start, so a crash in them counts.
			if err := s.commit(); err != nil {
				s.log.Warn("commit the delivery counts", zap.Error(err))
			}
		}
		for i, fn := range fns {
			if !s.fs.Go(fn) {
				s.mu.Lock()
				es[i].delivered = false
				s.mu.Unlock()
			}
		}
		if ctx.Err() != nil {
			return
		}
		if failed && len(recs) == 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
}

func header(r *kgo.Record, key string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

// dispatch records one record read, holding a slot, and returns what hands
// it to the handler or the dead letter.
func (s *wsub) dispatch(r *kgo.Record) (*entry, func(ctx context.Context)) {
	e := &entry{rec: r}
	if id, ok := header(r, hdrID); ok {
		e.id = id
	} else {
		e.id = fmt.Sprintf("%d-%d", r.Partition, r.Offset)
	}
	if a, ok := header(r, hdrAttempt); ok {
		e.prior, _ = strconv.Atoi(a)
	}
	s.mu.Lock()
	// A member that crashed holding this record committed its delivery.
	e.prior = max(e.prior, s.earlier[r.Partition][r.Offset])
	attempt := e.prior + 1
	dead := s.opts.MaxDeliver > 0 && attempt > s.opts.MaxDeliver
	s.parts[r.Partition] = append(s.parts[r.Partition], e)
	e.delivered = !dead // a dead letter is not a delivery
	e.Start(time.Now().Add(s.opts.AckWait))
	s.mu.Unlock()
	var fn func(ctx context.Context)
	if dead {
		fn = func(ctx context.Context) { s.deadLetter(ctx, e) }
	} else {
		d := &svc.Delivery{Subject: s.subject, Data: r.Value, Attempt: attempt, ID: e.id, AckWait: s.opts.AckWait, Acker: &flow.Acker{
			Mu: &s.mu, S: &e.Settlement, AckWait: s.opts.AckWait, Lost: errMoved, Expired: errExpired,
			OnAck: func(context.Context) error {
				s.mu.Lock()
				e.State = flow.Done
				s.mu.Unlock()
				return s.commit()
			},
			OnNack: func(context.Context) error { s.redeliver([]*entry{e}); return nil },
		}}
		fn = func(ctx context.Context) { s.h(ctx, d) }
	}
	return e, fn
}

func (s *wsub) deadLetter(ctx context.Context, e *entry) {
	dl := svc.DeadLetter{
		Subject: s.subject, Data: e.rec.Value, Deliveries: e.prior, At: time.Now().UTC(),
		Reason: fmt.Sprintf("delivered %d times without being acknowledged (max_deliver %d)", e.prior, s.opts.MaxDeliver),
	}
	raw, _ := json.Marshal(dl)
	if err := s.b.Publish(ctx, fleetwire.DeadLetterSubject(s.subject), raw); err != nil {
		s.log.Warn("dead letter", zap.Error(err))
		return // left stHandling: its deadline re-appends it, and it comes back here
	}
	if s.opts.OnDeadLetter != nil {
		s.opts.OnDeadLetter(ctx, dl)
	}
	s.mu.Lock()
	e.State = flow.Done
	s.mu.Unlock()
	_ = s.commit()
}

// reap re-appends records whose ack deadline passed or whose nack delay
// ended.
func (s *wsub) reap(ctx context.Context) {
	t := time.NewTicker(flow.ReapEvery(s.opts.AckWait))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		var due []*entry
		s.mu.Lock()
		for _, es := range s.parts {
			for _, e := range es {
				if e.Due(now) {
					due = append(due, e)
				}
			}
		}
		s.mu.Unlock()
		if len(due) > 0 {
			s.redeliver(due)
		}
	}
}

// redeliver re-appends entries (already stRedelivering) and commits past
// them; one that fails to append goes back to its deadline.
func (s *wsub) redeliver(es []*entry) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, e := range es {
		prior := e.prior
		if e.delivered {
			prior++
		}
		err := s.b.append(ctx, s.topic, e.rec.Value, e.id, prior)
		s.mu.Lock()
		if err != nil {
			s.log.Warn("redeliver", zap.Error(err))
			e.Start(time.Now().Add(s.opts.AckWait))
		} else {
			e.State = flow.Done
		}
		s.mu.Unlock()
	}
	_ = s.commit()
}

// commit commits each partition up to its first record not done, with the
// deliveries of the records after it still in flight as metadata (see
// encodeDeliveries); a partition is committed when its offset advanced or
// its deliveries changed.
func (s *wsub) commit() error {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	offsets := map[int32]kgo.EpochOffset{}
	metas := map[int32]string{}
	s.mu.Lock()
	for p, es := range s.parts {
		i := 0
		var next int64 = -1
		var epoch int32 = -1
		for i < len(es) && es[i].State == flow.Done {
			next, epoch = es[i].rec.Offset+1, es[i].rec.LeaderEpoch
			i++
		}
		s.parts[p] = es[i:]
		if i < len(es) {
			next, epoch = es[i].rec.Offset, es[i].rec.LeaderEpoch
		}
		meta := encodeDeliveries(es[i:])
		if next > s.committed[p] || (next >= 0 && next == s.committed[p] && meta != s.meta[p]) {
			offsets[p] = kgo.EpochOffset{Epoch: epoch, Offset: next}
			metas[p] = meta
		}
	}
	s.mu.Unlock()
	if len(offsets) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = kgo.PreCommitFnContext(ctx, func(req *kmsg.OffsetCommitRequest) error {
		for i := range req.Topics {
			if req.Topics[i].Topic != s.topic {
				continue
			}
			for j := range req.Topics[i].Partitions {
				m := metas[req.Topics[i].Partitions[j].Partition]
				req.Topics[i].Partitions[j].Metadata = &m
			}
		}
		return nil
	})
	var cerr error
	s.cl.CommitOffsetsSync(ctx, map[string]map[int32]kgo.EpochOffset{s.topic: offsets},
		func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			if err != nil {
				cerr = err
				return
			}
			for _, t := range resp.Topics {
				for _, p := range t.Partitions {
					if e := kerr.ErrorForCode(p.ErrorCode); e != nil {
						cerr = errors.Join(cerr, e)
					}
				}
			}
		})
	if cerr != nil {
		return s.b.wrap("commit "+s.topic, cerr)
	}
	s.mu.Lock()
	for p, o := range offsets {
		if o.Offset >= s.committed[p] {
			s.committed[p] = o.Offset
			s.meta[p] = metas[p]
		}
	}
	s.mu.Unlock()
	return nil
}

// Commit metadata: "svc-deliveries offset:attempt ..." for each record of
// the partition handed to a handler and not yet settled, its attempt
// included. The member that gets the partition after a crash reads it
// (assigned) and counts those deliveries. Kafka caps metadata
// (offset.metadata.max.bytes, 4096 by default): records past the cap are
// left out and count from their header alone.
const (
	metaPrefix = "svc-deliveries"
	metaMax    = 4000
)

func encodeDeliveries(es []*entry) string {
	b := []byte(metaPrefix)
	for _, e := range es {
		if !e.delivered || e.State == flow.Done {
			continue
		}
		item := fmt.Appendf(nil, " %d:%d", e.rec.Offset, e.prior+1)
		if len(b)+len(item) > metaMax {
			break
		}
		b = append(b, item...)
	}
	if len(b) == len(metaPrefix) {
		return ""
	}
	return string(b)
}

// decodeDeliveries reads encodeDeliveries' metadata, keeping the records at
// or after the committed offset from.
func decodeDeliveries(meta string, from int64) map[int64]int {
	rest, ok := strings.CutPrefix(meta, metaPrefix)
	if !ok {
		return nil
	}
	out := map[int64]int{}
	for _, item := range strings.Fields(rest) {
		o, a, ok := strings.Cut(item, ":")
		if !ok {
			continue
		}
		off, err1 := strconv.ParseInt(o, 10, 64)
		n, err2 := strconv.Atoi(a)
		if err1 == nil && err2 == nil && off >= from && n > 0 {
			out[off] = n
		}
	}
	return out
}

// revoked runs in a rebalance that takes partitions away: it waits a while
// for their records to settle, so that their new owner does not read again
// what this member finished, and commits.
func (s *wsub) revoked(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	deadline := time.Now().Add(s.b.o.RevokeWait)
	for {
		s.mu.Lock()
		busy := false
		for _, p := range lost[s.topic] {
			for _, e := range s.parts[p] {
				if e.State != flow.Done {
					busy = true
				}
			}
		}
		closing := s.closing
		s.mu.Unlock()
		if !busy || closing || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := s.commit(); err != nil {
		s.log.Warn("commit on revoke", zap.Error(err))
	}
	s.lost(context.Background(), nil, lost)
}

// lost forgets partitions this member no longer owns.
func (s *wsub) lost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range lost[s.topic] {
		for _, e := range s.parts[p] {
			e.Lost = true
		}
		delete(s.parts, p)
		delete(s.committed, p)
		delete(s.meta, p)
		delete(s.earlier, p)
	}
}

// finish runs once the loops and handlers have stopped: it re-appends what
// was not settled, commits, and leaves the group.
func (s *wsub) finish() {
	var rest []*entry
	s.mu.Lock()
	for _, es := range s.parts {
		for _, e := range es {
			if e.State != flow.Done && !e.Lost {
				e.State = flow.Settling
				rest = append(rest, e)
			}
		}
	}
	s.mu.Unlock()
	if len(rest) > 0 {
		s.redeliver(rest)
	} else if err := s.commit(); err != nil {
		s.log.Warn("final commit", zap.Error(err))
	}
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	s.cl.Close()
	s.b.subs.Untrack(s)
}

// Package kafkabroker is the svc.Broker on Apache Kafka (or any server that
// speaks its protocol), through franz-go.
//
// Layout on the cluster (prefix "svc-" by default; topic names are the
// subject with every character Kafka refuses replaced by '_'):
//
//   - a work subject is the topic {prefix}q.{subject} with
//     Options.Partitions partitions (created on first use, records spread
//     round-robin); its consumer group is {prefix}{subject}.{group}, so
//     each agent's tasks have one group shared by the fleet, and a member
//     that joins with no committed offset starts from the beginning: a
//     message published before any member subscribes waits for one.
//   - a member polls at most as many records as it has free handler slots
//     and commits a partition's offset only up to the first record it has
//     not finished with: a task is committed after its handler acked it
//     (after the result was sent). A member that dies leaves its records
//     uncommitted; the group gives its partitions to another member, which
//     reads them again.
//   - Kafka has no per-message acknowledgement, so Nack, an ack deadline
//     that passes and a Stop with deliveries unsettled all redeliver by
//     re-appending the record to the same topic with its attempt count
//     raised (header svc-attempt) and its id kept (header svc-id), and then
//     committing past the original. A record read with more than
//     MaxDeliver earlier deliveries goes to the dead letter instead. The
//     deadline is kept by the member (InProgress moves it), not by Kafka.
//   - a broadcast subject is the one-partition topic {prefix}b.{subject};
//     each subscriber reads it directly (no group) from the end offset it
//     looked up when it subscribed.
//
// Delivery counts survive a crash: before a member hands records to its
// handlers it commits, with the partition's offset (unchanged), metadata
// listing the records in flight and their attempt ("svc-deliveries
// offset:attempt ..."); the member that gets the partition next reads it
// and counts those deliveries, so MaxDeliver holds against a task that
// kills every worker it runs on. A partition moved away while one of its
// records was still in a handler after Options.RevokeWait is read again
// by its new owner, counted the same way.
package kafkabroker

import (
	"context"
	"errors"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/broker/internal/flow"
)

// Options configure a client.
type Options struct {
	// Prefix starts every topic and group name; default "svc-".
	Prefix string
	// Name is the Kafka client id; default "svc".
	Name string
	// Logger receives failures of the background loops; nil is silent.
	Logger *zap.Logger
	// Partitions is how many partitions a work topic is created with, the
	// most members of one group that get work; default 8 (URL query
	// ?partitions=N).
	Partitions int32
	// RevokeWait bounds how long a member that loses a partition in a
	// rebalance waits for the handlers of that partition's records to
	// settle before it lets go; default 10s.
	RevokeWait time.Duration
	// ExtraOpts are added to every franz-go client (TLS, SASL).
	ExtraOpts []kgo.Opt
}

// Header names.
const (
	hdrID      = "svc-id"
	hdrAttempt = "svc-attempt" // deliveries before this record
)

// maxMessageBytes is the topics' max.message.bytes: a full payload with its
// headers and batch framing.
const maxMessageBytes = svc.MaxPayloadBytes + 1<<20

// Broker is one producing client plus a consuming client per subscription.
type Broker struct {
	panics flow.Panics
	seeds  []string
	o      Options
	log    *zap.Logger
	cl     *kgo.Client
	adm    *kadm.Client

	topicsMu sync.Mutex
	topics   map[string]bool // topics known to exist

	subs flow.Registry[stopper]
}

type stopper interface{ Stop() error }

var _ svc.Broker = (*Broker)(nil)

// Connect opens a client for rawURL (kafka://host:port[,host:port...]
// [?partitions=N]) and checks the cluster answers.
func Connect(ctx context.Context, rawURL string, o Options) (*Broker, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, svc.PermanentBrokerError("kafkabroker", "", err)
	}
	if u.Scheme != "kafka" || u.Host == "" {
		return nil, flow.Refused("kafkabroker", "%q: want kafka://host:port[,host:port...]", u.Redacted())
	}
	if p := u.Query().Get("partitions"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 {
			return nil, flow.Refused("kafkabroker", "partitions=%q: want a positive integer", p)
		}
		o.Partitions = int32(n)
	}
	if o.Prefix == "" {
		o.Prefix = "svc-"
	}
	if o.Name == "" {
		o.Name = "svc"
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Partitions <= 0 {
		o.Partitions = 8
	}
	if o.RevokeWait <= 0 {
		o.RevokeWait = 10 * time.Second
	}
	seeds := strings.Split(u.Host, ",")
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(seeds...),
		kgo.ClientID(o.Name),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
		kgo.ProducerBatchMaxBytes(maxMessageBytes),
		kgo.ProducerLinger(0),
	}, o.ExtraOpts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, svc.PermanentBrokerError("kafkabroker", "", err)
	}
	if err := cl.Ping(ctx); err != nil {
		cl.Close()
		return nil, flow.Wrap("kafkabroker", "connect to "+u.Host, err, permanent)
	}
	b := &Broker{
		seeds: seeds, o: o, cl: cl, adm: kadm.NewClient(cl),
		log:    o.Logger.With(zap.String("broker", "kafka")),
		topics: map[string]bool{},
	}
	b.panics.Log = b.log
	return b, nil
}

// HandlerPanics is how many panics of its handlers this client recovered
// (each logged with its stack, its delivery abandoned).
func (b *Broker) HandlerPanics() int64 { return b.panics.Count() }

// Scheme is "kafka".
func (b *Broker) Scheme() string { return "kafka" }

// Client is the producing client.
func (b *Broker) Client() *kgo.Client { return b.cl }

// Ping asks the cluster for its brokers.
func (b *Broker) Ping(ctx context.Context) error {
	if b.subs.Closed() {
		return svc.ErrBrokerClosed
	}
	return b.wrap("ping", b.cl.Ping(ctx))
}

// Close stops every subscription and closes the producing client.
func (b *Broker) Close() error {
	subs, first := b.subs.Close()
	if !first {
		return nil
	}
	var errs []error
	for _, s := range subs {
		errs = append(errs, s.Stop())
	}
	if err := b.cl.Flush(context.Background()); err != nil {
		errs = append(errs, err)
	}
	b.cl.Close()
	return errors.Join(errs...)
}

func (b *Broker) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	if b.subs.Closed() || errors.Is(err, kgo.ErrClientClosed) {
		return flow.Wrap("kafkabroker", op, svc.ErrBrokerClosed, nil)
	}
	return flow.Wrap("kafkabroker", op, err, permanent)
}

// permanent is a Kafka error code the cluster gives again (too large a
// message, a bad topic, no authorization); retriable codes (a leader
// moving, a timeout) and a lost connection are transient.
func permanent(err error) bool {
	var ke *kerr.Error
	return errors.As(err, &ke) && !ke.Retriable
}

// topicName maps a subject to a legal topic name.
func (b *Broker) topicName(kind, subject string) string {
	name := []byte(b.o.Prefix + kind + "." + subject)
	for i, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			name[i] = '_'
		}
	}
	if len(name) > 249 {
		return string(name[:200]) + "-" + hashHex(string(name))
	}
	return string(name)
}

func hashHex(s string) string {
	// FNV-1a: a stable short suffix for over-long names.
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return strconv.FormatUint(h, 16)
}

func (b *Broker) workTopic(subject string) string  { return b.topicName("q", subject) }
func (b *Broker) bcastTopic(subject string) string { return b.topicName("b", subject) }

func (b *Broker) groupName(subject, group string) string {
	return b.topicName("g", subject+"."+group)
}

// ensureTopic creates topic unless this client knows it exists.
func (b *Broker) ensureTopic(ctx context.Context, topic string, partitions int32) error {
	b.topicsMu.Lock()
	known := b.topics[topic]
	b.topicsMu.Unlock()
	if known {
		return nil
	}
	maxBytes := strconv.Itoa(maxMessageBytes)
	_, err := b.adm.CreateTopic(ctx, partitions, -1, map[string]*string{"max.message.bytes": &maxBytes}, topic)
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return b.wrap("create topic "+topic, err)
	}
	b.topicsMu.Lock()
	b.topics[topic] = true
	b.topicsMu.Unlock()
	return nil
}

func checkSubject(subject string) error { return flow.CheckSubject("kafkabroker", subject) }

func checkSize(n int) error { return flow.CheckSize("kafkabroker", n) }

func newID() string { return flow.NewID() }

// Publish appends data to the subject's topic and waits for the cluster's
// acknowledgement.
func (b *Broker) Publish(ctx context.Context, subject string, data []byte) error {
	if b.subs.Closed() {
		return svc.ErrBrokerClosed
	}
	if err := checkSubject(subject); err != nil {
		return err
	}
	if err := checkSize(len(data)); err != nil {
		return err
	}
	topic := b.workTopic(subject)
	if err := b.ensureTopic(ctx, topic, b.o.Partitions); err != nil {
		return err
	}
	return b.append(ctx, topic, data, newID(), 0)
}

// append produces one work record and waits for its ack.
func (b *Broker) append(ctx context.Context, topic string, data []byte, id string, prior int) error {
	r := &kgo.Record{Topic: topic, Value: data, Headers: []kgo.RecordHeader{
		{Key: hdrID, Value: []byte(id)},
		{Key: hdrAttempt, Value: []byte(strconv.Itoa(prior))},
	}}
	return b.wrap("publish to "+topic, b.cl.ProduceSync(ctx, r).FirstErr())
}

// Broadcast appends data to the subject's broadcast topic.
func (b *Broker) Broadcast(ctx context.Context, subject string, data []byte) error {
	if b.subs.Closed() {
		return svc.ErrBrokerClosed
	}
	if err := checkSubject(subject); err != nil {
		return err
	}
	if err := checkSize(len(data)); err != nil {
		return err
	}
	topic := b.bcastTopic(subject)
	if err := b.ensureTopic(ctx, topic, 1); err != nil {
		return err
	}
	return b.wrap("broadcast to "+topic, b.cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: data}).FirstErr())
}

// SubscribeBroadcast reads the subject's broadcast topic from its current
// end.
func (b *Broker) SubscribeBroadcast(ctx context.Context, subject string, h svc.BroadcastHandler) (svc.Subscription, error) {
	if b.subs.Closed() {
		return nil, svc.ErrBrokerClosed
	}
	if err := checkSubject(subject); err != nil {
		return nil, err
	}
	topic := b.bcastTopic(subject)
	if err := b.ensureTopic(ctx, topic, 1); err != nil {
		return nil, err
	}
	ends, err := b.adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, b.wrap("list end offsets of "+topic, err)
	}
	end, ok := ends.Lookup(topic, 0)
	if !ok || end.Err != nil {
		return nil, b.wrap("list end offset of "+topic, errors.Join(errors.New("no offset"), end.Err))
	}
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(b.seeds...),
		kgo.ClientID(b.o.Name),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().At(end.Offset)}}),
		kgo.FetchMaxPartitionBytes(maxMessageBytes),
		kgo.FetchMaxWait(500 * time.Millisecond),
	}, b.o.ExtraOpts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, b.wrap("subscribe to "+topic, err)
	}
	s := &bsub{panics: &b.panics, cl: cl, done: make(chan struct{})}
	var lctx context.Context
	lctx, s.cancel = context.WithCancel(context.Background())
	if err := b.subs.Track(s); err != nil {
		s.cancel()
		cl.Close()
		return nil, err
	}
	s.untrack = func() { b.subs.Untrack(s) }
	go s.run(lctx, subject, h, b.log)
	return s, nil
}

// bsub is one broadcast subscription.
type bsub struct {
	panics  *flow.Panics
	cl      *kgo.Client
	cancel  context.CancelFunc
	done    chan struct{}
	once    sync.Once
	untrack func()
}

func (s *bsub) run(ctx context.Context, subject string, h svc.BroadcastHandler, log *zap.Logger) {
	defer close(s.done)
	for ctx.Err() == nil {
		fs := s.cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return
		}
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.Canceled) {
				log.Warn("broadcast fetch", zap.String("topic", t), zap.Error(err))
			}
		})
		fs.EachRecord(func(r *kgo.Record) {
			if ctx.Err() != nil {
				return
			}
			func() {
				defer s.panics.Recover(subject)
				h(ctx, subject, r.Value)
			}()
		})
	}
}

func (s *bsub) Stop() error {
	s.once.Do(func() {
		s.cancel()
		<-s.done
		s.cl.Close()
		s.untrack()
	})
	return nil
}

func (s *bsub) Drain(context.Context) error { return s.Stop() }

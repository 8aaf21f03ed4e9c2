package redisbroker_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/broker/brokertest"
	"github.com/svc-dev/svc/broker/redisbroker"
	"github.com/svc-dev/svc/fleetwire"
	"github.com/svc-dev/svc/internal/servertest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func startRedis(t *testing.T) string { return servertest.Redis(t) }

func connect(t *testing.T, url string, o redisbroker.Options) *redisbroker.Broker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := redisbroker.Connect(ctx, url, o)
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	return b
}

func TestContract(t *testing.T) {
	url := startRedis(t)
	brokertest.Run(t, func(t *testing.T) svc.Broker { return connect(t, url, redisbroker.Options{}) })
}

func TestConnectErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := redisbroker.Connect(ctx, "redis://127.0.0.1:1", redisbroker.Options{}); err == nil {
		t.Error("Connect to a closed port succeeded")
	}
	if _, err := redisbroker.Connect(ctx, "http://x", redisbroker.Options{}); err == nil {
		t.Error("Connect to a non-redis URL succeeded")
	}
}

// TestStableConsumerID: a worker restarted under the same consumer id takes
// back the entries it held when it died, and a stopped member that holds
// nothing leaves no consumer behind.
func TestStableConsumerID(t *testing.T) {
	url := startRedis(t)
	ctx := context.Background()
	subj := fleetwire.TaskSubject("stable")
	opts := svc.SubscribeOptions{Group: "g", ConsumerID: "worker-1", AckWait: 300 * time.Millisecond}

	first := connect(t, url, redisbroker.Options{})
	held := make(chan struct{})
	var once atomic.Bool
	if _, err := first.Subscribe(ctx, subj, opts, func(ctx context.Context, d *svc.Delivery) {
		if once.CompareAndSwap(false, true) {
			close(held)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := first.Publish(ctx, subj, []byte("mine")); err != nil {
		t.Fatal(err)
	}
	<-held
	_ = first.Close()

	raw := redis.NewClient(&redis.Options{Addr: url[len("redis://"):]})
	defer raw.Close()
	consumers, err := raw.XInfoConsumers(ctx, "svc:q:"+subj, "g").Result()
	if err != nil || len(consumers) != 1 || consumers[0].Name != "worker-1" || consumers[0].Pending != 1 {
		t.Fatalf("after the crash: consumers %+v, %v; want worker-1 holding 1", consumers, err)
	}

	again := connect(t, url, redisbroker.Options{})
	defer again.Close()
	got := make(chan *svc.Delivery, 1)
	sub, err := again.Subscribe(ctx, subj, opts, func(ctx context.Context, d *svc.Delivery) {
		_ = d.Ack(ctx)
		got <- d
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-got:
		if string(d.Data) != "mine" || d.Attempt != 2 {
			t.Errorf("got %q attempt %d, want mine attempt 2", d.Data, d.Attempt)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the restarted worker never got its entry back")
	}
	_ = sub.Stop()
	consumers, err = raw.XInfoConsumers(ctx, "svc:q:"+subj, "g").Result()
	if err != nil || len(consumers) != 0 {
		t.Errorf("after a clean stop: consumers %+v, %v; want none", consumers, err)
	}
	if n, _ := raw.XLen(ctx, "svc:q:"+subj).Result(); n != 0 {
		t.Errorf("acked entries stay in the stream: XLEN %d", n)
	}
}

func TestPrefix(t *testing.T) {
	url := startRedis(t)
	ctx := context.Background()
	b := connect(t, url, redisbroker.Options{Prefix: "other:"})
	defer b.Close()
	if err := b.Publish(ctx, fleetwire.TaskSubject("p"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	raw := redis.NewClient(&redis.Options{Addr: url[len("redis://"):]})
	defer raw.Close()
	if n, _ := raw.XLen(ctx, "other:q:svc.tasks.p").Result(); n != 1 {
		t.Errorf("XLEN other:q:svc.tasks.p = %d, want 1", n)
	}
}

// TestInboxExpiry: a publisher's inbox expires when unused, and a member whose
// stream went away recreates its group and keeps receiving.
func TestInboxExpiry(t *testing.T) {
	url := startRedis(t)
	ctx := context.Background()
	b := connect(t, url, redisbroker.Options{})
	defer b.Close()
	subj := fleetwire.ResultSubject("rt-expiry")
	got := make(chan string, 4)
	sub, err := b.Subscribe(ctx, subj, svc.SubscribeOptions{}, func(ctx context.Context, d *svc.Delivery) {
		got <- string(d.Data)
		_ = d.Ack(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Stop()
	if err := b.Publish(ctx, subj, []byte("one")); err != nil {
		t.Fatal(err)
	}
	if m := <-got; m != "one" {
		t.Fatalf("got %q", m)
	}
	raw := redis.NewClient(&redis.Options{Addr: url[len("redis://"):]})
	defer raw.Close()
	key := "svc:q:" + subj
	if ttl, _ := raw.TTL(ctx, key).Result(); ttl <= 0 || ttl > 24*time.Hour {
		t.Errorf("inbox TTL = %v, want up to a day", ttl)
	}
	if ttl, _ := raw.TTL(ctx, "svc:q:"+fleetwire.TaskSubject("x")).Result(); ttl > 0 {
		t.Errorf("a task stream has a TTL %v", ttl)
	}
	if err := raw.Del(ctx, key).Err(); err != nil { // as when it expires
		t.Fatal(err)
	}
	time.Sleep(700 * time.Millisecond) // the member's read fails with NOGROUP and recreates
	if err := b.Publish(ctx, subj, []byte("two")); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		if m != "two" {
			t.Errorf("got %q", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the member stopped receiving after its stream went away")
	}
}

// TestPruneIdleConsumers: members of crashed processes that hold nothing are
// removed from the group by the live members after ConsumerTTL.
func TestPruneIdleConsumers(t *testing.T) {
	url := startRedis(t)
	ctx := context.Background()
	subj := fleetwire.TaskSubject("prune")
	raw := redis.NewClient(&redis.Options{Addr: url[len("redis://"):]})
	defer raw.Close()
	key := "svc:q:" + subj
	if err := raw.XGroupCreateMkStream(ctx, key, "g", "0").Err(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"crashed-1", "crashed-2"} {
		if err := raw.XGroupCreateConsumer(ctx, key, "g", c).Err(); err != nil {
			t.Fatal(err)
		}
	}
	b := connect(t, url, redisbroker.Options{ConsumerTTL: 200 * time.Millisecond})
	defer b.Close()
	sub, err := b.Subscribe(ctx, subj, svc.SubscribeOptions{Group: "g", ConsumerID: "live"}, func(context.Context, *svc.Delivery) {})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Stop()
	deadline := time.Now().Add(10 * time.Second)
	for {
		cs, err := raw.XInfoConsumers(ctx, key, "g").Result()
		if err != nil {
			t.Fatal(err)
		}
		// (Redis creates "live" only when it first gets an entry; removing
		// a member that holds nothing loses nothing either way.)
		if len(cs) == 0 || len(cs) == 1 && cs[0].Name == "live" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("consumers still %+v", cs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

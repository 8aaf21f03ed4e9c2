package kafkabroker_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"go.uber.org/goleak"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/broker/brokertest"
	"github.com/svc-dev/svc/broker/kafkabroker"
	"github.com/svc-dev/svc/fleetwire"
	"github.com/svc-dev/svc/internal/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// cluster starts an in-process kfake cluster and returns its kafka:// URL.
func cluster(t testing.TB, opts ...kfake.Opt) string {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return "kafka://" + c.ListenAddrs()[0]
}

func connect(t testing.TB, url string) *kafkabroker.Broker {
	t.Helper()
	return connectWith(t, url, kafkabroker.Options{})
}

func connectWith(t testing.TB, url string, o kafkabroker.Options) *kafkabroker.Broker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := kafkabroker.Connect(ctx, url, o)
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	return b
}

func TestContract(t *testing.T) {
	url := cluster(t)
	brokertest.Run(t, func(t *testing.T) svc.Broker { return connect(t, url) })
}

func TestConnectErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, u := range []string{"http://x", "kafka://", "kafka://127.0.0.1:1?partitions=0"} {
		if _, err := kafkabroker.Connect(ctx, u, kafkabroker.Options{}); err == nil {
			t.Errorf("Connect(%q) succeeded", u)
		}
	}
}

// TestRebalanceWaitsForInFlight: a member joining the group takes half the
// partitions, but not the tasks the first member is still running on them:
// the first member finishes and commits before it lets go, so no task runs
// twice.
func TestRebalanceWaitsForInFlight(t *testing.T) {
	url := cluster(t) + "?partitions=8"
	subj := fleetwire.TaskSubject("rebalance")
	pub := connect(t, url)
	defer pub.Close()
	var mu sync.Mutex
	seen := map[string][]string{}
	running := make(chan struct{}, 8)
	release := make(chan struct{})
	handler := func(member string) svc.Handler {
		return func(ctx context.Context, d *svc.Delivery) {
			mu.Lock()
			seen[string(d.Data)] = append(seen[string(d.Data)], member)
			mu.Unlock()
			if member == "a" {
				running <- struct{}{}
				<-release
			}
			_ = d.Ack(ctx)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts := svc.SubscribeOptions{Group: "g", Prefetch: 8, AckWait: 30 * time.Second}
	a := connect(t, url)
	defer a.Close()
	opts.ConsumerID = "a"
	if _, err := a.Subscribe(ctx, subj, opts, handler("a")); err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		if err := pub.Publish(ctx, subj, fmt.Appendf(nil, "m%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	for range 8 {
		select {
		case <-running:
		case <-ctx.Done():
			t.Fatal("member a never held all eight tasks")
		}
	}
	b := connect(t, url)
	defer b.Close()
	opts.ConsumerID = "b"
	if _, err := b.Subscribe(ctx, subj, opts, handler("b")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // b joins; the rebalance waits on a's handlers
	close(release)
	for i := 8; i < 16; i++ { // new work is shared again
		if err := pub.Publish(ctx, subj, fmt.Appendf(nil, "m%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, "all sixteen tasks", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == 16
	})
	time.Sleep(time.Second)
	mu.Lock()
	defer mu.Unlock()
	for m, members := range seen {
		if len(members) != 1 {
			t.Errorf("%s ran on %v; want once", m, members)
		}
	}
}

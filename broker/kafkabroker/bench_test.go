package kafkabroker_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/fleetwire"
)

// BenchmarkRoundTrip measures one task's trip through the Kafka broker on
// an in-process kfake cluster: publish, delivery to a member (prefetch 64,
// so a poll takes many records and commits their delivery counts once),
// ack. b.N messages are in flight at once: the figure is throughput.
func BenchmarkRoundTrip(b *testing.B) {
	url := cluster(b)
	ctx := context.Background()
	br := connect(b, url)
	defer br.Close()
	payload := make([]byte, 1024)
	subj := fleetwire.TaskSubject("bench")
	var done, want atomic.Int64
	all := make(chan struct{})
	sub, err := br.Subscribe(ctx, subj, svc.SubscribeOptions{Prefetch: 64}, func(ctx context.Context, d *svc.Delivery) {
		_ = d.Ack(ctx)
		if done.Add(1) == want.Load() {
			close(all)
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Stop()
	want.Store(int64(b.N))
	b.SetBytes(int64(len(payload)))
	b.ResetTimer()
	for range b.N {
		if err := br.Publish(ctx, subj, payload); err != nil {
			b.Fatal(err)
		}
	}
	<-all
}

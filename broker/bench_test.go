package broker_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/broker"
	"github.com/svc-dev/svc/fleetwire"
	"github.com/svc-dev/svc/internal/servertest"
)

// BenchmarkRoundTrip measures one task's trip through each broker: publish,
// delivery to a member (prefetch 64), ack. b.N messages are in flight at
// once, so the figure is throughput, not latency.
func BenchmarkRoundTrip(b *testing.B) {
	for _, c := range []struct {
		name string
		url  func(testing.TB) string
	}{
		{"memory", func(testing.TB) string { return "memory://" }},
		{"nats", servertest.NATS},
		{"redis", servertest.Redis},
	} {
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			br, err := broker.Open(ctx, c.url(b), broker.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer br.Close()
			payload := make([]byte, 1024)
			subj := fleetwire.TaskSubject(fmt.Sprintf("bench-%d", time.Now().UnixNano()))
			var done atomic.Int64
			all := make(chan struct{})
			var want atomic.Int64
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
		})
	}
}

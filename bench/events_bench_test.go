package bench

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/emitters"
	"github.com/svc-dev/svc/emitters/sse"
)

// emitLatencies times n emits of ev on e, one by one.
func emitLatencies(e svc.Emitter, ev svc.RuntimeEvent, n int) []time.Duration {
	lat := make([]time.Duration, n)
	for i := range lat {
		start := time.Now()
		e.Emit(ev)
		lat[i] = time.Since(start)
	}
	slices.Sort(lat)
	return lat
}

func pct(lat []time.Duration, p int) float64 {
	return float64(lat[(len(lat)-1)*p/100].Nanoseconds())
}

// BenchmarkEmitSSE is issue 5's emit cost: the chain svc serve runs (an
// async log queue, then the SSE emitter) with 0 and with 1,000 live
// subscribers that drain their feeds, against the same chain without the
// SSE emitter (baseline). Emit is what every runtime event costs the run
// that emits it, so its p99 matters as much as its median.
func BenchmarkEmitSSE(b *testing.B) {
	ev := svc.RuntimeEvent{EventType: svc.EventAgentCompleted, Timestamp: time.Now(), AgentName: "echo", TraceID: "t",
		Payload: svc.Payload{"duration_ms": 1.5, "tokens_used": 12, "backend": "local", "model": "test:echo"}}
	const n = 20_000
	for _, subs := range []int{0, 1000} {
		b.Run(map[int]string{0: "subscribers=0", 1000: "subscribers=1000"}[subs], func(b *testing.B) {
			live, err := sse.New(nil, sse.Config{})
			if err != nil {
				b.Fatal(err)
			}
			defer live.Close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			for range subs {
				s, err := live.Subscribe(ctx, svc.EventFilter{})
				if err != nil {
					b.Fatal(err)
				}
				go func() {
					for range s.Events() { //nolint:revive // drain
					}
				}()
			}
			base := emitters.NewAsync(svc.NopEmitter{}, 0)
			defer base.Close()
			chain := emitters.Multi(base, live)
			var withSSE, without []time.Duration
			b.ResetTimer()
			for range b.N {
				without = emitLatencies(base, ev, n)
				withSSE = emitLatencies(chain, ev, n)
			}
			b.StopTimer()
			b.ReportMetric(pct(withSSE, 50), "emit_p50_ns")
			b.ReportMetric(pct(withSSE, 99), "emit_p99_ns")
			b.ReportMetric(pct(without, 50), "baseline_p50_ns")
			b.ReportMetric(pct(without, 99), "baseline_p99_ns")
		})
	}
}

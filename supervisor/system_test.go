package supervisor_test

import (
	"context"
	"runtime"
	"testing"
	"weak"

	"github.com/asynkron/protoactor-go/actor"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/svc-dev/svc/internal/testutil"
	"github.com/svc-dev/svc/supervisor"
)

// A stopped actor is garbage, also in a system built with a MeterProvider
// (svc serve --metrics, OTLP metrics, an embedder's provider). Given one,
// protoactor registered a mailbox-length callback for every actor it spawned
// on the global OTel meter and never unregistered it, so every actor ever
// spawned (its context, mailbox and state) stayed reachable: the soak test
// saw the heap of svc serve --metrics grow by tens of KiB per request.
func TestActorSystemKeepsNoStoppedActor(t *testing.T) {
	mp := sdkmetric.NewMeterProvider()
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	sys := supervisor.NewActorSystem(nil, mp)
	t.Cleanup(sys.Shutdown)
	type probe struct{ _ [4 << 10]byte } // big enough not to share a tiny-alloc block
	var probes []weak.Pointer[probe]
	for range 20 {
		p := &probe{}
		probes = append(probes, weak.Make(p))
		pid := sys.Root.Spawn(actor.PropsFromFunc(func(actor.Context) { runtime.KeepAlive(p) }))
		if err := sys.Root.StopFuture(pid).Wait(); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, "the stopped actors to be collected", func() bool {
		runtime.GC()
		for _, w := range probes {
			if w.Value() != nil {
				return false
			}
		}
		return true
	})
}

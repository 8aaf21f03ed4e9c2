package supervisor

import (
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/internal/zapslog"
)

// NewActorSystem builds an actor system configured the way the runtime
// builds its own: protoactor logs to log (named "actor"; nil discards
// them), and the dead-letter throttle window is short.
//
// mp is not given to protoactor, whatever it is: with a metrics provider,
// protoactor registers a mailbox-length callback for every actor it spawns
// on the global OTel meter and never unregisters it, which keeps every
// actor ever spawned reachable (a leak of one actor per invocation; its
// metrics never reached svc's exporters anyway). Nor is protoactor's
// default Prometheus provider used, which listens on a port of its own. Give it to Config.System to share
// one system between the runtime and other actors of the process, such as
// the SSE emitter's subscribers (emitters/sse.New); shut it down with
// Shutdown after everything running in it has stopped.
func NewActorSystem(log *zap.Logger, mp metric.MeterProvider) *actor.ActorSystem {
	if log == nil {
		log = zap.NewNop()
	}
	named := log.Named("actor")
	opts := []actor.ConfigOption{
		actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
			return slog.New(zapslog.New(named))
		}),
		// Dead letters are expected after a cancel; keep the throttle window
		// short so its timer goroutine does not outlive Shutdown by much.
		actor.WithDeadLetterThrottleInterval(10 * time.Millisecond),
		actor.WithDeadLetterRequestLogging(false),
	}
	_ = mp
	return actor.NewActorSystem(opts...)
}

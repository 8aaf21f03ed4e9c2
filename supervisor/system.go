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
// them), its metrics go to mp (none when nil; never protoactor's default
// Prometheus provider, which listens on a port of its own), and the
// dead-letter throttle window is short. Give it to Config.System to share
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
	if mp != nil {
		opts = append(opts, actor.WithMetricProviders(mp))
	}
	return actor.NewActorSystem(opts...)
}

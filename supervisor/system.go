package supervisor

import (
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/internal/zapslog"
)

// NewActorSystem builds an actor system configured the way the runtime
// builds its own: protoactor logs to log (named "actor"; nil discards
// them), and the dead-letter throttle window is short.
//
// protoactor's own actor metrics stay off. Turned on (WithMetricProviders),
// they record on the global OpenTelemetry provider whatever provider they
// are given, so they never reached /metrics, and every spawn registers a
// mailbox-length callback that is never unregistered: the callback holds
// the actor's context and mailbox, so every run actor ever spawned stayed
// live (about 6 KB a request, issue 13) and the callback list grew without
// end. Give it to Config.System to share
// one system between the runtime and other actors of the process, such as
// the SSE emitter's subscribers (emitters/sse.New); shut it down with
// Shutdown after everything running in it has stopped.
func NewActorSystem(log *zap.Logger) *actor.ActorSystem {
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
	return actor.NewActorSystem(opts...)
}

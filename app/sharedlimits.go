package app

import (
	"context"
	"fmt"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/broker/natsbroker"
	"github.com/svc-dev/svc/broker/redisbroker"
	"github.com/svc-dev/svc/ratelimit"
	"github.com/svc-dev/svc/ratelimit/natslimit"
	"github.com/svc-dev/svc/ratelimit/redislimit"
)

// sharedLimits is the store the named rate limits draw on through the
// process's broker, so that the fleet's nodes (serve and workers) stay
// within each limit together: Redis (a Lua token bucket) or NATS
// (JetStream KV). A memory broker is one process's anyway, and AMQP and
// Kafka have no store: there each node's limits stay its own.
func sharedLimits(b svc.Broker) (ratelimit.SharedOptions, error) {
	switch b := b.(type) {
	case *redisbroker.Broker:
		return ratelimit.SharedOptions{Store: redislimit.New(b.Client(), "")}, nil
	case *natsbroker.Broker:
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s, err := natslimit.New(ctx, b.Conn(), "")
		if err != nil {
			return ratelimit.SharedOptions{}, fmt.Errorf("app: the rate limits' store on the broker: %w", err)
		}
		return ratelimit.SharedOptions{Store: s}, nil
	}
	return ratelimit.SharedOptions{}, nil
}

// Package broker opens the svc.Broker a URL names: memory://, nats://,
// redis://, kafka://, amqp://.
package broker

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"go.uber.org/zap"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/broker/amqpbroker"
	"github.com/svc-dev/svc/broker/kafkabroker"
	"github.com/svc-dev/svc/broker/membroker"
	"github.com/svc-dev/svc/broker/natsbroker"
	"github.com/svc-dev/svc/broker/redisbroker"
)

// Options apply to every kind of broker Open makes.
type Options struct {
	// Logger receives the broker's connection events; nil is silent.
	Logger *zap.Logger
	// Name identifies this process to the broker server (NATS connection
	// name, Redis client name); default "svc".
	Name string
}

// Schemes are the URL schemes Open accepts. `svc serve --broker embedded`
// is not a URL: the caller starts natsbroker.StartEmbedded and opens its
// ClientURL.
var Schemes = []string{"memory", "nats", "redis", "kafka", "amqp"}

// Open connects to the broker rawURL names:
//
//   - memory:// a private in-process broker; memory://NAME the process-wide
//     one called NAME (every Open of the same name shares it);
//   - nats://host:port (several servers: nats://h1:4222,nats://h2:4222;
//     user:password@ or token@ for auth; tls:// for TLS): NATS JetStream;
//   - redis://[user:password@]host:port[/db] (rediss:// for TLS): Redis
//     Streams;
//   - kafka://host:port[,host:port...][?partitions=N]: Apache Kafka (or a
//     server speaking its protocol), a consumer group per agent;
//   - amqp://user:password@host:port/vhost (amqps:// for TLS): RabbitMQ,
//     a durable quorum queue per agent.
//
// It fails when the broker is unreachable, so a bad --broker stops the
// process at start rather than at its first task.
func Open(ctx context.Context, rawURL string, opts Options) (svc.Broker, error) {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.Name == "" {
		opts.Name = "svc"
	}
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return nil, fmt.Errorf("broker: %q is not a broker URL (want one of %s)", rawURL, schemeList())
	}
	switch strings.ToLower(scheme) {
	case "memory":
		name := strings.TrimSuffix(rest, "/")
		if _, err := url.PathUnescape(name); err != nil || strings.ContainsAny(name, "/?#") {
			return nil, fmt.Errorf("broker: bad memory URL %q: want memory:// or memory://NAME", rawURL)
		}
		return membroker.Open(name), nil
	case "nats", "tls":
		return natsbroker.Connect(ctx, rawURL, natsbroker.Options{Name: opts.Name, Logger: opts.Logger})
	case "redis", "rediss":
		return redisbroker.Connect(ctx, rawURL, redisbroker.Options{Name: opts.Name, Logger: opts.Logger})
	case "kafka":
		return kafkabroker.Connect(ctx, rawURL, kafkabroker.Options{Name: opts.Name, Logger: opts.Logger})
	case "amqp", "amqps":
		return amqpbroker.Connect(ctx, rawURL, amqpbroker.Options{Name: opts.Name, Logger: opts.Logger})
	default:
		return nil, fmt.Errorf("broker: unknown scheme %q in %q (supported: %s)", scheme, redact(rawURL), schemeList())
	}
}

func schemeList() string {
	parts := make([]string, len(Schemes))
	for i, s := range Schemes {
		parts[i] = s + "://"
	}
	return strings.Join(parts, ", ")
}

// redact hides a password in a URL for error messages.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "<unparseable URL>"
	}
	return u.Redacted()
}

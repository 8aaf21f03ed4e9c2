package broker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"go.uber.org/goleak"

	"github.com/svc-dev/svc/broker"
	"github.com/svc-dev/svc/broker/natsbroker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestOpenMemory(t *testing.T) {
	ctx := context.Background()
	for _, u := range []string{"memory://", "memory://name", "MEMORY://x/"} {
		b, err := broker.Open(ctx, u, broker.Options{})
		if err != nil {
			t.Fatalf("Open(%q): %v", u, err)
		}
		if b.Scheme() != "memory" {
			t.Errorf("Open(%q).Scheme() = %q", u, b.Scheme())
		}
		if err := b.Close(); err != nil {
			t.Error(err)
		}
	}
}

func TestOpenRejects(t *testing.T) {
	ctx := context.Background()
	for u, want := range map[string][]string{
		"pulsar://h:6650":     {`"pulsar"`, "memory://", "nats://", "redis://", "kafka://", "amqp://"},
		"ftp://user:secret@h": {`"ftp"`, "user:xxxxx@h"},
		"localhost:4222":      {"not a broker URL"},
		"embedded":            {"not a broker URL"},
		"memory://a/b":        {"memory://NAME"},
	} {
		_, err := broker.Open(ctx, u, broker.Options{})
		if err == nil {
			t.Errorf("Open(%q) succeeded", u)
			continue
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("Open(%q) error %q lacks %q", u, err, w)
			}
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("Open(%q) error shows the password: %q", u, err)
		}
	}
}

func TestOpenNATS(t *testing.T) {
	e, err := natsbroker.StartEmbedded(natsbroker.EmbeddedConfig{DataDir: t.TempDir(), Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := broker.Open(ctx, e.ClientURL(), broker.Options{})
	if err != nil {
		t.Fatalf("Open(%s): %v", e.ClientURL(), err)
	}
	defer b.Close()
	if b.Scheme() != "nats" {
		t.Errorf("Scheme = %q", b.Scheme())
	}
	if err := b.Ping(ctx); err != nil {
		t.Error(err)
	}
}

func TestOpenRedisUnreachable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := broker.Open(ctx, "redis://127.0.0.1:1", broker.Options{}); err == nil || !strings.Contains(err.Error(), "redisbroker") {
		t.Errorf("Open(redis://127.0.0.1:1) = %v, want a redisbroker connect error", err)
	}
}

func TestOpenKafka(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	u := "kafka://" + c.ListenAddrs()[0] + "?partitions=2"
	b, err := broker.Open(ctx, u, broker.Options{})
	if err != nil {
		t.Fatalf("Open(%s): %v", u, err)
	}
	defer b.Close()
	if b.Scheme() != "kafka" {
		t.Errorf("Scheme = %q", b.Scheme())
	}
	if err := b.Ping(ctx); err != nil {
		t.Error(err)
	}
}

func TestOpenUnreachable(t *testing.T) {
	for u, pkg := range map[string]string{"amqp://guest:secret@127.0.0.1:1/": "amqpbroker", "kafka://127.0.0.1:1": "kafkabroker"} {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_, err := broker.Open(ctx, u, broker.Options{})
		cancel()
		if err == nil || !strings.Contains(err.Error(), pkg) {
			t.Errorf("Open(%s) = %v, want a %s connect error", u, err, pkg)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("Open(%s) error shows the password: %q", u, err)
		}
	}
}

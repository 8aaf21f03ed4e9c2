package kafkabroker_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"go.uber.org/goleak"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/broker/brokertest"
	"github.com/svc-dev/svc/broker/kafkabroker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// cluster starts an in-process kfake cluster and returns its kafka:// URL.
func cluster(t *testing.T) string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return "kafka://" + c.ListenAddrs()[0]
}

func connect(t *testing.T, url string) *kafkabroker.Broker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := kafkabroker.Connect(ctx, url, kafkabroker.Options{})
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	return b
}

func TestContract(t *testing.T) {
	url := cluster(t)
	brokertest.Run(t, func(t *testing.T) svc.Broker { return connect(t, url) })
}

func TestConnectErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, u := range []string{"http://x", "kafka://", "kafka://127.0.0.1:1?partitions=0"} {
		if _, err := kafkabroker.Connect(ctx, u, kafkabroker.Options{}); err == nil {
			t.Errorf("Connect(%q) succeeded", u)
		}
	}
}

package app

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/http/client"
)

// TestFleetInOneProcess runs a publisher app and a worker app on one
// named in-memory broker: the publisher's runs execute on the worker, and
// both shut down cleanly (TestMain checks that no goroutine is left).
func TestFleetInOneProcess(t *testing.T) {
	for _, tc := range []struct{ name, broker string }{
		{"memory", "memory://app-fleet"},
		{"embedded", "embedded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dataDir := t.TempDir()
			o := Options{SpecsDir: exampleSpecs, DataDir: dataDir, Store: "memory", Events: "none",
				Broker: tc.broker, Logger: zap.NewNop()}
			if tc.broker == "embedded" {
				o.NATSListen = freeAddr(t)
			}
			pub, err := New(o)
			if err != nil {
				t.Fatal(err)
			}
			if err := pub.Start(); err != nil {
				t.Fatal(err)
			}
			defer shutdown(t, pub)
			url := pub.BrokerURL()
			// The publisher's data directory, which it has locked: a
			// worker uses none and takes no lock.
			wk, err := New(Options{SpecsDir: exampleSpecs, DataDir: dataDir, Store: "memory", Events: "none", Broker: url,
				Worker: &WorkerOptions{Agents: []string{"echo"}, Heartbeat: -1}, Logger: zap.NewNop()})
			if err != nil {
				t.Fatal(err)
			}
			if err := wk.Start(); err != nil {
				t.Fatal(err)
			}
			if wk.Addr() != nil {
				t.Error("a worker serves HTTP")
			}
			if got := wk.Worker().Agents(); len(got) != 1 || got[0] != "echo" {
				t.Errorf("worker agents = %v", got)
			}

			c, err := client.New(pub.URL(), client.WithHTTPClient(httpClient))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			res, err := c.Run(ctx, "echo", svc.TaskSpec{Input: json.RawMessage(`{"text":"over the broker"}`)})
			if err != nil {
				t.Fatal(err)
			}
			want := "broker:memory"
			if tc.broker == "embedded" {
				want = "broker:nats"
			}
			if !res.Success || string(res.Output) != `{"text":"over the broker"}` || res.Metadata.Backend != want {
				t.Fatalf("result = %+v", res)
			}
			shutdown(t, wk)
		})
	}
}

func TestBrokerOptionsChecked(t *testing.T) {
	for _, tc := range []struct {
		name   string
		o      Options
		option string
	}{
		{"unknown scheme", Options{Broker: "kafka://x:9092"}, "Broker"},
		{"not a URL", Options{Broker: "localhost:4222"}, "Broker"},
		{"worker without broker", Options{Worker: &WorkerOptions{}}, "Worker"},
		{"worker on embedded", Options{Broker: "embedded", Worker: &WorkerOptions{}}, "Broker"},
		{"listen without embedded", Options{Broker: "memory://", NATSListen: "127.0.0.1:1"}, "NATSListen"},
		{"negative ack wait", Options{Broker: "memory://", AckWait: -time.Second}, "AckWait"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.o)
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Option != tc.option {
				t.Fatalf("err = %v, want a ConfigError on %s", err, tc.option)
			}
		})
	}
}

// A worker whose agent the specs do not have does not start.
func TestWorkerUnknownAgent(t *testing.T) {
	a, err := New(Options{SpecsDir: exampleSpecs, Store: "memory", Events: "none", Broker: "memory://app-unknown",
		Worker: &WorkerOptions{Agents: []string{"nope"}}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	err = a.Start()
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Option != "Worker" || !errors.Is(err, svc.ErrRegistry) {
		t.Fatalf("err = %v, want a ConfigError on Worker naming the unknown agent", err)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

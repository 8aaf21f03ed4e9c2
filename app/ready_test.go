package app

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/broker/natsbroker"
	"github.com/svc-dev/svc/fleetwire"
	"github.com/svc-dev/svc/http/client"
	"github.com/svc-dev/svc/internal/servertest"
	"github.com/svc-dev/svc/internal/testutil"
)

// readyz returns GET /readyz's status and, on a 503, the problem's reason.
func readyz(t *testing.T, a *App) (int, string) {
	t.Helper()
	resp, err := httpClient.Get(a.URL() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var p struct {
		Reason string `json:"reason"`
		Detail string `json:"detail"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&p)
	return resp.StatusCode, p.Reason
}

// TestReadyzFollowsTheBroker: a publisher's /readyz is 503 naming the
// broker while its redis-server is down and 200 once it is back on the same
// address, and the fleet works again without a restart: a task submitted
// after the outage runs on the worker (both reconnected on their own).
func TestReadyzFollowsTheBroker(t *testing.T) {
	t.Run("redis", func(t *testing.T) {
		srv := servertest.StartRedis(t)
		outage(t, srv.URL, srv.Stop, srv.Restart)
	})
	t.Run("nats", func(t *testing.T) {
		// An external nats-server (here one of this process, reached
		// over TCP like any other), restarted on its port and data.
		dir := t.TempDir()
		start := func(listen string) *natsbroker.Embedded {
			t.Helper()
			e, err := natsbroker.StartEmbedded(natsbroker.EmbeddedConfig{DataDir: dir, Listen: listen})
			if err != nil {
				t.Fatal(err)
			}
			return e
		}
		e := start("127.0.0.1:0")
		url := e.ClientURL()
		stop := func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := e.Shutdown(ctx); err != nil {
				t.Error(err)
			}
		}
		defer func() { stop() }()
		outage(t, url, stop, func() {
			var err error
			for range 50 { // the port may linger a moment
				if e, err = natsbroker.StartEmbedded(natsbroker.EmbeddedConfig{DataDir: dir, Listen: strings.TrimPrefix(url, "nats://")}); err == nil {
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
			t.Fatalf("restarting nats-server: %v", err)
		})
	})
}

// outage runs a publisher and a worker on the broker at url, stops the
// broker, checks /readyz turns 503, restarts it, checks /readyz turns 200
// and a task runs again.
func outage(t *testing.T, url string, stop, restart func()) {
	pub, err := New(Options{SpecsDir: exampleSpecs, DataDir: t.TempDir(), Store: "memory", Events: "none",
		Broker: url, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.Start(); err != nil {
		t.Fatal(err)
	}
	defer shutdown(t, pub)
	wk, err := New(Options{SpecsDir: exampleSpecs, Store: "memory", Events: "none", Broker: url,
		Worker: &WorkerOptions{Agents: []string{"echo"}, Heartbeat: -1}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	if err := wk.Start(); err != nil {
		t.Fatal(err)
	}
	defer shutdown(t, wk)
	c, err := client.New(pub.URL(), client.WithHTTPClient(httpClient))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	run := func(id string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		res, err := c.Run(ctx, "echo", svc.TaskSpec{ID: id, Input: json.RawMessage(`{"text":"hi"}`)})
		if err != nil || !res.Success {
			t.Fatalf("run %s: %+v %v", id, res, err)
		}
	}

	if code, _ := readyz(t, pub); code != http.StatusOK {
		t.Fatalf("/readyz with the broker up = %d", code)
	}
	run("before")
	stop()
	testutil.Eventually(t, "/readyz 503 naming the broker while it is down", func() bool {
		code, reason := readyz(t, pub)
		return code == http.StatusServiceUnavailable && reason == "broker"
	})
	restart()
	testutil.Eventually(t, "/readyz 200 once the broker is back", func() bool {
		code, _ := readyz(t, pub)
		return code == http.StatusOK
	})
	run("after")
}

func TestBrokerKeysNeedABroker(t *testing.T) {
	k, err := fleetwire.ParseKeyring("k1:0123456789abcdef-k1")
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(Options{SpecsDir: exampleSpecs, BrokerKeys: k, Logger: zap.NewNop()})
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Option != "BrokerKeys" {
		t.Fatalf("New with keys and no broker = %v, want a ConfigError on BrokerKeys", err)
	}
	k.SignID = "gone"
	_, err = New(Options{SpecsDir: exampleSpecs, Broker: "memory://", BrokerKeys: k, Logger: zap.NewNop()})
	if !errors.As(err, &ce) || ce.Option != "BrokerKeys" {
		t.Fatalf("New with no signing key = %v, want a ConfigError on BrokerKeys", err)
	}
}

// Package servertest starts the broker servers tests run against: a
// throwaway redis-server and an embedded nats-server, each on a free
// loopback port with its data in a temp dir, gone when the test ends.
package servertest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/svc-dev/svc/broker/natsbroker"
)

// Redis runs redis-server without persistence and returns its redis:// URL;
// the server is killed when tb ends. Without redis-server installed the test
// skips, unless SVC_REQUIRE_REDIS=1 (as in CI) makes that a failure.
func Redis(tb testing.TB) string {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("SVC_REQUIRE_REDIS") == "1" {
			tb.Fatalf("redis-server not found (%v) and SVC_REQUIRE_REDIS=1: install redis-server", err)
		}
		tb.Skipf("redis-server not found (%v): install redis-server to run the Redis broker tests", err)
	}
	var lastErr error
	for range 3 { // the free port may be taken before redis binds it
		url, err := tryRedis(tb, bin)
		if err == nil {
			return url
		}
		lastErr = err
	}
	tb.Fatalf("starting redis-server: %v", lastErr)
	return ""
}

func tryRedis(tb testing.TB, bin string) (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	_ = l.Close()
	dir := tb.TempDir()
	logFile := filepath.Join(dir, "redis.log")
	cmd := exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", logFile)
	if err := cmd.Start(); err != nil {
		return "", err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + port, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := c.Ping(context.Background()).Err()
		if err == nil {
			return "redis://127.0.0.1:" + port, nil
		}
		select {
		case werr := <-exited:
			exited <- werr // for the cleanup
			log, _ := os.ReadFile(logFile)
			return "", fmt.Errorf("redis-server exited (%v): %s", werr, log)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("redis-server on port %s does not answer PING: %v", port, err)
		}
	}
}

// NATS starts an embedded nats-server with JetStream and returns its
// nats:// URL; it shuts down when tb ends.
func NATS(tb testing.TB) string {
	tb.Helper()
	e, err := natsbroker.StartEmbedded(natsbroker.EmbeddedConfig{DataDir: tb.TempDir(), Listen: "127.0.0.1:0"})
	if err != nil {
		tb.Fatalf("starting nats-server: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.Shutdown(ctx); err != nil {
			tb.Error(err)
		}
	})
	return e.ClientURL()
}

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
	return StartRedis(tb).URL
}

// RedisServer is a redis-server a test can stop and start again on the same
// port, to test what survives an outage.
type RedisServer struct {
	// URL is the server's redis:// URL; it stays the same across
	// restarts.
	URL string

	tb      testing.TB
	bin     string
	port    string
	dir     string
	cmd     *exec.Cmd
	exited  chan error
	stopped bool
}

// StartRedis is Redis, returning the server so the test can Stop and
// Restart it.
func StartRedis(tb testing.TB) *RedisServer {
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
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
		_ = l.Close()
		s := &RedisServer{URL: "redis://127.0.0.1:" + port, tb: tb, bin: bin, port: port, dir: tb.TempDir()}
		if lastErr = s.start(); lastErr == nil {
			tb.Cleanup(s.Stop)
			return s
		}
	}
	tb.Fatalf("starting redis-server: %v", lastErr)
	return nil
}

// Stop kills the server (its data is gone: it keeps none). Idempotent.
func (s *RedisServer) Stop() {
	if s.stopped {
		return
	}
	s.stopped = true
	_ = s.cmd.Process.Kill()
	<-s.exited
}

// Restart starts the server again, empty, on the same port; it fails the
// test if it cannot.
func (s *RedisServer) Restart() {
	s.tb.Helper()
	s.Stop()
	var err error
	for range 50 { // the port may linger a moment after the kill
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.tb.Fatalf("restarting redis-server on port %s: %v", s.port, err)
}

func (s *RedisServer) start() error {
	logFile := filepath.Join(s.dir, "redis.log")
	cmd := exec.Command(s.bin, "--port", s.port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", s.dir, "--logfile", logFile)
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	s.cmd, s.exited, s.stopped = cmd, exited, false
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + s.port, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := c.Ping(context.Background()).Err()
		if err == nil {
			return nil
		}
		select {
		case werr := <-exited:
			exited <- werr // for Stop
			s.Stop()
			log, _ := os.ReadFile(logFile)
			return fmt.Errorf("redis-server exited (%v): %s", werr, log)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Stop()
			return fmt.Errorf("redis-server on port %s does not answer PING: %v", s.port, err)
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

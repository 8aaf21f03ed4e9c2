package servertest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// RabbitMQ runs a throwaway rabbitmq-server (its own node name, epmd, ports,
// mnesia, log and config in a temp dir) and returns its amqp:// URL once it
// accepts AMQP connections; the server and its epmd are killed when tb
// ends. Without rabbitmq-server installed the test skips with a message
// saying so, unless SVC_REQUIRE_RABBITMQ=1 (as in CI) makes that a failure.
// A node takes some seconds to boot: start one per test, not per subtest.
func RabbitMQ(tb testing.TB) string {
	tb.Helper()
	bin, epmd := rabbitBins(tb)
	url, err := startRabbit(tb, bin, epmd)
	if err != nil {
		tb.Fatalf("starting rabbitmq-server: %v", err)
	}
	return url
}

// RabbitMQNode is one throwaway rabbitmq-server for all the tests of a
// package, as RabbitMQ starts for one: the first test that asks for its
// URL starts it, the package's TestMain stops it (Stop) after m.Run. A
// node takes seconds of CPU to boot; tests that keep to subjects of their
// own share one, as the subtests of brokertest's suite do.
type RabbitMQNode struct {
	once sync.Once
	url  string
	err  error
	res  resources
}

// URL starts the node the first time and returns its amqp:// URL; it skips
// or fails tb as RabbitMQ does when rabbitmq-server is not installed.
func (n *RabbitMQNode) URL(tb testing.TB) string {
	tb.Helper()
	bin, epmd := rabbitBins(tb)
	n.once.Do(func() { n.url, n.err = startRabbit(&n.res, bin, epmd) })
	if n.err != nil {
		tb.Fatalf("starting rabbitmq-server: %v", n.err)
	}
	return n.url
}

// Stop kills the node, if one was started, and removes its files.
func (n *RabbitMQNode) Stop() { n.res.close() }

// owner is what a server's start needs of its owner: a directory, and a
// place for what stops it. testing.TB is one; resources, a package's.
type owner interface {
	TempDir() string
	Cleanup(func())
}

// resources is an owner outside a test: the servers a package's tests
// share, released by close (cleanups last first, then the directories).
type resources struct {
	mu       sync.Mutex
	cleanups []func()
	dirs     []string
}

func (r *resources) TempDir() string {
	d, err := os.MkdirTemp("", "svc-servertest-")
	if err != nil {
		panic(err) // as testing.TB's TempDir fails its test
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dirs = append(r.dirs, d)
	return d
}

func (r *resources) Cleanup(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cleanups = append(r.cleanups, f)
}

func (r *resources) close() {
	r.mu.Lock()
	cleanups, dirs := r.cleanups, r.dirs
	r.cleanups, r.dirs = nil, nil
	r.mu.Unlock()
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
	for _, d := range dirs {
		_ = os.RemoveAll(d)
	}
}

// rabbitBins finds rabbitmq-server and epmd, or skips tb (fails it under
// SVC_REQUIRE_RABBITMQ=1).
func rabbitBins(tb testing.TB) (bin, epmd string) {
	tb.Helper()
	bin, err := findRabbit()
	if err != nil {
		if os.Getenv("SVC_REQUIRE_RABBITMQ") == "1" {
			tb.Fatalf("rabbitmq-server not found (%v) and SVC_REQUIRE_RABBITMQ=1: install rabbitmq-server", err)
		}
		tb.Skipf("SKIPPING: rabbitmq-server not found (%v): install rabbitmq-server (apt-get install rabbitmq-server) to run the AMQP broker tests", err)
	}
	epmd, err = exec.LookPath("epmd")
	if err != nil {
		tb.Fatalf("rabbitmq-server is installed but epmd is not on PATH: %v", err)
	}
	return bin, epmd
}

func startRabbit(o owner, bin, epmd string) (string, error) {
	var lastErr error
	for range 2 { // a free port may be taken before the node binds it
		url, err := tryRabbit(o, bin, epmd)
		if err == nil {
			return url, nil
		}
		lastErr = err
	}
	return "", lastErr
}

// findRabbit prefers the server script itself over /usr/sbin's wrapper,
// which switches to the rabbitmq user.
func findRabbit() (string, error) {
	if bin := "/usr/lib/rabbitmq/bin/rabbitmq-server"; fileExists(bin) {
		return bin, nil
	}
	return exec.LookPath("rabbitmq-server")
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startKillable starts cmd in its own process group and kills the group
// (the script and the Erlang VM it runs) when tb ends.
func startKillable(tb owner, cmd *exec.Cmd) (exited chan error, err error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited = make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	pid := cmd.Process.Pid
	tb.Cleanup(func() {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		werr := <-exited
		exited <- werr
	})
	return exited, nil
}

func tryRabbit(tb owner, bin, epmdBin string) (string, error) {
	var ports [3]int
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return "", err
		}
		ports[i] = p
	}
	amqpPort, distPort, epmdPort := ports[0], ports[1], ports[2]
	dir := tb.TempDir()
	conf := fmt.Sprintf("listeners.tcp.default = 127.0.0.1:%d\nloopback_users = none\n", amqpPort)
	for name, body := range map[string]string{"rabbit.conf": conf, "enabled_plugins": "[].\n", "rabbitmq-env.conf": ""} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			return "", err
		}
	}
	env := append(os.Environ(),
		"HOME="+dir, // the Erlang cookie
		"ERL_EPMD_PORT="+strconv.Itoa(epmdPort),
		"ERL_EPMD_ADDRESS=127.0.0.1",
		fmt.Sprintf("RABBITMQ_NODENAME=svctest%d@localhost", amqpPort),
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT="+strconv.Itoa(amqpPort),
		"RABBITMQ_DIST_PORT="+strconv.Itoa(distPort),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(dir, "log"),
		"RABBITMQ_CONFIG_FILE="+filepath.Join(dir, "rabbit.conf"),
		"RABBITMQ_ADVANCED_CONFIG_FILE="+filepath.Join(dir, "advanced.config"),
		"RABBITMQ_CONF_ENV_FILE="+filepath.Join(dir, "rabbitmq-env.conf"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(dir, "enabled_plugins"),
		"RABBITMQ_PID_FILE="+filepath.Join(dir, "rabbit.pid"),
	)
	// An epmd of our own, in the foreground, so the cleanup can kill it.
	ep := exec.Command(epmdBin, "-port", strconv.Itoa(epmdPort), "-address", "127.0.0.1")
	ep.Env = env
	if _, err := startKillable(tb, ep); err != nil {
		return "", fmt.Errorf("epmd: %w", err)
	}
	logFile := filepath.Join(dir, "rabbitmq-server.out")
	out, err := os.Create(logFile)
	if err != nil {
		return "", err
	}
	tb.Cleanup(func() { _ = out.Close() })
	cmd := exec.Command(bin)
	cmd.Env = env
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = out, out
	exited, err := startKillable(tb, cmd)
	if err != nil {
		return "", err
	}
	addr := "127.0.0.1:" + strconv.Itoa(amqpPort)
	deadline := time.Now().Add(90 * time.Second)
	for {
		if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
			// The listener opens when the node has booted.
			_ = c.Close()
			return "amqp://guest:guest@" + addr + "/", nil
		}
		select {
		case werr := <-exited:
			exited <- werr
			log, _ := os.ReadFile(logFile)
			return "", fmt.Errorf("rabbitmq-server exited (%v): %s", werr, log)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logFile)
			return "", fmt.Errorf("rabbitmq-server on %s does not accept connections after 90s: %s", addr, log)
		}
	}
}

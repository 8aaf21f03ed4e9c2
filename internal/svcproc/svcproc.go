// Package svcproc builds the svc binary and runs `svc serve` as a child
// process, for tests that need the real server a user starts: its flags,
// its listener, its data directory, its signals. It imports testing, so
// only _test.go files may import it.
package svcproc

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// SharedDirEnv names the environment variable of a directory that `make
// test` creates for one run of the tests (and removes after): Build and
// BuildPlain then build svc there once for all the test binaries of the
// run, the first under a lock while the others wait for it, rather than
// once per package (a race build takes 10-30 s of CPU, mostly linking).
// Without it each call builds into the dir it is given.
const SharedDirEnv = "SVC_TEST_BUILD_DIR"

// Build builds github.com/svc-dev/svc/cmd/svc into dir and returns the
// binary's path; with Race, with the race detector. Call it once per test
// binary (from TestMain): a build takes seconds even from the cache.
func Build(dir string) (string, error) { return build(dir, Race) }

// BuildPlain is Build without the race detector, whatever the caller's
// build: for tests that measure the server's memory, or run it as a user
// does.
func BuildPlain(dir string) (string, error) { return build(dir, false) }

func build(dir string, race bool) (string, error) {
	name := "svc"
	if race {
		name = "svc-race"
	}
	if shared := os.Getenv(SharedDirEnv); shared != "" {
		return buildShared(shared, name, race)
	}
	bin := filepath.Join(dir, name)
	return bin, goBuild(bin, race)
}

// buildShared builds name into the shared directory unless a test binary
// of the same run already did, holding an flock on name.lock meanwhile so
// that the test binaries that want it at once wait for one build.
func buildShared(dir, name string, race bool) (string, error) {
	bin := filepath.Join(dir, name)
	lock, err := os.OpenFile(bin+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return "", fmt.Errorf("%s: %w", SharedDirEnv, err)
	}
	defer lock.Close() // closing releases the lock
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("%s: locking %s: %w", SharedDirEnv, lock.Name(), err)
	}
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	// Built aside and renamed: a build cut short leaves no binary that
	// the next test binary would take for a whole one.
	tmp := bin + ".tmp"
	if err := goBuild(tmp, race); err != nil {
		return "", err
	}
	return bin, os.Rename(tmp, bin)
}

// goBuild runs go build; a variable for the test of buildShared.
var goBuild = func(bin string, race bool) error {
	args := []string{"build", "-o", bin}
	if race {
		args = append(args, "-race")
	}
	out, err := exec.Command("go", append(args, "github.com/svc-dev/svc/cmd/svc")...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("go build ./cmd/svc: %w\n%s", err, out)
	}
	return nil
}

// Env is the test's environment without the variables svc reads (a
// developer's SVC_AUTH_TOKEN must not change what a test sees). A race
// build sleeps a second at exit to catch late reports; tests that stop
// servers trade that for speed.
func Env() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SVC_") && !strings.HasPrefix(kv, "GORACE=") {
			env = append(env, kv)
		}
	}
	if Race {
		env = append(env, "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	}
	return env
}

// Server is one running `svc serve`.
type Server struct {
	// URL is where it listens, "http://127.0.0.1:PORT", from its
	// "svc serving" log line.
	URL string

	cmd  *exec.Cmd
	log  *logBuf
	done chan struct{} // closed once the process has exited
	err  error         // its exit, valid once done is closed
}

// servingURL finds the address in the "svc serving" log line, in either
// log format (console: "url": "...", json: "url":"...").
var servingURL = regexp.MustCompile(`svc serving.*?"url": ?"(http://[^"]+)"`)

// Serve starts `bin serve args...` and waits (at most a minute) for it to
// log the address it listens on. The caller gives the flags (--specs,
// --data-dir, --port …). When t ends the server is stopped (Stop) if it
// still runs, its stderr checked for data races, and logged if t failed.
func Serve(t testing.TB, bin string, args ...string) *Server {
	t.Helper()
	s := &Server{log: &logBuf{}, done: make(chan struct{})}
	s.cmd = exec.Command(bin, append([]string{"serve"}, args...)...)
	s.cmd.Env = Env()
	s.cmd.Stderr = s.log
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		s.err = s.cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(func() {
		s.Stop(t)
		if head, tail := s.log.strings(); s.log.races() > 0 {
			t.Errorf("svc serve reported a data race:\n%s", tail)
		} else if t.Failed() {
			t.Logf("svc serve (pid %d) stderr, first and last 16 KiB:\n%s\n…\n%s", s.PID(), head, tail)
		}
	})
	deadline := time.Now().Add(time.Minute)
	for {
		head, _ := s.log.strings()
		if m := servingURL.FindStringSubmatch(head); m != nil {
			s.URL = m[1]
			return s
		}
		select {
		case <-s.done:
			t.Fatalf("svc serve exited (%v) before it served; stderr:\n%s", s.err, head)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("svc serve logged no address within a minute; stderr:\n%s", head)
		}
	}
}

// PID is the server's process id.
func (s *Server) PID() int { return s.cmd.Process.Pid }

// Done is closed once the process has exited.
func (s *Server) Done() <-chan struct{} { return s.done }

// Stop ends the server as an operator does, by its PID: SIGTERM, and
// SIGKILL if it has not exited 30 s later (a graceful stop waits for runs
// in flight, up to --shutdown-grace). It returns once the process is gone;
// a server that exits on SIGTERM with an error fails t.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
		if s.err != nil {
			t.Errorf("svc serve (pid %d) exited on SIGTERM with %v", s.PID(), s.err)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("svc serve (pid %d) still running 30 s after SIGTERM: killed", s.PID())
		s.Kill(t)
	}
}

// Kill ends the server at once (SIGKILL), as a crash or the OOM killer
// would, and returns once the process is gone.
func (s *Server) Kill(t testing.TB) {
	t.Helper()
	select {
	case <-s.done:
		return
	default:
	}
	if err := s.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("kill svc serve (pid %d): %v", s.PID(), err)
	}
	<-s.done
}

// logKeep is how much of the head and of the tail of stderr a Server
// keeps: a busy server logs every run, and a load test's worth does not
// belong in memory.
const logKeep = 16 << 10

// logBuf keeps the first and the last logKeep bytes written to it, and
// counts data-race reports in all of it.
type logBuf struct {
	mu         sync.Mutex
	head, tail []byte
	nraces     int
	carry      []byte // the end of the last write, so a report split across writes is counted
}

func (b *logBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n0 := len(p)
	const marker = "WARNING: DATA RACE"
	scan := append(b.carry, p...)
	b.nraces += bytes.Count(scan, []byte(marker))
	b.carry = append([]byte(nil), scan[max(0, len(scan)-len(marker)+1):]...)
	if n := min(len(p), logKeep-len(b.head)); n > 0 {
		b.head = append(b.head, p[:n]...)
		p = p[n:]
	}
	b.tail = append(b.tail, p...)
	if len(b.tail) > logKeep {
		b.tail = append(b.tail[:0], b.tail[len(b.tail)-logKeep:]...)
	}
	return n0, nil
}

func (b *logBuf) strings() (head, tail string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.head), string(b.tail)
}

func (b *logBuf) races() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.nraces
}

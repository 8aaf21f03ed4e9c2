//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package dirlock_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/svc-dev/svc/internal/dirlock"
)

func TestAcquireHeldRelease(t *testing.T) {
	path := filepath.Join(t.TempDir(), "svc.lock")
	l, err := dirlock.Acquire(path)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if got := strings.TrimSpace(string(b)); got != strconv.Itoa(os.Getpid()) {
		t.Errorf("lock file holds %q, want this PID %d", got, os.Getpid())
	}

	// A second open of the file, even in this process, is refused.
	_, err = dirlock.Acquire(path)
	var held *dirlock.HeldError
	if !errors.As(err, &held) || held.PID != os.Getpid() || held.Path != path {
		t.Fatalf("second Acquire: %v, want a HeldError naming PID %d", err, os.Getpid())
	}
	if !strings.Contains(err.Error(), "PID "+strconv.Itoa(os.Getpid())) {
		t.Errorf("message %q does not name the PID", err)
	}

	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(); err != nil {
		t.Errorf("second Release: %v", err)
	}
	l2, err := dirlock.Acquire(path)
	if err != nil {
		t.Fatalf("Acquire after Release: %v", err)
	}
	defer l2.Release()
}

func TestAcquireMissingDir(t *testing.T) {
	if _, err := dirlock.Acquire(filepath.Join(t.TempDir(), "no", "svc.lock")); err == nil {
		t.Error("Acquire in a missing directory succeeded")
	}
}

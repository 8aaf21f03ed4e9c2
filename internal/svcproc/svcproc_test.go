package svcproc

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestLogBufKeepsHeadAndTail: a busy server's stderr is bounded to its
// first and last logKeep bytes (the address is in the head, the last
// words in the tail), and a race report is counted even when it arrives
// split across writes and is no longer kept.
func TestLogBufKeepsHeadAndTail(t *testing.T) {
	var b logBuf
	write := func(s string) {
		if n, err := b.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write = %d, %v; want %d, nil", n, err, len(s))
		}
	}
	write("svc serving url\n")
	write("WARNING: DATA")
	write(" RACE\n")
	for range 1000 {
		write(strings.Repeat("x", 99) + "\n")
	}
	write("the end\n")
	head, tail := b.strings()
	if !strings.HasPrefix(head, "svc serving url\n") || len(head) != logKeep {
		t.Errorf("head is %d bytes starting %q", len(head), head[:min(len(head), 20)])
	}
	if !strings.HasSuffix(tail, "the end\n") || len(tail) != logKeep {
		t.Errorf("tail is %d bytes ending %q", len(tail), tail[max(0, len(tail)-20):])
	}
	if n := b.races(); n != 1 {
		t.Errorf("races = %d, want 1", n)
	}
}

// TestSharedBuild: with SVC_TEST_BUILD_DIR set, the test binaries of one
// `make test` that want svc at once get one build between them, the race
// and the plain build apart; a build that fails leaves nothing behind,
// and the next caller builds again.
func TestSharedBuild(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(SharedDirEnv, dir)
	var mu sync.Mutex
	builds := map[bool]int{}
	fail := false
	real := goBuild
	t.Cleanup(func() { goBuild = real })
	goBuild = func(bin string, race bool) error {
		mu.Lock()
		builds[race]++
		f := fail
		mu.Unlock()
		time.Sleep(50 * time.Millisecond) // the others arrive meanwhile
		if err := os.WriteFile(bin, []byte("partial"), 0o700); err != nil {
			return err
		}
		if f {
			return errors.New("build failed")
		}
		return nil
	}

	fail = true
	if _, err := build(t.TempDir(), true); err == nil {
		t.Fatal("a failed build returned no error")
	}
	if _, err := os.Stat(filepath.Join(dir, "svc-race")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a failed build left a binary behind: %v", err)
	}
	fail = false
	builds = map[bool]int{}

	var wg sync.WaitGroup
	paths := make([]string, 8)
	for i := range paths {
		wg.Go(func() {
			var err error
			if paths[i], err = build(t.TempDir(), i%2 == 0); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if builds[true] != 1 || builds[false] != 1 {
		t.Errorf("builds (race: count): %v, want one of each", builds)
	}
	for i, p := range paths {
		want := filepath.Join(dir, map[bool]string{true: "svc-race", false: "svc"}[i%2 == 0])
		if p != want {
			t.Errorf("caller %d got %s, want %s", i, p, want)
		}
	}
}

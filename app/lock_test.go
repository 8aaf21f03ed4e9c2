package app

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc"
)

// A second process on a data directory in use fails to start, naming the
// holder's PID, and leaves the first one's runs alone: its submitted run is
// still running, not marked failed ("interrupted") by the second's start.
func TestDataDirLock(t *testing.T) {
	dataDir := t.TempDir()
	slow := []svc.Agent{{Name: "slow", Model: "test:echo", ModelSettings: map[string]any{"latency_ms": 60000}}}
	first, err := New(Options{NoListen: true, DataDir: dataDir, Agents: slow})
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_ = first.Shutdown(ctx) // cancels the slow run
	}()
	ctx := context.Background()
	id, err := first.Runtime().Submit(ctx, svc.SubmitRequest{Target: "slow", Task: svc.TaskSpec{Input: json.RawMessage(`1`)}})
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, first, id, svc.RunRunning)

	pid := strconv.Itoa(os.Getpid())
	for _, o := range []Options{
		{NoListen: true, DataDir: dataDir, Agents: slow},
		{NoListen: true, DataDir: dataDir, Store: "memory", Agents: slow}, // the event store is still there
	} {
		second, err := New(o)
		if err != nil {
			t.Fatal(err)
		}
		err = second.Start()
		var le *LockedError
		if !errors.As(err, &le) || le.PID != os.Getpid() || !strings.Contains(err.Error(), "PID "+pid) ||
			!strings.Contains(err.Error(), dataDir) {
			t.Fatalf("second Start = %v, want a LockedError naming PID %s and %s", err, pid, dataDir)
		}
		shutdown(t, second)
	}

	st, err := first.Runtime().RunStatus(ctx, id)
	if err != nil || st.State != svc.RunRunning {
		t.Errorf("the first process's run after the second's start: %+v, %v; want running", st, err)
	}
	if got, _ := os.ReadFile(filepath.Join(dataDir, LockFile)); strings.TrimSpace(string(got)) != pid {
		t.Errorf("lock file holds %q, want %s", got, pid)
	}
}

// Shutdown and a failed Start release the lock: the next process starts.
func TestDataDirLockReleased(t *testing.T) {
	dataDir := t.TempDir()
	a, err := New(Options{NoListen: true, DataDir: dataDir})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	shutdown(t, a)

	// A Start that fails after the lock (its run store does not open)
	// lets go of it.
	b, err := New(Options{NoListen: true, DataDir: dataDir, Store: "sqlite:/nonexistent/dir/runs.db"})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err == nil {
		t.Fatal("Start with a store that does not open succeeded")
	}

	c, err := New(Options{NoListen: true, DataDir: dataDir})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatalf("Start after Shutdown and a failed Start: %v", err)
	}
	shutdown(t, c)
}

// A sqlite: or pebble: run store outside the data directory has its own
// lock (PATH.lock); a memory store with no data directory in use takes none.
func TestStorePathLock(t *testing.T) {
	shared := t.TempDir()
	for _, store := range []string{"sqlite:" + filepath.Join(shared, "runs.db"), "pebble:" + filepath.Join(shared, "runs.pebble")} {
		t.Run(store[:strings.IndexByte(store, ':')], func(t *testing.T) {
			first, err := New(Options{NoListen: true, DataDir: t.TempDir(), Store: store, Events: "memory"})
			if err != nil {
				t.Fatal(err)
			}
			if err := first.Start(); err != nil {
				t.Fatal(err)
			}
			defer shutdown(t, first)
			second, err := New(Options{NoListen: true, DataDir: t.TempDir(), Store: store, Events: "memory"})
			if err != nil {
				t.Fatal(err)
			}
			err = second.Start()
			var le *LockedError
			path := store[strings.IndexByte(store, ':')+1:]
			if !errors.As(err, &le) || le.What != "run store" || le.Lock != path+".lock" || le.PID != os.Getpid() {
				t.Fatalf("second Start = %v, want a LockedError on %s.lock", err, path)
			}
			shutdown(t, second)
		})
	}
	t.Run("memory", func(t *testing.T) {
		dataDir := filepath.Join(t.TempDir(), "unused")
		var apps []*App
		for range 2 {
			a, err := New(Options{NoListen: true, DataDir: dataDir, Store: "memory", Events: "memory"})
			if err != nil {
				t.Fatal(err)
			}
			if err := a.Start(); err != nil {
				t.Fatal(err)
			}
			apps = append(apps, a)
		}
		for _, a := range apps {
			shutdown(t, a)
		}
		if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
			t.Errorf("memory stores created the data directory (%v)", err)
		}
	})
}

func waitState(t *testing.T, a *App, id string, want svc.RunState) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, err := a.Runtime().RunStatus(context.Background(), id)
		if err == nil && st.State == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s: %+v, %v; want %s", id, st, err, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

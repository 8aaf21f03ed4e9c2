package sqlitestore_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/stores/sqlitestore"
	"github.com/svc-dev/svc/stores/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func open(t *testing.T, path string) *sqlitestore.Store {
	t.Helper()
	s, err := sqlitestore.Open(path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestContract(t *testing.T) {
	t.Parallel() // its own server or files: the suites overlap their waits
	storetest.Run(t, func(t *testing.T) svc.RunStore {
		return open(t, filepath.Join(t.TempDir(), "runs.db"))
	})
}

// TestContractWithoutPolling runs the suite with a poll interval longer
// than any of its waits, so every stream must be woken by the store's own
// signals: a write that forgets to signal fails here.
func TestContractWithoutPolling(t *testing.T) {
	t.Parallel() // its own server or files: the suites overlap their waits
	storetest.Run(t, func(t *testing.T) svc.RunStore {
		s, err := sqlitestore.OpenPolling(filepath.Join(t.TempDir(), "runs.db"), time.Hour)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		return s
	})
}

func TestReopen(t *testing.T) {
	storetest.RunReopen(t, func(t *testing.T, dir string) svc.RunStore {
		return open(t, filepath.Join(dir, "runs.db"))
	})
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	notDB := filepath.Join(dir, "garbage.db")
	if err := os.WriteFile(notDB, bytes.Repeat([]byte("not a database "), 100), 0o600); err != nil {
		t.Fatal(err)
	}
	newer := filepath.Join(dir, "newer.db")
	db, err := sql.Open("sqlite", newer)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("PRAGMA user_version = 99"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name string
		path string
		want []string // substrings of the message, besides the path
		is   error    // a cause the error must wrap, if any
	}{
		{"empty", "", []string{"empty path"}, nil},
		{"memory", ":memory:", []string{"memstore"}, nil},
		{"uri", "file:x.db", []string{"want a file path"}, nil},
		{"question mark", filepath.Join(dir, "a?b.db"), []string{"'?'"}, nil},
		{"missing directory", filepath.Join(dir, "no", "such", "runs.db"), []string{"its directory does not exist"}, fs.ErrNotExist},
		{"parent is a file", filepath.Join(file, "runs.db"), []string{"is not a directory"}, nil},
		{"path is a directory", dir, []string{"is a directory"}, nil},
		{"not a database", notDB, []string{"not a database"}, nil},
		{"newer schema", newer, []string{"schema version 99"}, nil},
	}
	if runtime.GOOS == "linux" {
		// /proc takes no new files, even from root, whom permission bits
		// do not stop: the one portable way to test an unwritable directory.
		tests = append(tests, struct {
			name string
			path string
			want []string
			is   error
		}{"unwritable directory", "/proc/runs.db", []string{"unable to open"}, nil})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := sqlitestore.Open(tc.path)
			if err == nil {
				s.Close()
				t.Fatalf("Open(%q) succeeded", tc.path)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "sqlitestore: open ") || strings.Count(msg, "sqlitestore:") != 1 {
				t.Errorf("error %q: want one sqlitestore: open prefix", msg)
			}
			if tc.path != "" && !strings.Contains(msg, tc.path) {
				t.Errorf("error %q does not name the path %q", msg, tc.path)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not say %q", msg, w)
				}
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %q does not wrap %v", msg, tc.is)
			}
			if svc.KindOf(err) != svc.KindRuntime {
				t.Errorf("kind = %q, want %q", svc.KindOf(err), svc.KindRuntime)
			}
		})
	}
	// A refused Open leaves no file behind where it refused before opening.
	if _, err := os.Stat(filepath.Join(dir, "a?b.db")); err == nil {
		t.Errorf("Open created the file it refused")
	}
}

// TestErrorWrapping checks the kind, the cause and the message of every
// error a method returns, and that each is wrapped exactly once.
func TestErrorWrapping(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "runs.db"))
	ctx := t.Context()
	mustOK := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	mustOK(s.Create(ctx, svc.RunRecord{RunID: "done", Target: "echo", Kind: "agent"}))
	mustOK(s.SetState(ctx, "done", svc.RunRunning, "", nil))
	mustOK(s.SetState(ctx, "done", svc.RunCompleted, "", nil))
	mustOK(s.Create(ctx, svc.RunRecord{RunID: "live", Target: "echo", Kind: "agent"}))
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	expired, cancel2 := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	defer cancel2()

	appendErr := func(ctx context.Context, id string) error {
		_, err := s.Append(ctx, id, svc.RunEvent{Type: svc.RunAgentStarted})
		return err
	}
	tests := []struct {
		name  string
		err   error
		kind  svc.Kind
		is    error    // a cause or sentinel the error must match
		words []string // substrings of the message
	}{
		{"unknown Get", func() error { _, err := s.Get(ctx, "ghost"); return err }(), svc.KindRegistry, svc.ErrRegistry, []string{`unknown run "ghost"`}},
		{"unknown Append", appendErr(ctx, "ghost"), svc.KindRegistry, svc.ErrRegistry, []string{`unknown run "ghost"`}},
		{"unknown SetState", s.SetState(ctx, "ghost", svc.RunPending, "", nil), svc.KindRegistry, svc.ErrRegistry, []string{`"ghost"`}},
		{"duplicate", s.Create(ctx, svc.RunRecord{RunID: "done"}), svc.KindRunState, svc.ErrRunState, []string{`run "done" already exists`}},
		{"empty id", s.Create(ctx, svc.RunRecord{}), svc.KindSpecValidation, svc.ErrSpecValidation, []string{"empty run id"}},
		{"illegal move", s.SetState(ctx, "live", svc.RunCompleted, "", nil), svc.KindRunState, svc.ErrRunState, []string{`run "live" is pending`, `cannot move to "completed"`}},
		{"no move to pending", s.SetState(ctx, "live", svc.RunPending, "", nil), svc.KindRunState, svc.ErrRunState, []string{`run "live" is pending`, `cannot move to "pending"`}},
		{"terminal Append", appendErr(ctx, "done"), svc.KindRunState, svc.ErrRunState, []string{`run "done" is completed`, "no more events"}},
		{"terminal SetResult", s.SetResult(ctx, "done", json.RawMessage(`{}`)), svc.KindRunState, svc.ErrRunState, []string{"no more a result"}},
		{"terminal SetProgress", s.SetProgress(ctx, "done", svc.RunProgress{}), svc.KindRunState, svc.ErrRunState, []string{"no more progress"}},
		{"cancelled Get", func() error { _, err := s.Get(cancelled, "done"); return err }(), svc.KindCancelled, context.Canceled, []string{`get run "done"`}},
		{"cancelled Append", appendErr(cancelled, "live"), svc.KindCancelled, context.Canceled, []string{`append to run "live"`}},
		{"cancelled Create", s.Create(cancelled, svc.RunRecord{RunID: "new"}), svc.KindCancelled, context.Canceled, []string{`create run "new"`}},
		{"expired SetState", s.SetState(expired, "live", svc.RunRunning, "", nil), svc.KindTimeout, context.DeadlineExceeded, []string{`set state of run "live"`}},
		{"expired Events", func() error { _, err := s.Events(expired, "live", 0); return err }(), svc.KindTimeout, context.DeadlineExceeded, []string{`read events of run "live"`}},
		{"expired Interrupt", func() error { _, err := s.Interrupt(expired); return err }(), svc.KindTimeout, context.DeadlineExceeded, []string{"interrupt runs"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			checkErr(t, tc.err, tc.kind, tc.is, tc.words...)
		})
	}
	// Nothing above changed the runs.
	if rec, err := s.Get(ctx, "live"); err != nil || rec.State != svc.RunPending {
		t.Errorf("live run after refused calls: %+v, %v", rec, err)
	}
	if _, err := s.Get(ctx, "new"); !errors.Is(err, svc.ErrRegistry) {
		t.Errorf("a cancelled Create stored its run: %v", err)
	}

	// Every method of a closed store is a ShuttingDownError naming the file.
	mustOK(s.Close())
	closed := map[string]error{
		"Create":      s.Create(ctx, svc.RunRecord{RunID: "x"}),
		"Get":         func() error { _, err := s.Get(ctx, "done"); return err }(),
		"SetState":    s.SetState(ctx, "live", svc.RunRunning, "", nil),
		"SetProgress": s.SetProgress(ctx, "live", svc.RunProgress{}),
		"SetResult":   s.SetResult(ctx, "live", nil),
		"Append":      appendErr(ctx, "live"),
		"Events":      func() error { _, err := s.Events(ctx, "done", 0); return err }(),
		"Stream":      func() error { _, err := s.Stream(ctx, "done", 0); return err }(),
		"Interrupt":   func() error { _, err := s.Interrupt(ctx); return err }(),
	}
	for name, err := range closed {
		t.Run("closed "+name, func(t *testing.T) {
			checkErr(t, err, svc.KindShuttingDown, svc.ErrShuttingDown, "is closed", strconv.Quote(s.Path()))
		})
	}
}

func checkErr(t *testing.T, err error, kind svc.Kind, is error, words ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("err = nil, want a %s", kind)
	}
	if got := svc.KindOf(err); got != kind {
		t.Errorf("kind = %q, want %q (%v)", got, kind, err)
	}
	if !errors.Is(err, is) {
		t.Errorf("%v does not match %v", err, is)
	}
	msg := err.Error()
	switch {
	case kind == svc.KindRegistry:
		// An unknown run is an answer users read (a 404 of /runs/ID/...):
		// the same words from every store, no package name (storetest).
		if strings.Contains(msg, "sqlitestore") {
			t.Errorf("message %q: an unknown run names no store", msg)
		}
	case !strings.HasPrefix(msg, "sqlitestore: ") || strings.Count(msg, "sqlitestore:") != 1:
		t.Errorf("message %q: want exactly one sqlitestore: prefix", msg)
	}
	for _, w := range words {
		if !strings.Contains(msg, w) {
			t.Errorf("message %q does not say %q", msg, w)
		}
	}
}

// TestWAL checks the file is in WAL mode, so readers never wait for the
// writer.
func TestWAL(t *testing.T) {
	path := filepath.Join(t.TempDir(), "runs.db")
	s := open(t, path)
	if err := s.Create(t.Context(), svc.RunRecord{RunID: "r", Target: "t", Kind: "agent"}); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var mode string
	if err := db.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("journal_mode = %q, %v; want wal", mode, err)
	}
	var tables int
	if err := db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN ('runs', 'run_events')`).Scan(&tables); err != nil || tables != 2 {
		t.Fatalf("found %d of the tables runs and run_events (%v)", tables, err)
	}
}

// TestTwoStoresOneFile stands in for two processes sharing a file: the state
// machine holds across them, their appends interleave without clashing, and
// a stream in one follows the other's writes through the poll fallback.
func TestTwoStoresOneFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "runs.db")
	a, b := open(t, path), open(t, path)
	ctx := t.Context()
	if err := a.Create(ctx, svc.RunRecord{RunID: "r", Target: "t", Kind: "group"}); err != nil {
		t.Fatal(err)
	}
	if err := b.Create(ctx, svc.RunRecord{RunID: "r", Target: "t", Kind: "group"}); !errors.Is(err, svc.ErrRunState) {
		t.Fatalf("duplicate Create through the other store: %v, want a RunStateError", err)
	}
	if err := b.SetState(ctx, "r", svc.RunRunning, "", nil); err != nil {
		t.Fatal(err)
	}
	ch, err := a.Stream(ctx, "r", 0)
	if err != nil {
		t.Fatal(err)
	}

	// Both stores append at once: the sequence stays gapless and unique.
	const each = 40
	var wg sync.WaitGroup
	for _, s := range []*sqlitestore.Store{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				if _, err := s.Append(ctx, "r", svc.RunEvent{Type: svc.RunAgentStarted, Agent: s.Path()}); err != nil {
					t.Errorf("Append: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	// b ends the run; a's stream sees it by polling, as a's notifier was
	// never told.
	if err := b.SetState(ctx, "r", svc.RunCompleted, "", &svc.RunEvent{Type: svc.RunGroupCompleted}); err != nil {
		t.Fatal(err)
	}
	var seqs []int64
	timeout := time.After(storetest.Wait)
	for done := false; !done; {
		select {
		case ev, ok := <-ch:
			if !ok {
				done = true
				break
			}
			seqs = append(seqs, ev.Seq)
		case <-timeout:
			t.Fatalf("stream still open after %v with %d events", storetest.Wait, len(seqs))
		}
	}
	if len(seqs) != 2*each+1 {
		t.Fatalf("stream delivered %d events, want %d", len(seqs), 2*each+1)
	}
	for i, seq := range seqs {
		if seq != int64(i+1) {
			t.Fatalf("stream event %d has seq %d", i, seq)
		}
	}
	// The terminal state set through b binds a.
	if _, err := a.Append(ctx, "r", svc.RunEvent{Type: svc.RunAgentStarted}); !errors.Is(err, svc.ErrRunState) {
		t.Fatalf("Append through a after b completed the run: %v, want a RunStateError", err)
	}
}

// benchStore opens a store in a new file for a benchmark, closed when it
// ends.
func benchStore(b *testing.B) (*sqlitestore.Store, context.Context) {
	s, err := sqlitestore.Open(filepath.Join(b.TempDir(), "runs.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s, context.Background()
}

// BenchmarkAppend measures sequential appends to one run.
func BenchmarkAppend(b *testing.B) {
	s, ctx := benchStore(b)
	if err := s.Create(ctx, svc.RunRecord{RunID: "r", Target: "t", Kind: "agent"}); err != nil {
		b.Fatal(err)
	}
	ev := svc.RunEvent{Type: svc.RunAgentStarted, Agent: "writer", TaskID: "t1"}
	for b.Loop() {
		if _, err := s.Append(ctx, "r", ev); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "appends/s")
}

// BenchmarkAppendParallel measures appends from many goroutines, each to
// its own run, as concurrent runs do.
func BenchmarkAppendParallel(b *testing.B) {
	s, ctx := benchStore(b)
	var next atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		id := fmt.Sprint("r", next.Add(1))
		if err := s.Create(ctx, svc.RunRecord{RunID: id, Target: "t", Kind: "agent"}); err != nil {
			b.Error(err)
			return
		}
		ev := svc.RunEvent{Type: svc.RunAgentStarted, Agent: "writer", TaskID: "t1"}
		for pb.Next() {
			if _, err := s.Append(ctx, id, ev); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "appends/s")
}

// BenchmarkAppendStepsParallel measures step appends from many goroutines,
// each to its own runs (a new one every 64 steps, as a run records a few),
// with a model response's worth of data, beside BenchmarkAppendParallel's
// events: recording a run's steps is paid per model call, tool call and
// group node.
func BenchmarkAppendStepsParallel(b *testing.B) {
	s, ctx := benchStore(b)
	var next atomic.Int64
	data := []byte(`{"response":{"text":"` + strings.Repeat("word ", 80) + `"},"usage":{"input_tokens":120,"output_tokens":80}}`)
	b.RunParallel(func(pb *testing.PB) {
		var id string
		for i := 0; pb.Next(); i++ {
			if i%64 == 0 {
				id = fmt.Sprint("r", next.Add(1))
				if err := s.Create(ctx, svc.RunRecord{RunID: id, Target: "t", Kind: "agent"}); err != nil {
					b.Error(err)
					return
				}
			}
			if _, err := s.AppendSteps(ctx, id, svc.RunStep{Kind: svc.StepModelCall, Key: fmt.Sprint("a#", i%64), Data: data}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "steps/s")
}

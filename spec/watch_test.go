package spec

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/svc-dev/svc"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// reload is one call of a Watcher's callback.
type reload struct {
	set *Set
	err error
}

// watchTree starts a watcher on root/specs with fast polling and returns
// the channel its callbacks arrive on. It stops when the test ends.
func watchTree(t *testing.T, root string, cfg WatchConfig) (*Watcher, <-chan reload) {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = filepath.Join(root, "specs")
	}
	if cfg.Interval == 0 {
		cfg.Interval = 10 * time.Millisecond
	}
	if cfg.Debounce == 0 {
		// At least one quiet poll after a change: the smallest debounce.
		cfg.Debounce = time.Nanosecond
	}
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan reload, 16)
	w, err := Watch(ctx, cfg, func(s *Set, err error) { ch <- reload{s, err} })
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		w.Wait()
	})
	return w, ch
}

func next(t *testing.T, ch <-chan reload) reload {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no reload within 10s")
		return reload{}
	}
}

// quiet waits until the watcher has polled enough times to have reloaded
// after anything written before the call, and fails if it did.
func quiet(t *testing.T, w *Watcher, ch <-chan reload) {
	t.Helper()
	// A poll under way may predate the write; the next one sees it, the
	// one after reloads (one-poll debounce), plus one for slack.
	target := w.p.polls.Load() + 4
	deadline := time.Now().Add(10 * time.Second)
	for w.p.polls.Load() < target {
		if time.Now().After(deadline) {
			t.Fatal("the watcher stopped polling")
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case r := <-ch:
		t.Fatalf("unexpected reload: %+v", r)
	default:
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

const outputAgent = "version: 1\nmodel: test:echo\nmodel_settings: {output: %s}\n"

func agentWithOutput(out string) string { return strings.Replace(outputAgent, "%s", out, 1) }

func outputOf(t *testing.T, s *Set, name string) any {
	t.Helper()
	for _, a := range s.Agents {
		if a.Name == name {
			return a.ModelSettings["output"]
		}
	}
	t.Fatalf("no agent %s in %+v", name, s.Agents)
	return nil
}

func TestWatchReloadsOnChange(t *testing.T) {
	root := t.TempDir()
	specs := filepath.Join(root, "specs")
	write(t, filepath.Join(specs, "agents", "a.yaml"), agentWithOutput("one"))
	w, ch := watchTree(t, root, WatchConfig{})

	quiet(t, w, ch) // nothing changed yet: no reload

	write(t, filepath.Join(specs, "agents", "a.yaml"), agentWithOutput("two"))
	r := next(t, ch)
	if r.err != nil || outputOf(t, r.set, "a") != "two" {
		t.Fatalf("after an edit: %+v", r)
	}

	// A new group file (a new directory too) and a .yml agent.
	write(t, filepath.Join(specs, "agents", "b.yml"), agentWithOutput("bee"))
	write(t, filepath.Join(specs, "groups", "g.yaml"), "version: 1\nnodes: {x: {agent: a}, y: {agent: b}}\nedges: [{from: x, to: y}]\n")
	r = next(t, ch)
	if r.err != nil || len(r.set.Agents) != 2 || len(r.set.Groups) != 1 || r.set.Groups[0].Name != "g" {
		t.Fatalf("after adding files: %+v", r)
	}

	// A removal is a change too.
	if err := os.Remove(filepath.Join(specs, "groups", "g.yaml")); err != nil {
		t.Fatal(err)
	}
	if r = next(t, ch); r.err != nil || len(r.set.Groups) != 0 {
		t.Fatalf("after removing the group: %+v", r)
	}
}

// TestWatchSameSizeEdit changes one byte, keeping the size, right after
// the previous write: a file system clock that has not ticked in between
// gives both writes one mtime, and only the content tells them apart.
func TestWatchSameSizeEdit(t *testing.T) {
	root := t.TempDir()
	file := filepath.Join(root, "specs", "agents", "a.yaml")
	write(t, file, agentWithOutput("1"))
	_, ch := watchTree(t, root, WatchConfig{})
	write(t, file, agentWithOutput("2"))
	if r := next(t, ch); r.err != nil || outputOf(t, r.set, "a") != int64(2) {
		t.Fatalf("%+v", r)
	}
	info, _ := os.Stat(file)
	write(t, file, agentWithOutput("3"))
	_ = os.Chtimes(file, info.ModTime(), info.ModTime()) // same mtime, same size
	if r := next(t, ch); r.err != nil || outputOf(t, r.set, "a") != int64(3) {
		t.Fatalf("%+v", r)
	}
}

func TestWatchDebounce(t *testing.T) {
	root := t.TempDir()
	specs := filepath.Join(root, "specs")
	write(t, filepath.Join(specs, "agents", "a.yaml"), agentWithOutput("0"))
	// Polls every 10ms; a reload waits for 500ms without changes, far
	// longer than the burst below takes.
	_, ch := watchTree(t, root, WatchConfig{Debounce: 500 * time.Millisecond})

	// An editor's save: truncate, write in parts, rename a backup away.
	file := filepath.Join(specs, "agents", "a.yaml")
	write(t, file, "")
	write(t, file, "version: 1\nmodel: test:echo\n")
	write(t, file, agentWithOutput("5"))
	write(t, filepath.Join(specs, "agents", "a.yaml~"), "backup")
	write(t, filepath.Join(specs, "agents", "b.yaml"), agentWithOutput("bee"))

	r := next(t, ch)
	if r.err != nil || outputOf(t, r.set, "a") != int64(5) || len(r.set.Agents) != 2 {
		t.Fatalf("the one reload after the burst: %+v", r)
	}
	// Had the burst caused more than one reload, the next one in the
	// channel would be one of those rather than this change's.
	write(t, file, agentWithOutput("6"))
	if r := next(t, ch); r.err != nil || outputOf(t, r.set, "a") != int64(6) {
		t.Fatalf("the reload after the next change: %+v", r)
	}
}

func TestWatchIncludeExclude(t *testing.T) {
	root := t.TempDir()
	specs := filepath.Join(root, "specs")
	extra := filepath.Join(root, "extra")
	write(t, filepath.Join(specs, "agents", "a.yaml"), agentWithOutput("1"))
	w, ch := watchTree(t, root, WatchConfig{
		Dirs:    []string{extra}, // does not exist yet
		Include: []string{"*.yaml", "schemas/*.json"},
		Exclude: []string{"scratch.yaml", "drafts/*"},
	})

	for _, f := range []string{
		filepath.Join(specs, "scratch.yaml"),          // excluded by base name
		filepath.Join(extra, "drafts", "g.yaml"),      // excluded by relative path
		filepath.Join(extra, "notes.txt"),             // not included
		filepath.Join(extra, "other", "x.json"),       // not included: only schemas/*.json
		filepath.Join(specs, "agents", ".a.yaml.swp"), // dot files never count
	} {
		write(t, f, "x")
	}
	quiet(t, w, ch)

	write(t, filepath.Join(extra, "schemas", "s.json"), "{}")
	if r := next(t, ch); r.err != nil || outputOf(t, r.set, "a") != int64(1) {
		t.Fatalf("%+v", r)
	}
	write(t, filepath.Join(extra, "keep.yaml"), "x")
	if r := next(t, ch); r.err != nil {
		t.Fatalf("%+v", r)
	}
}

func TestWatchBadFile(t *testing.T) {
	root := t.TempDir()
	specs := filepath.Join(root, "specs")
	file := filepath.Join(specs, "agents", "a.yaml")
	write(t, file, agentWithOutput("1"))
	_, ch := watchTree(t, root, WatchConfig{})

	write(t, file, "version: 1\nmodel: test:echo\nmodle_settings: {}\n")
	r := next(t, ch)
	if r.set != nil || r.err == nil {
		t.Fatalf("a bad file gave %+v", r)
	}
	if want := file + ":3: modle_settings: "; !strings.HasPrefix(r.err.Error(), want) || !errors.Is(r.err, svc.ErrSpecValidation) {
		t.Errorf("error %q, want it to start %q", r.err, want)
	}
	write(t, filepath.Join(specs, "groups", "g.yaml"), "version: 1\nnodes: {x: {agent: nobody}}\n")
	if r = next(t, ch); r.set != nil || !errors.Is(r.err, svc.ErrTopology) {
		t.Fatalf("a bad group gave %+v", r)
	}
	if err := os.RemoveAll(filepath.Join(specs, "groups")); err != nil {
		t.Fatal(err)
	}
	write(t, file, agentWithOutput("2"))
	if r = next(t, ch); r.err != nil || outputOf(t, r.set, "a") != int64(2) {
		t.Fatalf("after the fix: %+v", r)
	}

	// The specs directory going away is a (root) error too.
	if err := os.RemoveAll(specs); err != nil {
		t.Fatal(err)
	}
	if r = next(t, ch); !IsRootError(r.err) {
		t.Fatalf("after removing the directory: %+v", r)
	}
}

func TestWatchStopsWithContext(t *testing.T) {
	root := t.TempDir()
	write(t, filepath.Join(root, "specs", "agents", "a.yaml"), agentWithOutput("1"))
	ctx, cancel := context.WithCancel(context.Background())
	w, err := Watch(ctx, WatchConfig{Dir: filepath.Join(root, "specs"), Interval: time.Millisecond},
		func(*Set, error) { t.Error("reload without a change") })
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.Done():
		t.Fatal("stopped before its context ended")
	default:
	}
	cancel()
	w.Wait() // goleak in TestMain checks the goroutine is gone
	select {
	case <-w.Done():
	default:
		t.Fatal("Done not closed after Wait")
	}
}

func TestWatchConfigErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := Watch(ctx, WatchConfig{}, func(*Set, error) {}); err == nil {
		t.Error("Watch without a directory")
	}
	for _, cfg := range []WatchConfig{
		{Dir: ".", Include: []string{"[a-"}},
		{Dir: ".", Exclude: []string{"*.yaml", "\\"}},
	} {
		if _, err := Watch(ctx, cfg, func(*Set, error) {}); err == nil || !strings.Contains(err.Error(), "pattern") {
			t.Errorf("%+v: err = %v, want a bad pattern error", cfg, err)
		}
	}
}

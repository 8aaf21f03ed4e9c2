package spec

import (
	"context"
	"errors"
	"io/fs"
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

// write replaces path's content in one step (a dot file renamed over it),
// so that no poll sees it half written: the tests are about the changes
// they make, not about the writes in between.
func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// nextSet waits for the reload that hands on a Set. Reloads before it
// must be errors (a test that makes two changes may see the tree between
// them); a Set is never one of those intermediate states.
func nextSet(t *testing.T, ch <-chan reload) *Set {
	t.Helper()
	for {
		if r := next(t, ch); r.err == nil {
			return r.set
		}
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
	// Two changes: the reload between them (if a poll falls there) is
	// still an error; the one after both is the fixed set.
	if err := os.RemoveAll(filepath.Join(specs, "groups")); err != nil {
		t.Fatal(err)
	}
	write(t, file, agentWithOutput("2"))
	if set := nextSet(t, ch); outputOf(t, set, "a") != int64(2) || len(set.Groups) != 0 {
		t.Fatalf("after the fix: %+v", set)
	}

	// The specs directory going away is a (root) error. RemoveAll takes
	// the tree apart a file at a time, and a poll can see it at any
	// stage: every reload on the way is an error (an empty tree is never
	// handed on as a Set), and the last one is the root error.
	if err := os.RemoveAll(specs); err != nil {
		t.Fatal(err)
	}
	for {
		r := next(t, ch)
		if r.set != nil {
			t.Fatalf("a half-removed tree was handed on: %+v", r.set)
		}
		if IsRootError(r.err) {
			break
		}
		if !errors.Is(r.err, ErrEmptied) {
			t.Fatalf("while the directory went away: %v", r.err)
		}
	}
}

// stagedPoller is a poller of dir driven by hand: each step is one poll at
// a time a debounce after the last, so the test decides what every poll
// sees, with no timing involved.
type stagedPoller struct {
	t    *testing.T
	p    *poller
	last snapshot
	at   time.Time
	// changed is when the change being debounced was seen.
	changed time.Time
	got     []reload
}

func newStagedPoller(t *testing.T, dir string) *stagedPoller {
	cfg := WatchConfig{Dir: dir, Include: DefaultWatchInclude, Interval: time.Second, Debounce: time.Second}
	sp := &stagedPoller{t: t, p: newPoller(cfg), at: time.Now()}
	sp.last = sp.p.snapshot(sp.at)
	return sp
}

// poll runs one poll and returns the reloads it handed on.
func (sp *stagedPoller) poll() []reload {
	sp.t.Helper()
	sp.at = sp.at.Add(time.Second)
	before := len(sp.got)
	if !sp.p.poll(context.Background(), sp.at, &sp.last, &sp.changed, func(s *Set, err error) {
		sp.got = append(sp.got, reload{s, err})
	}) {
		sp.t.Fatal("poll stopped")
	}
	return sp.got[before:]
}

// settle polls until the change on disk has been seen and debounced, and
// returns the one reload that followed.
func (sp *stagedPoller) settle() reload {
	sp.t.Helper()
	var got []reload
	for range 3 { // see the change, wait out the debounce, reload
		got = append(got, sp.poll()...)
	}
	if len(got) != 1 {
		sp.t.Fatalf("%d reloads after one change, want 1: %+v", len(got), got)
	}
	return got[0]
}

// A tree that lost its agents (deleted, or caught half-deleted) never
// replaces the specs in use: the reload is an ErrEmptied error, and the
// next whole tree is handed on as usual.
func TestWatchKeepsSpecsWhenTreeEmptied(t *testing.T) {
	specs := filepath.Join(t.TempDir(), "specs")
	a, b := filepath.Join(specs, "agents", "a.yaml"), filepath.Join(specs, "agents", "b.yaml")
	write(t, a, agentWithOutput("1"))
	write(t, b, agentWithOutput("2"))
	sp := newStagedPoller(t, specs)

	// Every agent gone, the directories left: refused, against the two
	// files the watcher found when it started.
	for _, f := range []string{a, b} {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	r := sp.settle()
	if r.set != nil || !errors.Is(r.err, ErrEmptied) || !errors.Is(r.err, svc.ErrSpecValidation) {
		t.Fatalf("an emptied tree gave %+v, want an ErrEmptied SpecValidationError", r)
	}
	if want := specs + ": "; !strings.HasPrefix(r.err.Error(), want) || !strings.Contains(r.err.Error(), "2 agents") {
		t.Errorf("error %q, want it to name %s and the 2 agents in use", r.err, specs)
	}

	// A whole tree again is handed on.
	write(t, a, agentWithOutput("3"))
	if r = sp.settle(); r.err != nil || len(r.set.Agents) != 1 || outputOf(t, r.set, "a") != int64(3) {
		t.Fatalf("after restoring an agent: %+v", r)
	}

	// Agents gone, a group left (of agents registered from Go): the
	// agents in use would all be unloaded, so refused too.
	sp.p.cfg.Env.Agents = []string{"goagent"}
	write(t, filepath.Join(specs, "groups", "g.yaml"), "version: 1\nnodes: {x: {agent: goagent}}\n")
	if r = sp.settle(); r.err != nil || len(r.set.Groups) != 1 {
		t.Fatalf("after adding a group: %+v", r)
	}
	if err := os.Remove(a); err != nil {
		t.Fatal(err)
	}
	if r = sp.settle(); r.set != nil || !errors.Is(r.err, ErrEmptied) {
		t.Fatalf("a tree without its agents gave %+v, want ErrEmptied", r)
	}

	// Removing the directory itself is a change (there are no files left
	// to change), reported as the root error it is.
	if err := os.RemoveAll(specs); err != nil {
		t.Fatal(err)
	}
	if r = sp.settle(); r.set != nil || !IsRootError(r.err) {
		t.Fatalf("after removing the directory: %+v", r)
	}
}

// A watcher started on an empty directory has no specs in use to
// protect: what appears in it is handed on.
func TestWatchStartsEmpty(t *testing.T) {
	specs := filepath.Join(t.TempDir(), "specs")
	if err := os.MkdirAll(specs, 0o755); err != nil {
		t.Fatal(err)
	}
	sp := newStagedPoller(t, specs)
	write(t, filepath.Join(specs, "agents", "a.yaml"), agentWithOutput("1"))
	if r := sp.settle(); r.err != nil || len(r.set.Agents) != 1 {
		t.Fatalf("the first agent in an empty directory: %+v", r)
	}
}

// A load torn by a change under it (a file the watcher saw was gone when
// Load read it) is not reported: the watcher loads again once the tree
// has settled. A missing file the watcher never saw (a dangling symlink,
// say) is an error like any other.
func TestWatchRetriesTornLoad(t *testing.T) {
	specs := filepath.Join(t.TempDir(), "specs")
	a := filepath.Join(specs, "agents", "a.yaml")
	write(t, a, agentWithOutput("1"))
	sp := newStagedPoller(t, specs)

	loads := 0
	sp.p.load = func(dir string, env Env) (*Set, error) {
		loads++
		if loads == 1 {
			// As Load reports a listed file that vanished before it was read.
			return nil, errors.Join(&Error{File: a, Msg: "no such file or directory", cause: fs.ErrNotExist})
		}
		return Load(dir, env)
	}
	write(t, a, agentWithOutput("2"))
	sp.poll() // sees the change
	if got := sp.poll(); len(got) != 0 || loads != 1 {
		t.Fatalf("a torn load was handed on: %+v (loads %d)", got, loads)
	}
	// Nothing changed since; the watcher still loads again, after the
	// debounce, and hands that on.
	var got []reload
	for range 2 {
		got = append(got, sp.poll()...)
	}
	if len(got) != 1 || got[0].err != nil || outputOf(t, got[0].set, "a") != int64(2) || loads != 2 {
		t.Fatalf("after a torn load: %+v (loads %d)", got, loads)
	}

	// A dangling symlink: listed, never in a snapshot, reported.
	if err := os.Symlink(filepath.Join(specs, "nowhere.yaml"), filepath.Join(specs, "agents", "b.yaml")); err != nil {
		t.Fatal(err)
	}
	write(t, a, agentWithOutput("3"))
	r := sp.settle()
	if r.set != nil || !errors.Is(r.err, fs.ErrNotExist) || !strings.Contains(r.err.Error(), "b.yaml") {
		t.Fatalf("a dangling symlink gave %+v, want its error", r)
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

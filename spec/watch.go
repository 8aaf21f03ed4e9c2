package spec

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"
)

// Defaults of WatchConfig.
const (
	DefaultWatchInterval = 500 * time.Millisecond
	DefaultWatchDebounce = 300 * time.Millisecond
)

// DefaultWatchInclude are the files a Watcher looks at when
// WatchConfig.Include is empty.
var DefaultWatchInclude = []string{"*.yaml", "*.yml"}

// WatchConfig says what a Watcher watches and what it loads.
type WatchConfig struct {
	// Dir is the specs directory: always watched (with everything under
	// it), and what is loaded, whole, after a change.
	Dir string
	// Env is what the loaded specs are checked against.
	Env Env
	// Dirs are more directories to watch (schemas kept elsewhere, say). A
	// change in them reloads Dir too. A directory that does not exist yet
	// is watched for appearing.
	Dirs []string
	// Include are glob patterns (filepath.Match) for the files that count,
	// matched against the base name and against the path relative to the
	// watched directory (slash-separated); DefaultWatchInclude when empty.
	Include []string
	// Exclude are glob patterns, matched the same way, for files that do
	// not count even though Include matches them.
	Exclude []string
	// Interval is how often the directories are polled;
	// DefaultWatchInterval when zero.
	Interval time.Duration
	// Debounce is how long the files must stay unchanged after a change
	// before they are loaded, so that an editor's save in several writes,
	// or a checkout of several files, is one reload; DefaultWatchDebounce
	// when zero. The effective quiet time is at least one Interval.
	Debounce time.Duration
}

// Watcher polls spec directories and reloads the specs when a file
// changes. It is stat-based (size, modification time, mode), so it works
// on every file system, network and container mounts included, without
// notification APIs.
type Watcher struct {
	done chan struct{}
	p    *poller
}

// Wait blocks until the watcher has stopped: after its context ended and
// any callback in progress returned.
func (w *Watcher) Wait() { <-w.done }

// Done is closed once the watcher has stopped.
func (w *Watcher) Done() <-chan struct{} { return w.done }

// Watch starts watching cfg.Dir and cfg.Dirs, and returns once it has
// taken stock of the files there, so that every change after Watch returns
// is seen; the caller loads the initial specs itself. After each change
// (once the files have stayed unchanged for cfg.Debounce) it loads cfg.Dir
// with Load and calls onChange with the new Set, or with nil and Load's
// error, which names every file and line at fault. onChange runs on the
// watcher's goroutine, one call at a time, and is not called once ctx has
// ended. The watcher stops when ctx ends; Wait waits for that.
//
// A Set handed to onChange is always a whole, settled tree, which the
// caller may put in place of the specs it runs. Two kinds of load are
// never handed on as a Set:
//
//   - A torn load: a file the watcher had seen (in the snapshot the reload
//     was decided on) was gone by the time Load read it, because the tree
//     was being changed (a checkout, an rm -r) while it was read. Nothing
//     is reported; the watcher loads again once the tree has settled.
//   - An emptied tree: the load found no agents where the specs in use had
//     some, or no agents and no groups where they had either. That is
//     what a directory caught half-deleted looks like, and replacing the
//     registry with it would unregister every agent, so onChange gets
//     (nil, err) instead, with errors.Is(err, ErrEmptied); the specs in
//     use stay in use. "In use" is the last Set handed to onChange, and
//     before the first, the spec files Watch found in cfg.Dir when it
//     started. A directory with no specs at all is refused by Load too
//     (ErrNoSpecs) unless Env.Agents has some.
//
// Its error is for a bad glob pattern or an empty cfg.Dir.
func Watch(ctx context.Context, cfg WatchConfig, onChange func(*Set, error)) (*Watcher, error) {
	if cfg.Dir == "" {
		return nil, errors.New("spec: Watch needs a specs directory")
	}
	if len(cfg.Include) == 0 {
		cfg.Include = DefaultWatchInclude
	}
	for _, p := range append(append([]string(nil), cfg.Include...), cfg.Exclude...) {
		if _, err := filepath.Match(p, ""); err != nil {
			return nil, fmt.Errorf("spec: watch pattern %q: %w", p, err)
		}
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultWatchInterval
	}
	if cfg.Debounce <= 0 {
		cfg.Debounce = DefaultWatchDebounce
	}
	p := newPoller(cfg)
	w := &Watcher{done: make(chan struct{}), p: p}
	last := p.snapshot(time.Now())
	go func() {
		defer close(w.done)
		p.run(ctx, last, onChange)
	}()
	return w, nil
}

// ErrEmptied is what onChange gets, wrapped in an *Error naming the specs
// directory, when a reload finds the tree emptied (see Watch): the specs
// in use are kept.
var ErrEmptied = errors.New("no agents or groups left where there were some: keeping the specs in use")

// poller is the state of one Watcher's goroutine.
type poller struct {
	cfg  WatchConfig
	dirs []string
	// load is Load; tests swap it to stage what a load finds.
	load func(dir string, env Env) (*Set, error)
	// agents and groups count the specs in use: the last Set handed on,
	// or the spec files in cfg.Dir when the watcher started.
	agents, groups int
	// polls counts finished polls, reloads included: tests wait on it to
	// know the watcher has seen a change it should ignore.
	polls atomic.Int64
}

func newPoller(cfg WatchConfig) *poller {
	p := &poller{cfg: cfg, dirs: append([]string{cfg.Dir}, cfg.Dirs...), load: Load}
	// What the caller loaded itself, as far as file names tell.
	var sc scanResult
	p.agents = len(sc.specFiles(filepath.Join(cfg.Dir, AgentsDir)))
	p.groups = len(sc.specFiles(filepath.Join(cfg.Dir, GroupsDir)))
	return p
}

func (p *poller) run(ctx context.Context, last snapshot, onChange func(*Set, error)) {
	t := time.NewTicker(p.cfg.Interval)
	defer t.Stop()
	var changedAt time.Time // of the latest change not yet loaded; zero when none
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if !p.poll(ctx, now, &last, &changedAt, onChange) {
				return
			}
			p.polls.Add(1)
		}
	}
}

// poll takes one look at the files: it notes a change, or reloads once a
// change has settled. It returns false when ctx ended during a reload.
func (p *poller) poll(ctx context.Context, now time.Time, last *snapshot, changedAt *time.Time, onChange func(*Set, error)) bool {
	cur := p.snapshot(now)
	if !cur.equal(*last) {
		*last, *changedAt = cur, now
		return true
	}
	if changedAt.IsZero() || now.Sub(*changedAt) < p.cfg.Debounce {
		return true
	}
	*changedAt = time.Time{}
	set, err := p.load(p.cfg.Dir, p.cfg.Env)
	if ctx.Err() != nil {
		return false
	}
	switch {
	case err != nil && torn(err, *last):
		// Load again once the tree has settled: the next poll sees the
		// file gone and starts the debounce over, and if it somehow does
		// not, this retries after one more debounce.
		*changedAt = now
		return true
	case errors.Is(err, ErrNoSpecs) && p.agents+p.groups > 0:
		err = &Error{File: p.cfg.Dir, cause: ErrEmptied, Msg: fmt.Sprintf(
			"%v (the specs in use have %d agents and %d groups; the directory now has none)",
			ErrEmptied, p.agents, p.groups)}
	case err == nil && p.emptied(set):
		err = &Error{File: p.cfg.Dir, cause: ErrEmptied, Msg: fmt.Sprintf(
			"%v (the specs in use have %d agents and %d groups; the directory now has %d and %d)",
			ErrEmptied, p.agents, p.groups, len(set.Agents), len(set.Groups))}
		set = nil
	case err == nil:
		p.agents, p.groups = len(set.Agents), len(set.Groups)
	}
	onChange(set, err)
	return true
}

// emptied reports whether set would unload every agent, or every spec,
// of those in use.
func (p *poller) emptied(set *Set) bool {
	if p.agents > 0 && len(set.Agents) == 0 {
		return true
	}
	return p.agents+p.groups > 0 && len(set.Agents)+len(set.Groups) == 0
}

// torn reports whether err says a file that snap lists could not be found
// when Load read it: the tree changed under the load.
func torn(err error, snap snapshot) bool {
	switch e := err.(type) {
	case *Error:
		_, seen := snap[e.File]
		return seen && e.cause != nil && errors.Is(e.cause, fs.ErrNotExist)
	case interface{ Unwrap() []error }: // errors.Join
		for _, x := range e.Unwrap() {
			if torn(x, snap) {
				return true
			}
		}
	}
	return false
}

// stamp is what a poll knows about one file.
type stamp struct {
	size  int64
	mtime time.Time
	mode  fs.FileMode
	// sum is a hash of the content of a file modified so recently that
	// another write could follow within the file system's timestamp
	// granularity without changing size or mtime; 0 otherwise.
	sum uint64
}

// snapshot maps the path of every watched file to its stamp, and the
// specs directory, when it exists, under its path with a separator
// appended, to a stamp with only its mode: its going away is a change
// even when it holds no files (an emptied specs directory that is then
// removed must be reloaded again, to say so).
type snapshot map[string]stamp

// equal compares two snapshots file by file. Content hashes count only
// when both sides have one: a file that ages out of the racy window loses
// its hash without having changed.
func (s snapshot) equal(o snapshot) bool {
	if len(s) != len(o) {
		return false
	}
	for path, a := range s {
		b, ok := o[path]
		if !ok || a.size != b.size || !a.mtime.Equal(b.mtime) || a.mode != b.mode {
			return false
		}
		if a.sum != 0 && b.sum != 0 && a.sum != b.sum {
			return false
		}
	}
	return true
}

// racyWindow is how recent a modification must be for a poll to hash the
// file as well: coarse file system clocks (1 s on some, 2 s on FAT) can
// give two writes the same mtime, and same-size edits are common (a digit
// changed). Files older than that are compared by stat alone.
const racyWindow = 3 * time.Second

// snapshot stats every matching file under the watched directories. Files
// and directories it cannot read are left out: they show up as removed,
// and Load reports what is wrong with them if they are specs.
func (p *poller) snapshot(now time.Time) snapshot {
	s := snapshot{}
	if info, err := os.Stat(p.cfg.Dir); err == nil && info.IsDir() {
		s[p.cfg.Dir+string(filepath.Separator)] = stamp{mode: fs.ModeDir}
	}
	for _, dir := range p.dirs {
		_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil // missing or unreadable: nothing to watch there
			}
			name := d.Name()
			if path != dir && strings.HasPrefix(name, ".") {
				// .git, .idea, editor swap and lock files.
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
			if d.IsDir() {
				return nil
			}
			rel, err := filepath.Rel(dir, path)
			if err != nil || !p.matches(name, filepath.ToSlash(rel)) {
				return nil
			}
			// Stat follows symlinks: a spec linked in from elsewhere
			// changes when its target does.
			info, err := os.Stat(path)
			if err != nil || !info.Mode().IsRegular() {
				return nil
			}
			st := stamp{size: info.Size(), mtime: info.ModTime(), mode: info.Mode()}
			if now.Sub(st.mtime) < racyWindow {
				st.sum = hashFile(path)
			}
			s[path] = st
			return nil
		})
	}
	return s
}

// matches applies the include and exclude patterns to a file's base name
// and its path relative to the watched directory.
func (p *poller) matches(base, rel string) bool {
	match := func(patterns []string) bool {
		for _, pat := range patterns {
			if ok, _ := filepath.Match(pat, base); ok {
				return true
			}
			if ok, _ := filepath.Match(pat, rel); ok {
				return true
			}
		}
		return false
	}
	return match(p.cfg.Include) && !match(p.cfg.Exclude)
}

// hashFile hashes at most maxFileSize bytes of path; 1 when it cannot be
// read (0 means "not hashed").
func hashFile(path string) uint64 {
	f, err := os.Open(path)
	if err != nil {
		return 1
	}
	defer f.Close()
	h := fnv.New64a()
	if _, err := io.Copy(h, io.LimitReader(f, maxFileSize)); err != nil {
		return 1
	}
	// Never 0, which means "not hashed".
	return h.Sum64() | 1<<63
}

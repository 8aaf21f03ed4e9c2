package docs

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// root is the repository, the docs' commands' working directory.
const root = ".."

// block is one fenced code block of a Markdown file.
type block struct {
	file      string // relative to root
	start     int    // line index of the opening fence (0-based)
	end       int    // line index of the closing fence
	lang      string
	directive string // the text of a `<!-- doctest: ... -->` just above, trimmed
	lines     []string
}

var directiveRE = regexp.MustCompile(`^<!--\s*doctest:\s*(.*?)\s*-->$`)

// parseBlocks returns the fenced blocks of a Markdown text.
func parseBlocks(file string, text string) []block {
	lines := strings.Split(text, "\n")
	var out []block
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(l, "```") {
			continue
		}
		b := block{file: file, start: i, lang: strings.TrimSpace(strings.TrimPrefix(l, "```"))}
		for j := i - 1; j >= 0; j-- {
			p := strings.TrimSpace(lines[j])
			if p == "" {
				continue
			}
			if m := directiveRE.FindStringSubmatch(p); m != nil {
				b.directive = m[1]
			}
			break
		}
		j := i + 1
		for ; j < len(lines) && strings.TrimSpace(lines[j]) != "```"; j++ {
			b.lines = append(b.lines, lines[j])
		}
		b.end = j
		out = append(out, b)
		i = j
	}
	return out
}

// docFiles are the Markdown files whose shell blocks must be checked:
// README.md and docs/*.md.
func docFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := []string{"README.md"}
	for _, f := range files {
		rel, _ := filepath.Rel(root, f)
		out = append(out, rel)
	}
	return out
}

// repoMarkdown is every Markdown file git knows in the repository (and
// new ones not yet added).
func repoMarkdown(t *testing.T) []string {
	t.Helper()
	cmd := exec.Command("git", "ls-files", "--cached", "--others", "--exclude-standard", "*.md")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	return strings.Fields(string(out))
}

func readFile(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var shellLangs = map[string]bool{"sh": true, "bash": true, "shell": true, "console": true, "zsh": true}

// TestShellBlocksChecked: every shell block of README.md and docs/*.md is
// either a ```console block, whose commands TestDocCommands runs, or is
// marked `<!-- doctest: skip: why -->` with the reason it cannot run here;
// and a block marked `<!-- doctest: file PATH -->` is that file, verbatim.
func TestShellBlocksChecked(t *testing.T) {
	for _, f := range docFiles(t) {
		for _, b := range parseBlocks(f, readFile(t, f)) {
			d := b.directive
			switch {
			case strings.HasPrefix(d, "file "):
				path := strings.TrimSpace(strings.TrimPrefix(d, "file "))
				want := strings.TrimRight(readFile(t, path), "\n")
				if got := strings.Join(b.lines, "\n"); got != want {
					t.Errorf("%s:%d: the block is not %s as it is; copy the file into it", f, b.start+1, path)
				}
			case strings.HasPrefix(d, "skip"):
				if reason := strings.TrimSpace(strings.TrimLeft(strings.TrimPrefix(d, "skip"), ": ")); reason == "" {
					t.Errorf("%s:%d: doctest skip without a reason", f, b.start+1)
				}
			case d != "":
				t.Errorf("%s:%d: unknown doctest directive %q (want skip: REASON or file PATH)", f, b.start+1, d)
			case shellLangs[b.lang] && b.lang != "console":
				t.Errorf("%s:%d: ```%s block: make it ```console with `$ ` prompts and the answers, which TestDocCommands runs and diffs, or mark it <!-- doctest: skip: REASON -->", f, b.start+1, b.lang)
			}
		}
	}
}

var (
	linkRE   = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	tickRE   = regexp.MustCompile("`([A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.*{}-]+)+/?)`")
	outsides = []string{"DESIGN.md", "../shared", "/work/"}
	// notPaths look like paths under a top-level directory and are not:
	// the OTLP protocol names.
	notPaths = map[string]bool{"http/protobuf": true, "http/json": true}
)

// TestNoDeadFileReferences: every relative link of every Markdown file in
// the repository, and every `path/in/backticks` under a top-level
// directory of the repository, names a file or directory that exists;
// and no document cites a file outside the repository (the design notes
// live outside it: cite docs/architecture.md).
func TestNoDeadFileReferences(t *testing.T) {
	tops := map[string]bool{}
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			tops[e.Name()] = true
		}
	}
	for _, f := range repoMarkdown(t) {
		text := readFile(t, f)
		for i, line := range strings.Split(text, "\n") {
			at := func(format string, args ...any) {
				t.Errorf("%s:%d: "+format, append([]any{f, i + 1}, args...)...)
			}
			for _, o := range outsides {
				if strings.Contains(line, o) {
					at("cites %s, which is outside the repository (cite docs/architecture.md or a file in the repository)", o)
				}
			}
			for _, m := range linkRE.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "#") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				target, _, _ = strings.Cut(target, "#")
				p := filepath.Join(root, filepath.Dir(f), target)
				if rel, err := filepath.Rel(root, p); err != nil || strings.HasPrefix(rel, "..") {
					at("links %s, outside the repository", m[1])
				} else if _, err := os.Stat(p); err != nil {
					at("links %s, which does not exist", m[1])
				}
			}
			for _, m := range tickRE.FindAllStringSubmatch(line, -1) {
				path := m[1]
				first, _, _ := strings.Cut(path, "/")
				if !tops[first] || notPaths[path] || strings.ContainsAny(path, "*{}") {
					continue
				}
				if _, err := os.Stat(filepath.Join(root, path)); err != nil {
					at("names `%s`, which is not in the repository", path)
				}
			}
		}
	}
}

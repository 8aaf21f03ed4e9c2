package docs

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/svcproc"
)

var update = flag.Bool("update", false, "rewrite the answers of ```console blocks that differ from what the commands print")

// command is one `$ ` line of a ```console block (with its `\`
// continuation lines) and the answer shown under it.
type command struct {
	text     string
	line     int // of the `$ `, 0-based, in the file
	outStart int // first line of the answer
	outEnd   int // one past its last line
	want     string
}

// commands splits a ```console block: lines starting with `$ ` are
// commands, a line ending in `\` continues on the next, and every other
// line up to the next command is the answer (blank lines at its end are
// not part of it).
func commands(b block) []command {
	var cs []command
	for i := 0; i < len(b.lines); i++ {
		l := b.lines[i]
		if !strings.HasPrefix(l, "$ ") {
			if len(cs) == 0 {
				continue
			}
			c := &cs[len(cs)-1]
			c.outEnd = b.start + 1 + i + 1
			continue
		}
		c := command{text: strings.TrimPrefix(l, "$ "), line: b.start + 1 + i}
		for strings.HasSuffix(c.text, `\`) && i+1 < len(b.lines) {
			i++
			c.text += "\n" + b.lines[i]
		}
		c.outStart, c.outEnd = b.start+1+i+1, b.start+1+i+1
		cs = append(cs, c)
	}
	for k := range cs {
		c := &cs[k]
		rel := func(n int) int { return n - b.start - 1 }
		out := b.lines[rel(c.outStart):rel(c.outEnd)]
		for len(out) > 0 && strings.TrimSpace(out[len(out)-1]) == "" {
			out = out[:len(out)-1]
			c.outEnd--
		}
		c.want = strings.Join(out, "\n")
	}
	return cs
}

// Normalisation: what changes from run to run is replaced by a
// placeholder, in the answers shown and in those printed, before they are
// compared.
var normalisers = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`), "<id>"},
	{regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)`), "<time>"},
	{regexp.MustCompile(`("[a-z_0-9]*(_ms|_seconds|tokens[a-z_]*|_per_sec|_per_minute|p50|p95|p99|uptime[a-z_]*|error_rate)":\s*)-?[0-9.e+-]+`), "${1}<n>"},
	{regexp.MustCompile(`("(span_id|parent_span_id)":\s*)"[0-9a-f]{16}"`), `${1}"<span>"`},
	// Line breaks and the indentation after them: a long JSON answer is
	// shown wrapped.
	{regexp.MustCompile(`\s*\n\s*`), ""},
}

func normalise(s string) string {
	for _, n := range normalisers {
		s = n.re.ReplaceAllString(s, n.with)
	}
	return strings.TrimSpace(s)
}

// matches reports whether got is an answer of the shape want shows: equal
// once both are normalised, where `…` in want (and the blanks around it)
// stands for any text.
func matches(want, got string) bool {
	parts := regexp.MustCompile(`\s*…\s*`).Split(normalise(want), -1)
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	re, err := regexp.Compile(`(?s)^` + strings.Join(parts, ".*?") + `$`)
	return err == nil && re.MatchString(normalise(got))
}

// TestDocCommands runs the commands of every ```console block of README.md
// and docs/*.md, in order, one shell per file (so a variable set by one
// command is there for the next), with `svc` the binary built from this
// tree, in the repository's root, and diffs what each prints on stdout
// against the answer shown under it. A command ending in `&` is started
// in the background and stopped at the end of the file; the next command
// waits until the address it names accepts connections. The ports the
// docs show are mapped to free ones (and back in the answers), and `svc
// serve` gets a data directory of its own. A command must exit 0.
func TestDocCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the doc commands build and start svc")
	}
	// Without the race detector, as users build it (svcproc shares the
	// build with the other packages' tests under make test).
	svc, err := svcproc.BuildPlain(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Dir(svc)
	for _, f := range docFiles(t) {
		text := readFile(t, f)
		var cmds []command
		for _, b := range parseBlocks(f, text) {
			if b.lang == "console" && b.directive == "" {
				cmds = append(cmds, commands(b)...)
			}
		}
		if len(cmds) == 0 {
			continue
		}
		t.Run(f, func(t *testing.T) {
			// Each file has its own shell, ports and data directory, and
			// its commands mostly wait on servers: side by side.
			t.Parallel()
			got := runSession(t, bin, f, cmds)
			if *update {
				rewrite(t, f, text, cmds, got)
			}
		})
	}
}

// runSession runs cmds in one shell and returns what each printed, for
// -update (nil where the answer shown matched).
func runSession(t *testing.T, bin, file string, cmds []command) map[int]string {
	ports := mapPorts(t, cmds)
	data := t.TempDir()
	sh := exec.Command("bash", "--noprofile", "--norc")
	sh.Dir = root
	sh.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SVC_") {
			env = append(env, kv)
		}
	}
	// TMPDIR: what the commands create with mktemp goes with the test.
	sh.Env = append(env, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "TMPDIR="+t.TempDir())
	stdin, err := sh.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := sh.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &lockedBuffer{}
	sh.Stderr = stderr
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		r := bufio.NewReader(stdout)
		for {
			l, err := r.ReadString('\n')
			if l != "" {
				lines <- l
			}
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		// The shell and what it started in the background: one group.
		_ = syscall.Kill(-sh.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = sh.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = syscall.Kill(-sh.Process.Pid, syscall.SIGKILL)
			<-done
		}
		for range lines {
		}
		if t.Failed() {
			t.Logf("stderr of the commands (last 4 KiB):\n%s", tail(stderr.String(), 4<<10))
		}
	})
	// `svc serve` gets the mapped port and a data directory of its own,
	// before the doc's flags so that the doc's win where it sets them.
	prelude := fmt.Sprintf(`svc() { if [ "$1" = serve ]; then shift; command svc serve --port %d --data-dir %q "$@"; else command svc "$@"; fi; }`+"\n",
		ports[8420], data)
	if _, err := io.WriteString(stdin, prelude); err != nil {
		t.Fatal(err)
	}
	const marker = "__doctest_done__"
	got := map[int]string{}
	for i, c := range cmds {
		text := mapText(c.text, ports)
		if background(text) && i+1 < len(cmds) {
			if _, err := io.WriteString(stdin, text+"\n"); err != nil {
				t.Fatal(err)
			}
			waitReady(t, file, c, mapText(cmds[i+1].text, ports))
			continue
		}
		if _, err := fmt.Fprintf(stdin, "%s\nprintf '\\n%s %%d\\n' $?\n", text, marker); err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		code := -1
		timeout := time.After(2 * time.Minute)
	read:
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("%s:%d: the shell ended during %q", file, c.line+1, c.text)
				}
				if rest, ok := strings.CutPrefix(l, marker+" "); ok {
					code, _ = strconv.Atoi(strings.TrimSpace(rest))
					break read
				}
				out.WriteString(l)
			case <-timeout:
				t.Fatalf("%s:%d: %q still running after 2 minutes", file, c.line+1, c.text)
			}
		}
		answer := unmapText(strings.TrimSuffix(strings.TrimSuffix(out.String(), "\n"), "\n"), ports)
		if code != 0 {
			t.Errorf("%s:%d: %q exited %d; printed:\n%s", file, c.line+1, c.text, code, answer)
			continue
		}
		if !matches(c.want, answer) {
			t.Errorf("%s:%d: %s\nthe doc shows:\n%s\nthe command printed:\n%s\n(normalised: %s)\n(go test ./docs -run TestDocCommands -update rewrites the doc)",
				file, c.line+1, c.text, c.want, answer, normalise(answer))
			got[c.line] = answer
		}
	}
	return got
}

// trailingComment is a shell comment at the end of a command line (one
// without quotes in it, so as not to cut a quoted #).
var trailingComment = regexp.MustCompile(`\s+#[^'"]*$`)

// background reports whether a command ends in `&`, before any comment.
func background(text string) bool {
	return strings.HasSuffix(strings.TrimSpace(trailingComment.ReplaceAllString(text, "")), "&")
}

// mapPorts gives each port the commands name (and 8420, svc serve's
// default) a free one of this machine.
func mapPorts(t *testing.T, cmds []command) map[int]int {
	ports := map[int]int{8420: 0}
	for _, c := range cmds {
		for _, m := range addrRE.FindAllStringSubmatch(c.text, -1) {
			p, _ := strconv.Atoi(m[2])
			ports[p] = 0
		}
	}
	for p := range ports {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports[p] = ln.Addr().(*net.TCPAddr).Port
		_ = ln.Close()
	}
	return ports
}

var addrRE = regexp.MustCompile(`(localhost:|127\.0\.0\.1:|--port[ =])(\d{2,5})\b`)

func mapText(s string, ports map[int]int) string {
	return addrRE.ReplaceAllStringFunc(s, func(m string) string {
		sub := addrRE.FindStringSubmatch(m)
		p, _ := strconv.Atoi(sub[2])
		return sub[1] + strconv.Itoa(ports[p])
	})
}

func unmapText(s string, ports map[int]int) string {
	for doc, real := range ports {
		for _, host := range []string{"localhost:", "127.0.0.1:"} {
			s = strings.ReplaceAll(s, host+strconv.Itoa(real), host+strconv.Itoa(doc))
		}
	}
	return s
}

// waitReady waits until the address the next command names accepts
// connections: what the background command started is up.
func waitReady(t *testing.T, file string, c command, next string) {
	m := addrRE.FindStringSubmatch(next)
	if m == nil || strings.HasPrefix(m[1], "--port") {
		return
	}
	addr := "127.0.0.1:" + m[2]
	deadline := time.Now().Add(3 * time.Minute)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = conn.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s:%d: %q: nothing listening on %s after 3 minutes", file, c.line+1, c.text, addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// rewrite writes the answers got into the file in place of those shown.
func rewrite(t *testing.T, file, text string, cmds []command, got map[int]string) {
	if len(got) == 0 {
		return
	}
	lines := strings.Split(text, "\n")
	sort.Slice(cmds, func(i, j int) bool { return cmds[i].line > cmds[j].line })
	for _, c := range cmds {
		answer, ok := got[c.line]
		if !ok {
			continue
		}
		var repl []string
		if answer != "" {
			repl = strings.Split(answer, "\n")
		}
		lines = append(lines[:c.outStart], append(repl, lines[c.outEnd:]...)...)
	}
	if err := os.WriteFile(filepath.Join(root, file), []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: rewrote %d answers", file, len(got))
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

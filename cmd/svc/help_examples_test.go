package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/svcproc"
)

// helpExamples walks the built binary's help, from svc --help down through
// every "Available Commands" entry, and returns each line of each
// "Examples:" section by the command whose help printed it. A new example,
// or a new command with examples, is covered without touching this test.
func helpExamples(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	var walk func(path []string)
	walk = func(path []string) {
		r := mustExec(t, 0, nil, append(path, "--help")...)
		section := ""
		for _, l := range strings.Split(r.stdout, "\n") {
			if l != "" && !strings.HasPrefix(l, " ") {
				section = l
				continue
			}
			l = strings.TrimSpace(l)
			if l == "" {
				continue
			}
			switch section {
			case "Examples:":
				name := strings.Join(append([]string{"svc"}, path...), " ")
				out[name] = append(out[name], l)
			case "Available Commands:":
				sub := strings.Fields(l)[0]
				if sub != "help" && sub != "completion" { // cobra's own
					walk(append(append([]string{}, path...), sub))
				}
			}
		}
	}
	walk(nil)
	return out
}

// The examples that do not end by themselves: the test starts each, waits
// for the line that says it works, interrupts it and wants exit 0.
var longRunningExamples = []longExample{
	// Port 8420 is not the test's to take (other tests and servers run
	// beside it): the example runs on a free port instead.
	{"svc serve --specs examples/specs", "--host 127.0.0.1 --port 0 --data-dir serve-data", regexp.MustCompile(`svc serving`)},
	{"svc status", "", regexp.MustCompile(`svc status: connected to`)},
}

// The examples this test does not run, and why.
var unrunExamples = map[string]string{
	"svc serve --specs examples/specs --broker embedded":                        "a fleet's publisher on the fixed nats port 4222, not the test's to take; TestFleet runs the pair on free ports",
	"svc worker start --broker nats://127.0.0.1:4222 --all-from examples/specs": "needs the example above's broker; TestFleet runs the pair on free ports",
}

var exampleComment = regexp.MustCompile(`\s+#.*$`)

// Every example of every help text runs, as written, with exit 0: through
// sh, with the built svc first on PATH, in a directory where examples/specs
// is the repository's, and with $SVC_URL naming a real server on those
// specs (issue 28: svc --help's own `svc submit panel --wait` failed as
// written).
func TestHelpExamples(t *testing.T) {
	t.Parallel()
	s := startServe(t, nil, "--specs", exampleSpecs)
	dir := t.TempDir()
	examples, err := filepath.Abs("../../examples")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(examples, filepath.Join(dir, "examples")); err != nil {
		t.Fatal(err)
	}
	// The examples say `svc`: that name, on PATH, is this test's build
	// (named svc-race under the race detector).
	bin := t.TempDir()
	if err := os.Symlink(svcBin, filepath.Join(bin, "svc")); err != nil {
		t.Fatal(err)
	}
	env := append(svcproc.Env(), "SVC_URL="+s.url, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))

	all := helpExamples(t)
	if len(all["svc"]) == 0 {
		t.Fatal("svc --help shows no examples")
	}
	ran := 0
	for cmdPath, lines := range all {
		for _, line := range lines {
			code := exampleComment.ReplaceAllString(line, "")
			if why, ok := unrunExamples[code]; ok {
				t.Logf("%s: not run: %s: %s", cmdPath, code, why)
				continue
			}
			ran++
			if lr := longRunning(code); lr != nil {
				runLongExample(t, dir, env, cmdPath, code+" "+lr.args, lr.ready)
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			cmd := exec.CommandContext(ctx, "sh", "-c", line)
			cmd.Dir, cmd.Env = dir, env
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			cancel()
			checkNoRace(t, stderr.String())
			if err != nil {
				t.Errorf("%s --help example\n  %s\nexit: %v\nstdout: %s\nstderr: %s", cmdPath, line, err, tail(stdout.String(), 2000), tail(stderr.String(), 2000))
			}
		}
	}
	t.Logf("ran %d examples", ran)
}

// longExample is an example that runs until interrupted.
type longExample struct {
	code  string         // the example, without its comment
	args  string         // appended to it
	ready *regexp.Regexp // on its stderr once it works
}

// longRunning is code's entry of longRunningExamples, or nil.
func longRunning(code string) *longExample {
	for i := range longRunningExamples {
		lr := &longRunningExamples[i]
		if code == lr.code {
			return lr
		}
	}
	return nil
}

// runLongExample starts code, waits for ready on its stderr, sends SIGINT
// and wants exit 0.
func runLongExample(t *testing.T, dir string, env []string, cmdPath, code string, ready *regexp.Regexp) {
	t.Helper()
	cmd := exec.Command("sh", "-c", "exec "+code)
	cmd.Dir, cmd.Env = dir, env
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.After(30 * time.Second)
	for !ready.MatchString(stderr.String()) {
		select {
		case err := <-done:
			t.Errorf("%s --help example %q exited (%v) before logging %s; stderr:\n%s", cmdPath, code, err, ready, tail(stderr.String(), 4000))
			return
		case <-deadline:
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("%s --help example %q logged no %s within 30s; stderr:\n%s", cmdPath, code, ready, tail(stderr.String(), 4000))
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
	_ = cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-done:
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Errorf("%s: %v", code, err)
		} else if err != nil {
			t.Errorf("%s --help example %q: exit %d after SIGINT; stderr:\n%s", cmdPath, code, ee.ExitCode(), tail(stderr.String(), 4000))
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Errorf("%s --help example %q still running 30s after SIGINT", cmdPath, code)
	}
	checkNoRace(t, stderr.String())
}

package main

import (
	"strings"
	"testing"
)

// Every client command names its server the same way: --url, else
// $SVC_URL, else http://127.0.0.1:8420, which it says in one line (issue
// 28: `svc submit panel --wait`, svc --help's own example, failed as
// written, and run, submit and gather ignored $SVC_URL).
func TestServerURL(t *testing.T) {
	t.Parallel()
	s := startServe(t, nil, "--specs", exampleSpecs)
	env := []string{"SVC_URL=" + s.url}
	for _, args := range [][]string{
		{"run", "echo", "--input", `{"text":"hi"}`},
		{"submit", "echo", "--input", `{"text":"hi"}`, "--wait"},
		{"runs", "--limit", "1"},
	} {
		r := mustExec(t, 0, env, args...)
		if strings.Contains(r.stderr, "trying") || r.stdout == "" {
			t.Errorf("svc %s with SVC_URL: stdout %q, stderr %q", strings.Join(args, " "), r.stdout, r.stderr)
		}
	}
	in := tempFile(t, "in.jsonl", "1\n2\n")
	if r := mustExec(t, 0, env, "gather", "echo", "--inputs", in); strings.Count(r.stdout, "\n") != 2 {
		t.Errorf("svc gather with SVC_URL: %q", r.stdout)
	}
	// --url wins over $SVC_URL.
	if r := mustExec(t, 0, []string{"SVC_URL=http://127.0.0.1:1"}, "run", "echo", "--input", "1", "--url", s.url); r.stdout == "" {
		t.Errorf("--url over SVC_URL: %q %q", r.stdout, r.stderr)
	}
	// Neither: the default, said once on stderr, before the call fails
	// (nothing listens on an unused port here; the test does not own
	// 8420, so only the line is checked, not the outcome).
	r := svcExec(t, nil, "", "runs", "--timeout", "2s")
	if n := strings.Count(r.stderr, "trying http://127.0.0.1:8420"); n != 1 || !strings.Contains(r.stderr, "SVC_URL") {
		t.Errorf("svc runs without --url or SVC_URL: stderr %q, want one line naming the default and SVC_URL", r.stderr)
	}
	// Both --url and --specs: a usage error.
	if r := mustExec(t, 2, nil, "run", "echo", "--input", "1", "--url", s.url, "--specs", exampleSpecs); !strings.Contains(r.stderr, "not both") {
		t.Errorf("--url with --specs: %q", r.stderr)
	}
	// The help says the default once, not twice (cobra's own "(default
	// ...)" after a usage that already names it).
	for _, cmd := range []string{"run", "submit", "gather", "runs", "status"} {
		r := mustExec(t, 0, nil, cmd, "--help")
		for _, l := range strings.Split(r.stdout, "\n") {
			if strings.Contains(l, "--url string") && (strings.Count(l, "8420") != 1 || strings.Contains(l, `(default "`)) {
				t.Errorf("svc %s --help: %q", cmd, l)
			}
		}
	}
}

package main

import (
	"strings"
	"testing"
)

const sample = `{"Action":"start","Package":"x/a"}
{"Action":"run","Package":"x/a","Test":"TestOK"}
{"Action":"output","Package":"x/a","Test":"TestOK","Output":"=== RUN   TestOK\n"}
{"Action":"pass","Package":"x/a","Test":"TestOK","Elapsed":0.1}
{"Action":"run","Package":"x/a","Test":"TestRedis"}
{"Action":"output","Package":"x/a","Test":"TestRedis","Output":"=== RUN   TestRedis\n"}
{"Action":"output","Package":"x/a","Test":"TestRedis","Output":"    redis_test.go:9: redis-server not found\n"}
{"Action":"output","Package":"x/a","Test":"TestRedis","Output":"--- SKIP: TestRedis (0.00s)\n"}
{"Action":"skip","Package":"x/a","Test":"TestRedis","Elapsed":0}
{"Action":"pass","Package":"x/a","Elapsed":0.2}
`

// A skipped test is named with its reason, in the list and in the last
// line; a run with skips and no failures passes.
func TestSkipsAreLoud(t *testing.T) {
	var out strings.Builder
	if !summarize(strings.NewReader(sample), &out) {
		t.Fatalf("summarize failed:\n%s", out.String())
	}
	got := out.String()
	lines := strings.Split(strings.TrimSpace(got), "\n")
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "SKIPPED: 1 tests (TestRedis)") {
		t.Errorf("last line %q", last)
	}
	if !strings.Contains(got, "x/a TestRedis: redis_test.go:9: redis-server not found") {
		t.Errorf("no reason in:\n%s", got)
	}
	if !strings.Contains(got, "tests: 1 passed, 0 failed, 1 skipped") {
		t.Errorf("no counts in:\n%s", got)
	}
}

// A failed test fails the run and shows its output; so does a package
// that fails outside its tests, and a build failure.
func TestFailures(t *testing.T) {
	for name, in := range map[string]string{
		"test": `{"Action":"output","Package":"x/b","Test":"TestBad","Output":"    b_test.go:3: boom\n"}
{"Action":"fail","Package":"x/b","Test":"TestBad"}
{"Action":"fail","Package":"x/b"}
`,
		"package": `{"Action":"output","Package":"x/b","Output":"goleak: found unexpected goroutines boom\n"}
{"Action":"fail","Package":"x/b"}
`,
		"build": `{"ImportPath":"x/b [x/b.test]","Action":"build-output","Output":"b.go:1: boom\n"}
{"ImportPath":"x/b [x/b.test]","Action":"build-fail"}
`,
		// A package that times out: the hung test never ends, and its
		// output (the goroutine dump) is the only clue.
		"timeout": `{"Action":"run","Package":"x/b","Test":"TestHangs"}
{"Action":"output","Package":"x/b","Test":"TestHangs","Output":"panic: test timed out after 10m0s boom\n"}
{"Action":"fail","Package":"x/b","Elapsed":600}
`,
		"nothing": "no Go files\n",
	} {
		t.Run(name, func(t *testing.T) {
			var out strings.Builder
			if summarize(strings.NewReader(in), &out) {
				t.Fatalf("passed:\n%s", out.String())
			}
			if name != "nothing" && !strings.Contains(out.String(), "boom") {
				t.Errorf("the failure's output is missing:\n%s", out.String())
			}
		})
	}
}

// The summary lists the slowest top-level tests and packages, longest
// first, so that whoever keeps `make check` within its budget sees where
// the time goes; subtests are inside their parent's time and not listed.
func TestSlowest(t *testing.T) {
	var in strings.Builder
	for i := 1; i <= 12; i++ {
		in.WriteString(`{"Action":"pass","Package":"x/a","Test":"TestT` + string(rune('A'+i)) + `","Elapsed":` + strings.Repeat("1", i) + `}` + "\n")
	}
	in.WriteString(`{"Action":"pass","Package":"x/a","Test":"TestN/sub","Elapsed":999999999999999}` + "\n")
	in.WriteString(`{"Action":"pass","Package":"x/a","Elapsed":5}` + "\n")
	in.WriteString(`{"Action":"pass","Package":"x/b","Elapsed":7}` + "\n")
	var out strings.Builder
	if !summarize(strings.NewReader(in.String()), &out) {
		t.Fatalf("summarize failed:\n%s", out.String())
	}
	got := out.String()
	_, tests, ok := strings.Cut(got, "slowest tests (10 of 12):\n")
	if !ok {
		t.Fatalf("no slowest tests in:\n%s", got)
	}
	lines := strings.Split(tests, "\n")
	if !strings.HasSuffix(lines[0], "x/a.TestTM") || !strings.HasSuffix(lines[9], "x/a.TestTD") {
		t.Errorf("slowest tests not longest first, ten of them:\n%s", got)
	}
	if strings.Contains(got, "TestN/sub") {
		t.Errorf("a subtest is listed:\n%s", got)
	}
	if !strings.Contains(got, "slowest packages (2 of 2):\n     7.0s x/b\n     5.0s x/a\n") {
		t.Errorf("slowest packages missing or out of order:\n%s", got)
	}
}

// Command testsummary reads `go test -json` on stdin and prints what a
// person reading CI needs: one line per package (ok or FAIL), the output
// of every failed test and build, and at the end every skipped test with
// its reason, the ten slowest tests and packages (where the time of
// `make check` goes), then one summary line. A test that skips is thus
// never silent: `make test` pipes the tests through it.
//
//	go test -json ./... | go run ./internal/testsummary
//
// It exits 1 when a test, a package or a build failed, or when the input
// held no test result at all.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

func main() {
	if !summarize(os.Stdin, os.Stdout) {
		os.Exit(1)
	}
}

// event is one line of `go test -json` (test2json's TestEvent, and the
// build events of go test).
type event struct {
	Action     string
	Package    string
	ImportPath string
	Test       string
	Output     string
	Elapsed    float64
}

// skip is a skipped test and why.
type skip struct {
	pkg, test, reason string
}

// summarize copies the results of in to out, summarised, and reports
// whether everything passed.
func summarize(in io.Reader, out io.Writer) bool {
	var (
		output  = map[string][]string{} // package + test → its output lines
		skips   []skip
		passed  int
		failed  []string // package.Test
		pkgFail int
		build   = map[string][]string{} // import path → build output
		results int
		tests   []timed // top-level tests that ended
		pkgs    []timed // packages that ended
	)
	key := func(e event) string { return e.Package + "\x00" + e.Test }
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if err := json.Unmarshal(line, &e); err != nil || e.Action == "" {
			// Not an event: go test's own words (a setup failure, say).
			fmt.Fprintln(out, string(line))
			continue
		}
		switch e.Action {
		case "build-output":
			build[e.ImportPath] = append(build[e.ImportPath], e.Output)
		case "build-fail":
			fmt.Fprintf(out, "BUILD FAIL %s\n%s", e.ImportPath, strings.Join(build[e.ImportPath], ""))
			pkgFail++
			results++
		case "output":
			output[key(e)] = append(output[key(e)], e.Output)
		case "pass", "fail", "skip":
			results++
			lines := output[key(e)]
			delete(output, key(e))
			switch {
			case e.Test == "":
				pkgs = append(pkgs, timed{e.Package, e.Elapsed})
			case !strings.Contains(e.Test, "/"):
				tests = append(tests, timed{e.Package + "." + e.Test, e.Elapsed})
			}
			switch {
			case e.Test == "" && e.Action == "pass":
				fmt.Fprintf(out, "ok   %s %.1fs\n", e.Package, e.Elapsed)
			case e.Test == "" && e.Action == "fail":
				pkgFail++
				// A package failing outside any test (a panic in
				// TestMain, a goroutine leak, a build error) says why
				// in its own output.
				fmt.Fprintf(out, "FAIL %s %.1fs\n%s", e.Package, e.Elapsed, strings.Join(lines, ""))
				// Tests that never ended (the package timed out, or
				// exited under them) have their output, the timeout's
				// goroutine dump included, under their own names.
				var unfinished []string
				for k := range output {
					if pkg, test, _ := strings.Cut(k, "\x00"); pkg == e.Package && test != "" {
						unfinished = append(unfinished, k)
					}
				}
				sort.Strings(unfinished)
				for _, k := range unfinished {
					_, test, _ := strings.Cut(k, "\x00")
					failed = append(failed, e.Package+"."+test+" (did not finish)")
					fmt.Fprintf(out, "--- DID NOT FINISH %s %s\n%s", e.Package, test, strings.Join(output[k], ""))
					delete(output, k)
				}
			case e.Test == "":
				// A package without tests.
			case e.Action == "pass":
				passed++
			case e.Action == "fail":
				failed = append(failed, e.Package+"."+e.Test)
				fmt.Fprintf(out, "--- FAIL %s %s\n%s", e.Package, e.Test, strings.Join(lines, ""))
			default:
				skips = append(skips, skip{pkg: e.Package, test: e.Test, reason: reason(lines)})
			}
		}
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintf(out, "testsummary: reading the test output: %v\n", err)
		return false
	}
	sort.Slice(skips, func(i, j int) bool {
		if skips[i].pkg != skips[j].pkg {
			return skips[i].pkg < skips[j].pkg
		}
		return skips[i].test < skips[j].test
	})
	if len(skips) > 0 {
		fmt.Fprintf(out, "\nSKIPPED tests (%d):\n", len(skips))
		for _, s := range skips {
			fmt.Fprintf(out, "  %s %s: %s\n", s.pkg, s.test, s.reason)
		}
	}
	slowest(out, "tests", tests)
	slowest(out, "packages", pkgs)
	if len(failed) > 0 {
		fmt.Fprintf(out, "\nFAILED tests (%d):\n  %s\n", len(failed), strings.Join(failed, "\n  "))
	}
	fmt.Fprintf(out, "\ntests: %d passed, %d failed, %d skipped; %d packages failed\n", passed, len(failed), len(skips), pkgFail)
	if len(skips) > 0 {
		names := make([]string, len(skips))
		for i, s := range skips {
			names[i] = s.test
		}
		fmt.Fprintf(out, "SKIPPED: %d tests (%s): see the reasons above\n", len(skips), strings.Join(names, ", "))
	}
	if results == 0 {
		fmt.Fprintln(out, "testsummary: no test results in the input")
		return false
	}
	return len(failed) == 0 && pkgFail == 0
}

// timed is a test or a package and how long it took.
type timed struct {
	name    string
	elapsed float64 // seconds
}

// slowestN is how many of the slowest tests and packages the summary lists.
const slowestN = 10

// slowest prints the slowestN longest of ts, longest first. Tests of
// packages that run in parallel overlap, so their times do not add up to
// the wall time; they say where to split or parallelise first.
func slowest(out io.Writer, what string, ts []timed) {
	if len(ts) == 0 {
		return
	}
	sort.SliceStable(ts, func(i, j int) bool { return ts[i].elapsed > ts[j].elapsed })
	n := min(len(ts), slowestN)
	fmt.Fprintf(out, "\nslowest %s (%d of %d):\n", what, n, len(ts))
	for _, t := range ts[:n] {
		fmt.Fprintf(out, "  %6.1fs %s\n", t.elapsed, t.name)
	}
}

// reason is what a skipped test said: its output without go test's own
// framing lines.
func reason(lines []string) string {
	var said []string
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- SKIP") {
			continue
		}
		said = append(said, t)
	}
	if len(said) == 0 {
		return "(no reason given)"
	}
	return strings.Join(said, " / ")
}

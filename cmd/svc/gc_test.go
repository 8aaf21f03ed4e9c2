package main

import (
	"fmt"
	"os"
	"regexp"
	"testing"
	"time"
)

var gcLine = regexp.MustCompile(`garbage collector\t\{"gc_percent": (-?\d+), "gc_percent_from": "([^"]+)", "memory_limit_bytes": (-?\d+), "memory_limit_from": "([^"]+)"\}`)

// svc serve runs its collector at GOGC 400 under a soft memory limit of
// 3/4 of the memory available, unless GOGC and GOMEMLIMIT say otherwise,
// and logs what is in force.
func TestServeTunesGC(t *testing.T) {
	for _, k := range []string{"GOGC", "GOMEMLIMIT"} {
		t.Setenv(k, "") // restored after the test…
		os.Unsetenv(k)  // …and unset during it
	}
	avail := availableMemory()
	if avail <= 0 {
		t.Fatal("cannot tell the memory available from /proc/meminfo or the cgroup")
	}
	for _, c := range []struct {
		name          string
		env           []string
		percent       string
		percentFrom   string
		limit         string
		limitFromPart string
	}{
		{"defaults", nil, "400", "svc serve default", fmt.Sprint(int64(float64(avail) * serveMemoryShare)), "3/4 of the memory available"},
		{"environment", []string{"GOGC=150", "GOMEMLIMIT=1GiB"}, "150", "GOGC", "1073741824", "GOMEMLIMIT"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := startServe(t, c.env, "--specs", exampleSpecs)
			s.waitLog(t, gcLine, 10*time.Second)
			m := gcLine.FindStringSubmatch(s.stderr.String())
			if m[1] != c.percent || m[2] != c.percentFrom || m[3] != c.limit || !regexp.MustCompile(regexp.QuoteMeta(c.limitFromPart)).MatchString(m[4]) {
				t.Errorf("logged %q, want gc_percent %s from %q, memory limit %s from %q", m[0], c.percent, c.percentFrom, c.limit, c.limitFromPart)
			}
		})
	}
}

// The heap may grow past its live part by what GOGC allows, but by no more
// than heapHeadroom, and always to twice the live heap (Go's default): a
// 100 MiB moment of live heap (2,000 stalled streams, issue 25) lets the
// heap reach 228 MiB, not 500.
func TestHeapGoal(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live    int64
		percent int
		want    int64
	}{
		{1 * mib, 400, 20 * mib},      // Go's 4 MiB floor, × 5
		{20 * mib, 400, 100 * mib},    // GOGC 400 as set
		{100 * mib, 400, 228 * mib},   // capped: live + 128 MiB
		{400 * mib, 400, 800 * mib},   // never under twice live
		{100 * mib, 50, 200 * mib},    // the limit allows twice live; GOGC 50 itself collects sooner
		{1024 * mib, 400, 2048 * mib}, // a large live heap: Go's default
	} {
		if got := heapGoal(c.live, c.percent); got != c.want {
			t.Errorf("heapGoal(%d MiB, %d) = %d MiB, want %d MiB", c.live/mib, c.percent, got/mib, c.want/mib)
		}
	}
}

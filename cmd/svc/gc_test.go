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

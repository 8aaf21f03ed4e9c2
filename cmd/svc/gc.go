package main

import (
	"bufio"
	"bytes"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"go.uber.org/zap"
)

// serveGCPercent is svc serve's GOGC when the environment gives none. A
// run request allocates about 150 objects (the HTTP request, the actors,
// the event store's rows), and with Go's default of 100 the collector
// took about a tenth of the server's CPU under load. At 400 it took 10-30 %
// less CPU a request for 70 MiB more peak RSS under a 64-client load
// (BENCHMARKS.md, "Issue 15 part 1: the collector"); the memory limit
// below keeps the larger heap goal from ever being the cause of running
// out of memory.
const serveGCPercent = 400

// serveMemoryShare is the part of the memory the process may use (its
// cgroup's limit, else the machine's) that svc serve sets as its soft
// memory limit when GOMEMLIMIT is not set: as the heap nears it the
// collector runs as often as it must, whatever GOGC says.
const serveMemoryShare = 0.75

// tuneGC sets svc serve's collector: GOGC and GOMEMLIMIT, when set, are
// Go's own and win; otherwise GC percent serveGCPercent and a memory limit
// of serveMemoryShare of the memory available, lowered to what the live
// heap needs while it is smaller (heapCap). It logs what is in force. The
// returned function stops the heap cap; call it before exiting.
func tuneGC(log *zap.Logger) (stop func()) {
	percent, percentFrom := serveGCPercent, "svc serve default"
	if _, ok := os.LookupEnv("GOGC"); ok {
		percentFrom = "GOGC"
		percent = debug.SetGCPercent(-1) // reads what the runtime took from GOGC…
		debug.SetGCPercent(percent)      // …and puts it back
	} else {
		debug.SetGCPercent(percent)
	}
	limit, limitFrom := int64(-1), "GOMEMLIMIT"
	if _, ok := os.LookupEnv("GOMEMLIMIT"); ok {
		limit = debug.SetMemoryLimit(-1) // -1 reads it
	} else if avail := availableMemory(); avail > 0 {
		limit, limitFrom = int64(float64(avail)*serveMemoryShare), "svc serve default: 3/4 of the memory available"
		debug.SetMemoryLimit(limit)
	} else {
		limitFrom = "none: the memory available is unknown"
	}
	log.Info("garbage collector", zap.Int("gc_percent", percent), zap.String("gc_percent_from", percentFrom),
		zap.Int64("memory_limit_bytes", limit), zap.String("memory_limit_from", limitFrom))
	// The cap manages the memory limit: not one the environment set, nor
	// with the collector off.
	if limitFrom == "GOMEMLIMIT" || percent < 0 {
		return func() {}
	}
	if limit <= 0 {
		limit = math.MaxInt64
	}
	return startHeapCap(percent, limit)
}

// availableMemory is the memory this process may use: its cgroup's limit
// (v2, then v1) when it has one below the machine's, else the machine's
// (MemTotal); 0 when neither can be read.
func availableMemory() int64 {
	total := memTotal()
	for _, path := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || n <= 0 { // "max": no limit
			continue
		}
		if total == 0 || n < total {
			return n
		}
	}
	return total
}

// memTotal is /proc/meminfo's MemTotal in bytes, 0 when unreadable.
func memTotal() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			f := strings.Fields(rest)
			if len(f) >= 1 {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				if err == nil {
					return kb << 10
				}
			}
		}
	}
	return 0
}

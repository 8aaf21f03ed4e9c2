// Command goclient is BenchmarkPythonClient's measurement of the Go
// client (http/client), in a process of its own so that its peak RSS is
// the client's: a streamed gather of -tasks test:echo tasks made as they
// are read, or -tasks sync runs with -concurrency in flight. It prints
// one JSON line: {per_s, seconds, rss_mb}, as clients/python/bench does.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"iter"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/http/client"
)

func main() {
	url := flag.String("url", "", "the server")
	mode := flag.String("mode", "stream", "stream or runs")
	n := flag.Int("tasks", 100_000, "tasks (stream) or runs")
	conc := flag.Int("concurrency", 64, "max_concurrency (stream) or runs in flight")
	flag.Parse()
	if err := run(*url, *mode, *n, *conc); err != nil {
		fmt.Fprintln(os.Stderr, "goclient:", err)
		os.Exit(1)
	}
}

func input(i int) json.RawMessage {
	return json.RawMessage(`{"n":` + strconv.Itoa(i) + `,"text":"hello world"}`)
}

func run(url, mode string, n, conc int) error {
	c, err := client.New(url, client.WithTimeout(0))
	if err != nil {
		return err
	}
	defer c.Close()
	ctx := context.Background()
	var failed atomic.Int64
	var start time.Time
	switch mode {
	case "stream":
		tasks := iter.Seq[svc.TaskSpec](func(yield func(svc.TaskSpec) bool) {
			for i := range n {
				if !yield(svc.TaskSpec{Input: input(i)}) {
					return
				}
			}
		})
		start = time.Now()
		got := 0
		for item, err := range c.GatherStream(ctx, "echo", tasks, conc) {
			if err != nil {
				return err
			}
			got++
			if !item.Result.Success {
				failed.Add(1)
			}
		}
		if got != n {
			return fmt.Errorf("%d results for %d tasks", got, n)
		}
	case "runs":
		if _, err := c.Run(ctx, "echo", svc.TaskSpec{Input: input(0)}); err != nil { // a warm connection
			return err
		}
		start = time.Now()
		var left atomic.Int64
		left.Store(int64(n))
		var wg sync.WaitGroup
		for range conc {
			wg.Go(func() {
				for i := left.Add(-1); i >= 0; i = left.Add(-1) {
					res, err := c.Run(ctx, "echo", svc.TaskSpec{Input: input(int(i))})
					if err != nil || !res.Success {
						failed.Add(1)
					}
				}
			})
		}
		wg.Wait()
	default:
		return fmt.Errorf("-mode %q: want stream or runs", mode)
	}
	took := time.Since(start)
	if f := failed.Load(); f > 0 {
		return fmt.Errorf("%d failed", f)
	}
	out, err := json.Marshal(map[string]float64{"per_s": float64(n) / took.Seconds(), "seconds": took.Seconds(), "rss_mb": peakRSS()})
	if err != nil {
		return err
	}
	fmt.Println(string(out))
	return nil
}

// peakRSS is this process's VmHWM, in MB.
func peakRSS() float64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

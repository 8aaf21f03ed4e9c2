package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/svcproc"
)

// The memory tests measure the resident set of a server built without the
// race detector (which multiplies it several times); MEMTEST_SVC_BIN names
// another binary to measure (an older build, to see a bound fail).
var (
	plainBinOnce sync.Once
	plainBin     string
	plainBinErr  error
)

func plainSvc(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("MEMTEST_SVC_BIN"); bin != "" {
		return bin
	}
	plainBinOnce.Do(func() {
		if !svcproc.Race {
			plainBin = svcBin
			return
		}
		plainBin, plainBinErr = svcproc.BuildPlain(filepath.Dir(svcBin))
	})
	if plainBinErr != nil {
		t.Fatal(plainBinErr)
	}
	return plainBin
}

// memServe starts `svc serve` of plainSvc with the example specs, runs and
// events in memory (no SQLite cache to grow under the load and blur what
// is measured), on a free port; it is killed when the test ends.
func memServe(t *testing.T) (url string, pid int) {
	t.Helper()
	return memServeWith(t, "--store", "memory", "--events", "none")
}

// memServeWith starts `svc serve` of plainSvc as memServe does, with the
// stores flags given (none: the default stores, SQLite files in a fresh
// data directory).
func memServeWith(t *testing.T, stores ...string) (url string, pid int) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	args := append([]string{"serve", "--host", "127.0.0.1", "--port", strconv.Itoa(port), "--specs", exampleSpecs,
		"--data-dir", t.TempDir(), "--log-level", "error"}, stores...)
	cmd := exec.Command(plainSvc(t), args...)
	cmd.Env = svcproc.Env()
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("svc serve stderr (last 4 KiB):\n%s", tail(stderr.String(), 4<<10))
		}
	})
	url = "http://127.0.0.1:" + strconv.Itoa(port)
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := httpClient.Get(url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return url, cmd.Process.Pid
			}
		}
		select {
		case <-done:
			t.Fatalf("svc serve exited: %s", stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("svc serve not ready after 60 s: %v", err)
		}
	}
}

// procMB is a /proc/PID/status field (VmRSS, VmHWM) in MB.
func procMB(t *testing.T, pid int, field string) float64 {
	t.Helper()
	mb, ok := procField(pid, field)
	if !ok {
		t.Fatalf("no %s in /proc/%d/status", field, pid)
	}
	return mb
}

// anonSampler reads the process's anonymous resident memory (RssAnon:
// its heap, stacks and the runtime's own, without the binary's mapped
// pages) every 50 ms until stop, which returns the highest reading in MB.
// VmHWM counts the file-backed pages too, which move by up to 50 MB with
// the page cache's state of the binary (RELIABILITY.md), so the tests log
// both.
func anonSampler(t *testing.T, pid int) (stop func() float64) {
	t.Helper()
	done := make(chan struct{})
	peak := make(chan float64, 1)
	go func() {
		var high float64
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			if mb, ok := procField(pid, "RssAnon"); ok && mb > high {
				high = mb
			}
			select {
			case <-done:
				peak <- high
				return
			case <-tick.C:
			}
		}
	}()
	var once sync.Once
	var high float64
	return func() float64 {
		once.Do(func() { close(done); high = <-peak })
		return high
	}
}

// procField is procMB without a test: false when the process is gone.
func procField(pid int, field string) (float64, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, false
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024, err == nil
		}
	}
	return 0, false
}

// postRuns posts total echo runs from clients keep-alive clients: a
// number, not a time, since the same time lets through 4,000 runs or
// 40,000 on a shared machine, and what the runs allocate is what fills
// the heap.
func postRuns(t *testing.T, url string, clients, total int) {
	tr := &http.Transport{MaxIdleConnsPerHost: clients}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	var wg sync.WaitGroup
	var left atomic.Int64
	left.Store(int64(total))
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 {
				resp, err := c.Post(url+"/agents/echo/run", "application/json", strings.NewReader(`{"input":{"text":"hello world"}}`))
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
}

// 2,000 GET /events/stream clients that never read, while runs make
// events, cost the server a bounded resident set, and once they are gone
// the server gives the memory back within a minute (issue 25: 106 → 803
// MB, and 424 MB stayed). The peak's bound is the target, 300 MB;
// the peak of the anonymous memory (the program's, without the binary's
// pages, which move VmHWM by up to 50 MB with the page cache) has a bound
// between the two builds, so that the old way fails (measured: 268-273
// MB, 175-181 MB anonymous, with each stream served off its connection;
// 306-330 MB, 238-249 MB anonymous, while net/http's handler held each;
// back to idle + 25-50 MB in seconds; RELIABILITY.md has the figures).
func TestStalledSubscribersMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: two minutes of load and RSS readings")
	}
	// What is measured is the server's own RSS: other tests beside it slow
	// it down but do not change its memory.
	t.Parallel()
	const streams, runs, peakMB, anonMB, backMB = 2000, 20_000, 300, 215, 60
	url, pid := memServe(t)
	postRuns(t, url, 8, 500) // warm: what a served run first allocates
	time.Sleep(2 * time.Second)
	idle := procMB(t, pid, "VmRSS")
	idleAnon := procMB(t, pid, "RssAnon")
	anonPeak := anonSampler(t, pid)
	addr := strings.TrimPrefix(url, "http://")
	conns := make([]net.Conn, 0, streams)
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for range streams {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		if _, err := fmt.Fprintf(c, "GET /events/stream HTTP/1.1\r\nHost: %s\r\n\r\n", addr); err != nil {
			t.Fatal(err)
		}
	}
	// The status line of the last one: all are subscribed (in order).
	_ = conns[streams-1].SetReadDeadline(time.Now().Add(30 * time.Second))
	if line, err := bufio.NewReaderSize(conns[streams-1], 16).ReadString('\n'); err != nil || !strings.Contains(line, " 200 ") {
		t.Fatalf("GET /events/stream: %q, %v", line, err)
	}
	start := time.Now()
	postRuns(t, url, 32, runs)
	took := time.Since(start)
	for _, c := range conns {
		_ = c.Close()
	}
	conns = nil
	peak, anon := procMB(t, pid, "VmHWM"), anonPeak()
	t.Logf("idle %.0f MB (anonymous %.0f); %d stalled streams and %d runs (%v): peak %.0f MB, anonymous %.0f MB",
		idle, idleAnon, streams, runs, took.Round(time.Second), peak, anon)
	if peak > peakMB {
		t.Errorf("peak RSS %.0f MB with %d stalled streams, want at most %d MB", peak, streams, peakMB)
	}
	if anon > anonMB {
		t.Errorf("peak anonymous memory %.0f MB with %d stalled streams, want at most %d MB", anon, streams, anonMB)
	}
	start = time.Now()
	for {
		rss := procMB(t, pid, "VmRSS")
		if rss <= idle+backMB {
			t.Logf("RSS %.0f MB %v after the streams closed", rss, time.Since(start).Round(time.Second))
			break
		}
		if time.Since(start) > time.Minute {
			t.Errorf("RSS %.0f MB a minute after the streams closed, want at most %.0f (idle %.0f + %d)", rss, idle+backMB, idle, backMB)
			break
		}
		time.Sleep(time.Second)
	}
}

// A JSON gather of 87,000 tasks in a 1 MiB body answers in a bounded
// resident set (issue 25: 104 → 589 MB), with the runs in memory and with
// the default stores, which keep every run and event in SQLite. Measured
// (RELIABILITY.md), peak RSS (anonymous): 180-183 (82-91) and 270-273
// (175-177) MB with the tasks decoded as the run takes them; 168-216
// (111-121) and 269-314 (209-217) MB with all of them decoded up front.
// The RSS bound is the target; the anonymous memory's bounds sit
// between the two builds, so that the old way fails whatever the page
// cache holds of the binary.
func TestBigGatherMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a gather of 87,000 tasks")
	}
	// What is measured is the server's own RSS: other tests beside it slow
	// it down but do not change its memory.
	t.Parallel()
	for name, c := range map[string]struct {
		stores         []string
		peakMB, anonMB float64
	}{
		"memory":   {[]string{"--store", "memory", "--events", "none"}, 300, 105},
		"defaults": {nil, 300, 200},
	} {
		t.Run(name, func(t *testing.T) { bigGatherMemory(t, c.stores, c.peakMB, c.anonMB) })
	}
}

func bigGatherMemory(t *testing.T, stores []string, peakMB, anonMB float64) {
	const tasks = 87_000
	url, pid := memServeWith(t, stores...)
	var body bytes.Buffer
	body.WriteString(`{"tasks":[`)
	for i := range tasks {
		if i > 0 {
			body.WriteByte(',')
		}
		body.WriteString(`{"input":1}`)
	}
	body.WriteString(`],"max_concurrency":64}`)
	c := &http.Client{Timeout: 5 * time.Minute, Transport: &http.Transport{DisableKeepAlives: true}}
	idleAnon := procMB(t, pid, "RssAnon")
	anonPeak := anonSampler(t, pid)
	resp, err := c.Post(url+"/agents/echo/gather", "application/json", &body)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("gather: %d, %d bytes, %v", resp.StatusCode, n, err)
	}
	peak := procMB(t, pid, "VmHWM")
	anon := anonPeak()
	t.Logf("gather of %d tasks: %d bytes answered, peak RSS %.0f MB, anonymous %.0f MB (idle %.0f)", tasks, n, peak, anon, idleAnon)
	if peak > peakMB {
		t.Errorf("peak RSS %.0f MB for a gather of %d tasks, want at most %.0f MB", peak, tasks, peakMB)
	}
	if anon > anonMB {
		t.Errorf("peak anonymous memory %.0f MB for a gather of %d tasks, want at most %.0f MB", anon, tasks, anonMB)
	}
}

package bench

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/svc-dev/svc"
)

// batchTasksEnv sets BenchmarkBatchMillion's batch size (default 1,000,000).
const batchTasksEnv = "SVC_BENCH_BATCH_TASKS"

// batchUpload posts n test:echo tasks as one NDJSON body to POST /batches
// (target echo) and returns the batch id and how long the upload took,
// until the 202 that says every task is stored.
func batchUpload(b *testing.B, base string, n int) (string, time.Duration) {
	b.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/batches?target=echo&max_concurrency=2000", ndjsonTasks(n))
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Content-Type", svc.MediaNDJSON)
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	took := time.Since(start)
	var ans struct {
		BatchID string `json:"batch_id"`
	}
	if resp.StatusCode != http.StatusAccepted || json.Unmarshal(data, &ans) != nil || ans.BatchID == "" {
		b.Fatalf("POST /batches: %d %s", resp.StatusCode, data)
	}
	return ans.BatchID, took
}

// batchStatus reads GET /batches/{id}; ok is false while the server does
// not answer (it is being restarted).
func batchStatus(base, id string) (svc.BatchStatus, bool) {
	var st svc.BatchStatus
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(base + "/batches/" + id)
	if err != nil {
		return st, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&st) != nil {
		return st, false
	}
	return st, true
}

// batchWatch polls the batch every 100 ms, sampling the server's RSS, until
// until says stop or the batch ends; it returns the last status and the
// largest RSS seen (MiB).
func batchWatch(b *testing.B, p *proc, id string, limit time.Duration, until func(svc.BatchStatus) bool) (svc.BatchStatus, float64) {
	b.Helper()
	var peak float64
	deadline := time.Now().Add(limit)
	for {
		peak = max(peak, rssMiB(p.cmd.Process.Pid))
		st, ok := batchStatus(p.url, id)
		if ok && (until(st) || st.State.Terminal()) {
			return st, peak
		}
		if time.Now().After(deadline) {
			b.Fatalf("batch %s: %+v after %v", id, st, limit)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// batchCheckResults reads every result of the batch in index order and
// fails unless there are exactly n, indexes 0 to n-1 once each, each a
// success echoing its own task: nothing lost, nothing twice.
func batchCheckResults(b *testing.B, base, id string, n int) {
	b.Helper()
	resp, err := http.Get(base + "/batches/" + id + "/results?order=index")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	next := int64(0)
	for sc.Scan() {
		line := sc.Bytes()
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var r struct {
			Index  int64 `json:"index"`
			Result struct {
				Success bool            `json:"success"`
				TaskID  string          `json:"task_id"`
				Output  json.RawMessage `json:"output"`
			} `json:"result"`
		}
		if err := json.Unmarshal(line, &r); err != nil {
			b.Fatalf("result line %d: %v: %s", next, err, line)
		}
		if r.Index != next || !r.Result.Success || r.Result.TaskID != strconv.FormatInt(r.Index, 10) {
			b.Fatalf("result %d: want index %d, a success of task %d: %s", next, next, next, line)
		}
		next++
	}
	if next != int64(n) {
		b.Fatalf("%d results, want %d (%v)", next, n, sc.Err())
	}
}

// BenchmarkBatchMillion is issue 32 part 6 (`make bench-batch`): a batch
// of SVC_BENCH_BATCH_TASKS (default 1,000,000) test:echo tasks uploaded
// as NDJSON to the real `svc serve` binary with its defaults (SQLite run
// store under its data dir), from this process: the upload's rate, the
// batch's tasks/s beside the same tasks as one streamed gather (the
// baseline, same server, same run), the server's peak RSS at a tenth of
// the size and at the full size (flat in the batch size: goal <= 256 MB);
// then the same batch again with the server killed (SIGKILL) at half-way
// and restarted on its data dir: the time from the restart's exec to the
// batch running again, and every result there once, in order. Then the
// same over four `svc worker start` processes through serve's embedded
// NATS (rate and RSS, no kill).
func BenchmarkBatchMillion(b *testing.B) {
	n := 1_000_000
	if v := os.Getenv(batchTasksEnv); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1000 {
			b.Fatalf("%s=%q: want a count >= 1000", batchTasksEnv, v)
		}
	}
	bin, specs := svcBinary(b), outsideSpecs(b)
	fmt.Printf("batch benchmark: %d tasks, load average %s\n", n, loadAvg())
	for b.Loop() {
		// 1: a tenth, then the whole batch, then the streamed gather, on one server.
		dir := b.TempDir()
		port := freePort(b)
		p, _ := startLife(b, bin, specs, filepath.Join(dir, "data"), port, filepath.Join(dir, "serve.log"))
		idle := rssMiB(p.cmd.Process.Pid)
		for _, size := range []int{n / 10, n} {
			id, up := batchUpload(b, p.url, size)
			upPeak := rssMiB(p.cmd.Process.Pid)
			start := time.Now()
			st, peak := batchWatch(b, p, id, 30*time.Minute, func(svc.BatchStatus) bool { return false })
			took := time.Since(start)
			if st.State != svc.BatchCompleted || st.Counts.Succeeded != int64(size) {
				b.Fatalf("batch of %d: %+v", size, st)
			}
			batchCheckResults(b, p.url, id, size)
			fmt.Printf("batch of %d: upload %.1f s (%.0f tasks/s), run %.1f s after it (%.0f tasks/s), RSS idle %.0f MiB, peak %.0f MiB (VmHWM %.0f MiB)\n",
				size, up.Seconds(), float64(size)/up.Seconds(), took.Seconds(), float64(size)/took.Seconds(), idle, max(peak, upPeak),
				procPeakRSS(p.cmd.Process.Pid)/(1<<20))
		}
		rate := gatherNDJSON(b, p.url, n, 2000)
		fmt.Printf("baseline, the same %d tasks as one streamed gather: %.0f tasks/s\n", n, rate)
		p.stop()

		// 2: killed at half-way, restarted.
		dir = b.TempDir()
		data, logPath := filepath.Join(dir, "data"), filepath.Join(dir, "serve.log")
		p, _ = startLife(b, bin, specs, data, port, logPath)
		id, _ := batchUpload(b, p.url, n)
		st, peak1 := batchWatch(b, p, id, 30*time.Minute, func(st svc.BatchStatus) bool { return st.Counts.Succeeded >= int64(n/2) })
		kill9(p)
		p2, exec := startLife(b, bin, specs, data, port, logPath)
		ready := time.Since(exec)
		before := st.Counts.Succeeded
		st2, _ := batchWatch(b, p2, id, 10*time.Minute, func(st svc.BatchStatus) bool { return st.Counts.Succeeded > before+1000 })
		moving := time.Since(exec)
		end, peak2 := batchWatch(b, p2, id, 30*time.Minute, func(svc.BatchStatus) bool { return false })
		if end.State != svc.BatchCompleted || end.Counts.Succeeded != int64(n) {
			b.Fatalf("batch after the restart: %+v", end)
		}
		batchCheckResults(b, p2.url, id, n)
		fmt.Printf("killed at %d of %d done (seen %d): restart to /readyz %.2f s, to the batch moving again (%d done) %.2f s; every result once; peak RSS %.0f MiB before, %.0f MiB after\n",
			before, n, st.Counts.Succeeded, ready.Seconds(), st2.Counts.Succeeded, moving.Seconds(), peak1, peak2)
		p2.stop()

		// 3: four workers through embedded NATS.
		dir = b.TempDir()
		nport := freePort(b)
		p, _ = startLife(b, bin, specs, filepath.Join(dir, "data"), freePort(b), filepath.Join(dir, "serve.log"),
			"--broker", "embedded", "--nats-listen", fmt.Sprintf("127.0.0.1:%d", nport))
		var workers []*workerProc
		for i := range 4 {
			workers = append(workers, startWorkerNamed(b, bin, fmt.Sprintf("nats://127.0.0.1:%d", nport), specs, p.url, fmt.Sprintf("batch-worker-%d", i)))
		}
		id, up := batchUpload(b, p.url, n)
		start := time.Now()
		end, peak := batchWatch(b, p, id, 30*time.Minute, func(svc.BatchStatus) bool { return false })
		took := time.Since(start)
		if end.State != svc.BatchCompleted || end.Counts.Succeeded != int64(n) {
			b.Fatalf("fleet batch: %+v", end)
		}
		batchCheckResults(b, p.url, id, n)
		var wrss float64
		for _, w := range workers {
			wrss = max(wrss, rssMiB(w.cmd.Process.Pid))
		}
		fmt.Printf("4 workers, embedded NATS: upload %.1f s (%.0f tasks/s), run %.1f s (%.0f tasks/s), serve peak RSS %.0f MiB, largest worker RSS %.0f MiB\n",
			up.Seconds(), float64(n)/up.Seconds(), took.Seconds(), float64(n)/took.Seconds(), peak, wrss)
		for _, w := range workers {
			w.stop()
		}
		p.stop()
	}
}

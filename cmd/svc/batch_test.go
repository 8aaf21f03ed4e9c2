package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc"
)

// svc batch against a real svc serve: submit a file with a bad line,
// follow the results to the end, status, list, and the refusals' exits.
func TestBatchCLI(t *testing.T) {
	t.Parallel()
	s := startServe(t, nil, "--specs", slowSpecs(t))
	var file strings.Builder
	for i := range 50 {
		if i == 7 {
			file.WriteString("not json\n\n")
			continue
		}
		fmt.Fprintf(&file, `{"id": "t%d", "input": %d}`+"\n", i, i)
	}
	path := tempFile(t, "tasks.ndjson", file.String())
	r := mustExec(t, 0, nil, "batch", "submit", path, "--target", "echo", "--max-concurrency", "5", "--url", s.url)
	id := strings.TrimSpace(r.stdout)
	if id == "" || !strings.Contains(r.stderr, "50 tasks stored") {
		t.Fatalf("submit: %q %q", r.stdout, r.stderr)
	}
	r = mustExec(t, 0, nil, "batch", "results", id, "--follow", "--url", s.url)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 50 {
		t.Fatalf("%d result lines:\n%s", len(lines), r.stdout)
	}
	for i, l := range lines {
		var line struct {
			Index  int             `json:"index"`
			Result svc.AgentResult `json:"result"`
		}
		if err := json.Unmarshal([]byte(l), &line); err != nil || line.Index != i {
			t.Fatalf("line %d: %s", i, l)
		}
		if (i == 7) == line.Result.Success || (i != 7 && string(line.Result.Output) != fmt.Sprint(i)) {
			t.Fatalf("line %d: %s", i, l)
		}
	}
	var st svc.BatchStatus
	for deadline := time.Now().Add(20 * time.Second); ; {
		r = mustExec(t, 0, nil, "batch", "status", id, "--url", s.url)
		if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
			t.Fatal(err)
		}
		if st.State != svc.BatchRunning || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st.State != svc.BatchCompleted || st.Counts != (svc.BatchCounts{Total: 50, Succeeded: 49, Failed: 1}) {
		t.Fatalf("status %+v", st)
	}
	r = mustExec(t, 0, nil, "batch", "results", id, "--order", "finish", "--after", "45", "--url", s.url)
	if n := strings.Count(r.stdout, "\n"); n != 5 {
		t.Fatalf("%d results by finish after 45:\n%s", n, r.stdout)
	}
	r = mustExec(t, 0, nil, "batch", "--url", s.url)
	if !strings.Contains(r.stdout, id) || !strings.Contains(r.stdout, "completed") {
		t.Fatalf("list:\n%s", r.stdout)
	}
	r = mustExec(t, 0, nil, "batch", "cancel", id, "--url", s.url)
	if strings.TrimSpace(r.stdout) != "batch "+id+" completed" {
		t.Fatalf("cancel of an ended batch: %q", r.stdout)
	}
	mustExec(t, 1, nil, "batch", "submit", path, "--target", "nope", "--url", s.url)
	mustExec(t, 1, nil, "batch", "status", "nope", "--url", s.url)
	mustExec(t, 2, nil, "batch", "submit", path, "--url", s.url)
	// --mode provider reaches the server, which refuses the test model
	// (no batch API) saying so; an unknown mode is bad usage.
	if r := mustExec(t, 1, nil, "batch", "submit", path, "--target", "echo", "--mode", "provider", "--url", s.url); !strings.Contains(r.stderr, "no batch API") {
		t.Fatalf("--mode provider on echo: %q", r.stderr)
	}
	mustExec(t, 2, nil, "batch", "submit", path, "--target", "echo", "--mode", "fast", "--url", s.url)
	mustExec(t, 2, nil, "batch", "results", id, "--order", "sideways", "--url", s.url)
}

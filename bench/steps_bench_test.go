package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc"
)

// BenchmarkStepRecording is issue 30 part 1's cost of recording: the
// writes of 2,000 runs from 64 concurrent callers, each run created,
// started, taking 4 model calls (an agent_completed event each) and
// finished, per persistent store with group commit on, without step
// recording ("off") and with each call's response (about 1 KiB, with usage
// and cost) appended to the run's step log as one more write ("on"), the
// two alternated in the same run. It reports runs/s and the store's CPU
// per run; the cost of recording is the ratio of on to off.
func BenchmarkStepRecording(b *testing.B) {
	const (
		n       = 2000
		calls   = 4
		callers = 64
	)
	response, _ := json.Marshal(map[string]any{
		"content":  strings.Repeat("The answer, as the model wrote it. ", 28),
		"usage":    map[string]int{"input_tokens": 812, "output_tokens": 240},
		"cost_usd": 0.00431, "model": "openai:gpt-4o-mini",
	})
	for _, st := range groupStores(b) {
		if !strings.HasSuffix(st.name, "/group") {
			continue
		}
		for _, mode := range []string{"off", "on"} {
			b.Run(strings.TrimSuffix(st.name, "/group")+"/"+mode, func(b *testing.B) {
				var total, cpu time.Duration
				for i := 0; i < b.N; i++ {
					store := st.open()
					steps, _ := store.(svc.StepLog)
					if steps == nil {
						b.Fatalf("%T is not a StepLog", store)
					}
					ctx := context.Background()
					cpu0 := cpuTime()
					start := time.Now()
					var wg sync.WaitGroup
					for c := range callers {
						wg.Go(func() {
							for j := c; j < n; j += callers {
								if err := oneRun(ctx, store, steps, fmt.Sprintf("r%d-%d", i, j), calls, mode == "on", response); err != nil {
									b.Error(err)
									return
								}
							}
						})
					}
					wg.Wait()
					total += time.Since(start)
					cpu += cpuTime() - cpu0
					_ = store.Close()
					if b.Failed() {
						b.FailNow()
					}
				}
				b.ReportMetric(float64(n*b.N)/total.Seconds(), "runs/s")
				b.ReportMetric(float64(cpu.Microseconds())/float64(n*b.N), "cpu_us/run")
			})
		}
	}
}

// oneRun makes the store writes of one run of calls model calls, with a
// step appended after each call when record is set.
func oneRun(ctx context.Context, s svc.RunStore, steps svc.StepLog, id string, calls int, record bool, response []byte) error {
	if err := s.Create(ctx, svc.RunRecord{RunID: id, Target: "a", Kind: svc.TargetAgent}); err != nil {
		return err
	}
	if err := s.SetState(ctx, id, svc.RunRunning, "", nil); err != nil {
		return err
	}
	for k := range calls {
		if record {
			if _, err := steps.AppendSteps(ctx, id, svc.RunStep{Kind: svc.StepModelCall, Key: svc.StepKey("a", k), Data: response}); err != nil {
				return err
			}
		}
		if _, err := s.Append(ctx, id, svc.RunEvent{Type: svc.RunAgentCompleted, Agent: "a", TaskID: id}); err != nil {
			return err
		}
	}
	return s.Finish(ctx, id, svc.RunCompleted, "", json.RawMessage(`{"success":true}`), nil)
}

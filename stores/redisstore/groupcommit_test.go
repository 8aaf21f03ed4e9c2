package redisstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/stores/redisstore"
	"github.com/svc-dev/svc/stores/storetest"
)

// TestContractOneRoundTripPerWrite runs the suite with group commit off
// (MaxBatch 1), the benchmarks' baseline.
func TestContractOneRoundTripPerWrite(t *testing.T) {
	t.Parallel() // its own server or files: the suites overlap their waits
	url := startRedis(t)
	storetest.Run(t, func(t *testing.T) svc.RunStore {
		return open(t, redisstore.Options{URL: url, KeyPrefix: uniquePrefix(), MaxBatch: 1})
	})
}

// TestPipelineAfterScriptFlush: the server forgot the scripts (a restart,
// SCRIPT FLUSH), so the pipelined EVALSHAs of a batch fail with NOSCRIPT;
// each such write is run again and loads its script, and every caller
// gets its own write's answer.
func TestPipelineAfterScriptFlush(t *testing.T) {
	url := startRedis(t)
	s := open(t, redisstore.Options{URL: url, KeyPrefix: uniquePrefix()})
	ctx := context.Background()
	const n = 100
	for i := range n {
		if err := s.Create(ctx, svc.RunRecord{RunID: fmt.Sprint("r", i), Target: "echo", Kind: svc.TargetAgent}); err != nil {
			t.Fatal(err)
		}
	}
	if err := rawClient(t, url).ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			errs[i] = s.SetState(ctx, fmt.Sprint("r", i), svc.RunRunning, "", nil)
			if errs[i] == nil {
				_, errs[i] = s.Append(ctx, fmt.Sprint("r", i), svc.RunEvent{Type: svc.RunAgentStarted})
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("r%d after SCRIPT FLUSH: %v", i, err)
		}
		if rec, err := s.Get(ctx, fmt.Sprint("r", i)); err != nil || rec.State != svc.RunRunning {
			t.Fatalf("r%d: %+v %v", i, rec, err)
		}
	}
}

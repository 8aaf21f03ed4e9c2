package supervisor_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/model"
	"github.com/svc-dev/svc/supervisor"
)

// A gather's results come in task order whatever order its invocations
// finish in (each result is made when its invocation finishes), with the
// outcome of each: success, a model failure, a timeout. The model reads
// its context through a derived one, as a provider's HTTP call does.
func TestGatherResultsOutOfOrder(t *testing.T) {
	reg := model.NewRegistry()
	reg.Register("order", func(string) (svc.Model, error) {
		return svc.ModelFunc(func(ctx context.Context, req svc.ModelRequest) (svc.ModelResponse, error) {
			var n int
			if err := json.Unmarshal(req.Messages[0].Content, &n); err != nil {
				return svc.ModelResponse{}, err
			}
			call, cancel := context.WithCancel(ctx)
			defer cancel()
			d := time.Duration(20-n%20) * time.Millisecond // later tasks finish first
			if n%10 == 3 {
				d = time.Hour // times out
			}
			select {
			case <-time.After(d):
			case <-call.Done():
				return svc.ModelResponse{}, context.Cause(call)
			}
			if n%10 == 7 {
				return svc.ModelResponse{}, svc.Errorf(svc.KindSpecValidation, "task %d fails", n)
			}
			return svc.ModelResponse{Output: req.Messages[0].Content}, nil
		}), nil
	})
	o := opts(func(o *svc.Options) { o.TimeoutSeconds = 0.3 })
	rt := newRuntime(t, o, nil, reg, svc.Agent{Name: "o", Model: "order:x"})
	tasks := make([]svc.TaskSpec, 100)
	for i := range tasks {
		tasks[i] = svc.TaskSpec{ID: "t" + strconv.Itoa(i), Input: json.RawMessage(strconv.Itoa(i))}
	}
	res, err := rt.Gather(context.Background(), "o", tasks, 40)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != len(tasks) {
		t.Fatalf("%d results for %d tasks", len(res), len(tasks))
	}
	for i, r := range res {
		if r.TaskID != tasks[i].ID || r.AgentName != "o" || r.Metadata.Attempts < 1 {
			t.Fatalf("result %d: %+v", i, r)
		}
		switch i % 10 {
		case 3:
			if r.Success || r.Error == nil || r.Error.Type != "TimeoutError" {
				t.Errorf("task %d: %+v, want a TimeoutError", i, r)
			}
		case 7:
			if r.Success || r.Error == nil {
				t.Errorf("task %d: %+v, want a failure", i, r)
			}
		default:
			if !r.Success || string(r.Output) != fmt.Sprint(i) {
				t.Errorf("task %d: %+v", i, r)
			}
		}
	}
}

// A run cancelled by the runtime's shutdown fails with ShuttingDown, also
// when the model sees the cancel through a context derived from the
// invocation's (the cause travels through it).
func TestShutdownCauseThroughDerivedContext(t *testing.T) {
	reg := model.NewRegistry()
	started := make(chan struct{}, 1)
	seen := make(chan error, 1)
	reg.Register("wait", func(string) (svc.Model, error) {
		return svc.ModelFunc(func(ctx context.Context, req svc.ModelRequest) (svc.ModelResponse, error) {
			call, cancel := context.WithCancel(ctx)
			defer cancel()
			started <- struct{}{}
			<-call.Done()
			seen <- context.Cause(call)
			return svc.ModelResponse{}, call.Err()
		}), nil
	})
	rt, err := supervisor.New(supervisor.Config{Models: reg})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Register(svc.Agent{Name: "w", Model: "wait:x"}); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		res, err := rt.Run(context.Background(), "w", svc.TaskSpec{Input: json.RawMessage(`1`)})
		if err == nil {
			err = res.Err
		}
		errc <- err
	}()
	<-started
	// A short grace: the run is then cancelled (Shutdown says so).
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := rt.Shutdown(ctx); err == nil {
		t.Error("Shutdown: no error, want the runs it cancelled")
	}
	if c := <-seen; !errors.Is(c, svc.ErrShuttingDown) {
		t.Errorf("the model's derived context: cause %v, want the shutdown", c)
	}
	if err := <-errc; !errors.Is(err, svc.ErrShuttingDown) {
		t.Errorf("run: %v, want ShuttingDown", err)
	}
}

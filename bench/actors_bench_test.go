package bench

import (
	"context"
	"encoding/json"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/actors/msg"
	"github.com/svc-dev/svc/supervisor"
)

// BenchmarkMessageAPI is issue 18's figure: test:echo runs per second
// through the message API (a host actor keeping `conc` RunAgent requests
// out, a new one per reply) against the same runs through the Go API
// (`conc` goroutines calling Run), on one runtime in the host's actor
// system, alternating the two rounds times in one process. Beside the
// rates it reports the process's CPU time per run on each path
// (getrusage, GC included) and their ratio, cpu_ratio (Go API's over the
// message API's: 1 when a run costs the same CPU on both paths), which a
// loaded machine disturbs less than the rates.
func BenchmarkMessageAPI(b *testing.B) {
	const n, conc, rounds = 20_000, 256, 3
	host := supervisor.NewActorSystem(nil)
	defer host.Shutdown()
	rt, err := supervisor.New(supervisor.Config{System: host})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = rt.Close() }()
	if err := rt.Register(svc.Agent{Name: "echo", Model: "test:echo"}); err != nil {
		b.Fatal(err)
	}
	inputs := make([]json.RawMessage, n)
	for i := range inputs {
		inputs[i] = json.RawMessage(`{"n":` + strconv.Itoa(i) + `,"text":"hello world"}`)
	}

	goAPI := func() time.Duration {
		var next atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for range conc {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := next.Add(1) - 1; i < n; i = next.Add(1) - 1 {
					res, err := rt.Run(context.Background(), "echo", svc.TaskSpec{Input: inputs[i]})
					if err != nil || !res.Success {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		return time.Since(start)
	}
	msgAPI := func() time.Duration {
		done := make(chan error, 1)
		start := time.Now()
		pid := host.Root.Spawn(actor.PropsFromProducer(func() actor.Actor {
			return &fanOut{api: rt.PID(), inputs: inputs, conc: conc, done: done}
		}))
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		d := time.Since(start)
		_ = host.Root.StopFuture(pid).Wait()
		return d
	}
	// Warm up both paths.
	goAPI()
	msgAPI()
	b.ResetTimer()
	var goDur, msgDur, goCPU, msgCPU time.Duration
	for i := 0; i < b.N; i++ {
		for range rounds {
			runtime.GC()
			c := cpuTime()
			goDur += goAPI()
			runtime.GC() // the round's garbage is the round's cost
			goCPU += cpuTime() - c
			c = cpuTime()
			msgDur += msgAPI()
			runtime.GC()
			msgCPU += cpuTime() - c
		}
	}
	total := float64(n * rounds * b.N)
	goRate, msgRate := total/goDur.Seconds(), total/msgDur.Seconds()
	b.ReportMetric(msgRate, "msg_runs/s")
	b.ReportMetric(goRate, "go_runs/s")
	b.ReportMetric(msgRate/goRate, "ratio")
	b.ReportMetric(float64(msgCPU.Microseconds())/total, "msg_cpu_µs/run")
	b.ReportMetric(float64(goCPU.Microseconds())/total, "go_cpu_µs/run")
	b.ReportMetric(float64(goCPU)/float64(msgCPU), "cpu_ratio")
}

// fanOut is the host's actor of BenchmarkMessageAPI: conc requests out at
// a time, a new one per reply, until every input has its reply.
type fanOut struct {
	api     *actor.PID
	inputs  []json.RawMessage
	conc    int
	sent    int
	replies int
	done    chan<- error
}

func (f *fanOut) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *actor.Started:
		for range f.conc {
			f.send(c)
		}
	case *msg.AgentResult:
		f.replies++
		if !m.Result.Success {
			f.finish(m.Result.Err)
			return
		}
		if f.replies == len(f.inputs) {
			f.finish(nil)
			return
		}
		f.send(c)
	case *msg.Error:
		f.finish(m)
	}
}

// finish reports once; Receive never waits on done.
func (f *fanOut) finish(err error) {
	select {
	case f.done <- err:
	default:
	}
}

func (f *fanOut) send(c actor.Context) {
	if f.sent == len(f.inputs) {
		return
	}
	c.Request(f.api, &msg.RunAgent{Agent: "echo", Task: svc.TaskSpec{Input: f.inputs[f.sent]}})
	f.sent++
}

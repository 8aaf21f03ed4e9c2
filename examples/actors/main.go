// Command actors shows svc inside a host's protoactor actor system: the
// runtime spawns its actors in the host's system, under "svc/", and the
// host's actors run agents by message (package actors/msg). A coordinator
// with its own supervisor strategy fans out runs to svc, aggregates the
// replies, has one actor subscribed to the runtime's events, submits a
// slow run, watches its actor and cancels it, and the host shuts svc down
// before its own system.
//
//	go run ./examples/actors            # 1000 runs on test:echo
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"strconv"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/actors/msg"
	"github.com/svc-dev/svc/supervisor"
)

func main() {
	n := flag.Int("runs", 1000, "agent runs to fan out")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, err := run(ctx, *n)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Fprintln(os.Stdout, s)
}

// Summary is what the host saw.
type Summary struct {
	Runs      int   // replies to RunAgent
	Succeeded int   // of which successful
	InOrder   bool  // every reply's output was its own input (by Ref)
	Tokens    int64 // summed over the replies
	// SlowCancelled: the slow run's actor stopped after the Cancel and the
	// run's state is cancelled.
	SlowCancelled bool
	// Events and Dropped are the monitor's: agent_completed events it got,
	// and those its subscription dropped.
	Events  int
	Dropped uint64
	// SlowRunID is the slow run's id.
	SlowRunID string
}

func (s Summary) String() string {
	return fmt.Sprintf("%d runs, %d succeeded, outputs matched: %v, slow run cancelled: %v, monitor got %d agent_completed events (%d dropped)",
		s.Runs, s.Succeeded, s.InOrder, s.SlowCancelled, s.Events, s.Dropped)
}

// run is the host program: its actor system, svc inside it, the
// coordinator, and the shutdown in order (svc first, then the system).
func run(ctx context.Context, n int) (Summary, error) {
	// The host's system. svc.NewActorSystem configures it the way svc
	// configures its own (quiet protoactor logs); any system will do.
	system := supervisor.NewActorSystem(nil)
	defer system.Shutdown()

	rt, err := supervisor.New(supervisor.Config{System: system})
	if err != nil {
		return Summary{}, err
	}
	defer func() { _ = rt.Close() }()
	if err := rt.Register(
		svc.Agent{Name: "echo", Model: "test:echo"},
		svc.Agent{Name: "slow", Model: "test:echo", ModelSettings: map[string]any{"latency_ms": 600_000}},
	); err != nil {
		return Summary{}, err
	}

	done := make(chan Summary, 1)
	// The coordinator's supervisor strategy restarts a child that panics,
	// at most 3 times in 10 s. It decides for the host's actors only:
	// svc's actors are svc's supervisors' (none is a child of a host
	// actor).
	strategy := actor.NewOneForOneStrategy(3, 10*time.Second, actor.DefaultDecider)
	props := actor.PropsFromProducer(func() actor.Actor { return &coordinator{api: rt.PID(), n: n, done: done} },
		actor.WithSupervisor(strategy))
	coord := system.Root.Spawn(props)

	var s Summary
	select {
	case s = <-done:
	case <-ctx.Done():
		return Summary{}, ctx.Err()
	}
	// The run's state, from the Go API (the actor said it stopped).
	if st, err := rt.RunStatus(ctx, s.SlowRunID); err == nil {
		s.SlowCancelled = s.SlowCancelled && st.State == svc.RunCancelled
	}
	// svc first: its actors stop, the host's go on (the coordinator and
	// the monitor are still there), then the host stops its own.
	if err := rt.Shutdown(ctx); err != nil {
		return s, err
	}
	reply, err := system.Root.RequestFuture(coord, tallyRequest{}, 10*time.Second).Result()
	if err != nil {
		return s, fmt.Errorf("the host's coordinator after svc shut down: %w", err)
	}
	t := reply.(tally)
	s.Events, s.Dropped = t.events, t.dropped
	_ = system.Root.StopFuture(coord).Wait()
	return s, nil
}

type (
	tallyRequest struct{}
	tally        struct {
		events  int
		dropped uint64
	}
	monitorReady struct{}
)

// coordinator fans the runs out and aggregates the replies. Its Receive
// never waits: every request goes out with ctx.Request, and the replies
// come back as messages.
type coordinator struct {
	api     *actor.PID
	n       int
	done    chan<- Summary
	monitor *actor.PID
	sum     Summary
	slow    *actor.PID // the slow run's actor
}

func (c *coordinator) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		// The monitor first, so that it sees every run's events.
		// msg.AckEvents acknowledges each event once Receive has handled
		// it, which moves the subscription's window on.
		c.monitor = ctx.Spawn(actor.PropsFromProducer(func() actor.Actor { return &monitor{api: c.api} },
			actor.WithReceiverMiddleware(msg.AckEvents)))
	case monitorReady:
		ctx.Request(c.api, &msg.Submit{Ref: "slow", Request: svc.SubmitRequest{Target: "slow", Task: svc.TaskSpec{Input: json.RawMessage(`"slow"`)}}})
		for i := range c.n {
			ctx.Request(c.api, &msg.RunAgent{Ref: strconv.Itoa(i), Agent: "echo", Task: svc.TaskSpec{Input: json.RawMessage(strconv.Itoa(i))}})
		}
		c.sum.InOrder = true
	case *msg.AgentResult:
		c.sum.Runs++
		if m.Result.Success {
			c.sum.Succeeded++
		}
		if string(m.Result.Output) != m.Ref {
			c.sum.InOrder = false
		}
		c.sum.Tokens += m.Result.Metadata.TokensUsed
		c.check()
	case *msg.Error:
		c.sum.Runs++
		c.check()
	case *msg.Submitted:
		// Watch the run's actor, then cancel the run through it: its
		// Terminated says the run has ended.
		c.sum.SlowRunID, c.slow = m.RunID, m.Run
		ctx.Watch(m.Run)
		ctx.Request(m.Run, &msg.Cancel{Ref: "slow"})
	case *msg.Cancelled:
	case *actor.Terminated:
		if c.slow != nil && m.Who.Id == c.slow.Id {
			c.sum.SlowCancelled = true
			c.check()
		}
	case tallyRequest:
		ctx.Forward(c.monitor)
	}
}

// check reports once every reply is in and the slow run has ended.
func (c *coordinator) check() {
	if c.sum.Runs == c.n && c.sum.SlowCancelled && c.done != nil {
		c.done <- c.sum // buffered: never waits
		c.done = nil
	}
}

// monitor is subscribed to the runtime's agent_completed events of the
// echo agent.
type monitor struct {
	api     *actor.PID
	events  int
	dropped uint64
}

func (a *monitor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		ctx.Request(a.api, &msg.Subscribe{Ref: "events", Filter: svc.EventFilter{
			Agent: "echo", EventTypes: []svc.EventType{svc.EventAgentCompleted}}})
	case *msg.Subscribed:
		ctx.Send(ctx.Parent(), monitorReady{})
	case *msg.RuntimeEvent:
		a.events++
		a.dropped = m.Dropped
	case *msg.SubscriptionEnded:
		a.dropped = m.Dropped
	case tallyRequest:
		ctx.Respond(tally{events: a.events, dropped: a.dropped})
	}
}

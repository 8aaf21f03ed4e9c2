package actors

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/agent"
	"github.com/svc-dev/svc/group"
)

// StartGroup asks a shard to run a graph group on one task. Reply receives
// exactly one GroupReply.
type StartGroup struct {
	Ctx   context.Context
	Graph *group.Graph
	// Agents resolves the nodes' agents, from the snapshot the run started
	// with.
	Agents      map[string]*agent.Compiled
	Task        Task
	Metadata    map[string]string
	Depth       int
	ParentTrace string
	// ParentSpan is the span of the invocation that started the group run,
	// if one did.
	ParentSpan string
	Budget     *Budget
	Progress   *Progress
	Sink       RunSink
	// Deltas receives the streamed fragments of the nodes' invocations.
	Deltas svc.DeltaSink
	Reply  chan<- GroupReply
}

// GroupReply is the outcome of a group run.
type GroupReply struct {
	Result svc.RunResult
	Err    error
}

// Node states.
const (
	nodeWaiting = iota
	nodeRunning
	nodeDone
	nodeSkipped
)

type nodeState struct {
	node    *group.Node
	status  int
	pending int // incoming edges not yet resolved
	// fired holds the inputs built by fired incoming edges, by upstream
	// node; items those of a fired fan-out edge.
	fired  map[string]json.RawMessage
	items  []json.RawMessage
	fanout bool
	maxC   int
	input  json.RawMessage
	result svc.AgentResult
	pid    *actor.PID
}

// groupActor runs one graph: dataflow scheduling, where a node starts as soon
// as every incoming edge is resolved (fired or not), so independent branches
// run in parallel. Each node runs as a child run actor (one invocation, or
// one per fan-out item).
type groupActor struct {
	env *Env
	req *StartGroup

	ctx       context.Context
	cancel    context.CancelCauseFunc
	span      string // the group run's span: its nodes' invocations' parent
	start     time.Time
	nodes     map[string]*nodeState
	active    int
	done      bool // the caller has its answer
	stopped   bool
	completed bool // group_completed emitted
	// paused is the result of a node that waits for a person (a
	// svc.PauseError): the run parks once the nodes still running end,
	// each recording its outcome, and starts no other node meanwhile.
	paused  *svc.AgentResult
	dur     float64
	success bool // the group run succeeded, for group_completed
	tokens  int64
	cost    float64
	invs    int
}

func (g *groupActor) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *actor.Started:
		g.ctx, g.cancel = context.WithCancelCause(g.req.Ctx)
		g.start = time.Now()
		if !g.env.Silent {
			g.span = NewSpanID()
		}
		g.emit(svc.EventGroupStarted, svc.Payload{"group_name": g.req.Graph.Def.Name, "node_count": len(g.req.Graph.Nodes)})
		g.nodes = make(map[string]*nodeState, len(g.req.Graph.Nodes))
		for name, n := range g.req.Graph.Nodes {
			g.nodes[name] = &nodeState{node: n, pending: len(n.In), fired: map[string]json.RawMessage{}}
		}
		for _, name := range g.req.Graph.Entry {
			ns := g.nodes[name]
			ns.input = g.req.Task.Input
			g.startNode(c, ns)
		}
		g.maybeFinish(c)
	case *RunFinished:
		g.nodeFinished(c, g.nodes[m.Tag], m.Results)
	case cancelRun:
		kind := svc.KindCancelled
		if errors.Is(m.cause, svc.ErrShuttingDown) {
			kind = svc.KindShuttingDown
		}
		g.fail(c, svc.RunResult{}, &svc.Error{Kind: kind, Message: "group run cancelled", Err: m.cause})
	case *actor.Stopping:
		if g.cancel != nil {
			g.cancel(svc.ErrShuttingDown)
		}
		if !g.done {
			g.done = true
			g.req.Reply <- GroupReply{Err: svc.Errorf(svc.KindShuttingDown, "runtime is shutting down")}
		}
		g.stopped = true
	}
}

func (g *groupActor) taskID(ns *nodeState) string { return g.req.Task.ID + "/" + ns.node.Name }

// startNode spawns the run of a ready node.
func (g *groupActor) startNode(c actor.Context, ns *nodeState) {
	ns.status = nodeRunning
	g.active++
	var tasks []Task
	conc := 1
	if ns.fanout {
		tasks = make([]Task, len(ns.items))
		for i, it := range ns.items {
			tasks[i] = Task{ID: g.taskID(ns) + "/" + strconv.Itoa(i), Trace: g.req.Task.Trace, Input: it}
		}
		conc = ns.maxC
		if conc <= 0 {
			conc = svc.DefaultGatherConcurrency
		}
		if len(tasks) == 0 {
			// An empty fan-out: nothing to run, the node's output is [].
			g.active--
			ns.status = nodeDone
			ns.result = svc.AgentResult{AgentName: ns.node.Agent, TaskID: g.taskID(ns), Success: true,
				Output: json.RawMessage("[]"), Metadata: svc.ResultMetadata{TraceID: g.req.Task.Trace, Backend: g.env.BackendName()}}
			g.resolveOut(c, ns)
			return
		}
		conc = min(conc, len(tasks))
	} else {
		tasks = []Task{{ID: g.taskID(ns), Trace: g.req.Task.Trace, Input: ns.input}}
	}
	req := &StartRun{
		Ctx: g.ctx, Agent: g.req.Agents[ns.node.Agent], Tasks: tasks, MaxConcurrency: conc,
		Depth: g.req.Depth, ParentTrace: g.req.ParentTrace, ParentSpan: g.span, Budget: g.req.Budget,
		Progress: g.req.Progress, Sink: g.req.Sink, Deltas: g.req.Deltas, Tag: ns.node.Name,
	}
	r := &runActor{env: g.env, req: req}
	ns.pid = c.Spawn(g.env.props(func() actor.Actor { return r }))
}

func (g *groupActor) nodeFinished(c actor.Context, ns *nodeState, results []svc.AgentResult) {
	g.active--
	ns.pid = nil
	if g.done {
		g.maybeStop(c)
		return
	}
	if g.paused == nil {
		for i := range results {
			if _, ok := svc.Paused(results[i].Err); ok {
				g.paused = &results[i]
				break
			}
		}
	}
	if g.paused != nil {
		// Waiting for a person: the nodes in flight finish (their
		// outcomes are recorded, so a resume does not run them again),
		// nothing new starts, and the run parks with the first pause.
		if g.active == 0 {
			g.finish(c, GroupReply{Result: svc.RunResult{Agent: g.paused}, Err: g.paused.Err})
		}
		return
	}
	for _, r := range results {
		g.tokens += r.Metadata.TokensUsed
		g.cost += r.Metadata.CostUSD
		g.invs++
	}
	if !ns.fanout {
		ns.result = results[0]
		if !ns.result.Success {
			g.fail(c, svc.RunResult{Agent: &ns.result}, nil)
			return
		}
	} else {
		// Failed items are dropped unless all failed.
		outs := make([]json.RawMessage, 0, len(results))
		var md svc.ResultMetadata
		var lastErr error
		for _, r := range results {
			md.TokensUsed += r.Metadata.TokensUsed
			md.CostUSD += r.Metadata.CostUSD
			md.Attempts += r.Metadata.Attempts
			if r.Success {
				outs = append(outs, r.Output)
				md.Model = r.Metadata.Model
			} else {
				lastErr = r.Err
			}
		}
		if len(outs) == 0 {
			err := &svc.Error{Kind: svc.KindAllAgentsFailed, Agent: ns.node.Agent,
				Message: fmt.Sprintf("group %s: node %s: all %d fan-out items failed", g.req.Graph.Def.Name, ns.node.Name, len(results))}
			err.Err = lastErr
			g.fail(c, svc.RunResult{}, err)
			return
		}
		out, _ := json.Marshal(outs)
		md.TraceID, md.Backend = g.req.Task.Trace, g.env.BackendName()
		md.DurationMS = ms(time.Since(g.start))
		ns.result = svc.AgentResult{AgentName: ns.node.Agent, TaskID: g.taskID(ns), Success: true, Output: out, Metadata: md}
	}
	ns.status = nodeDone
	g.resolveOut(c, ns)
	g.maybeFinish(c)
}

// resolveOut decides every outgoing edge of a finished node and starts the
// targets that became ready.
func (g *groupActor) resolveOut(c actor.Context, ns *nodeState) {
	vars := group.Vars{Output: ns.result.Output, Input: ns.input, Metadata: g.req.Metadata}
	if ns.fanout {
		vars.Input = nil
	}
	for _, e := range ns.node.Out {
		target := g.nodes[e.To]
		fires, err := e.Fires(vars)
		if err != nil {
			g.fail(c, svc.RunResult{}, err)
			return
		}
		if fires {
			if e.IsFanOut() {
				items, err := e.Items(vars)
				if err != nil {
					g.fail(c, svc.RunResult{}, err)
					return
				}
				target.fanout, target.maxC = true, e.MaxConcurrency
				for _, it := range items {
					iv := vars
					iv.Item = it
					in, err := e.BuildInput(iv)
					if err != nil {
						g.fail(c, svc.RunResult{}, err)
						return
					}
					target.items = append(target.items, in)
				}
			} else {
				in, err := e.BuildInput(vars)
				if err != nil {
					g.fail(c, svc.RunResult{}, err)
					return
				}
				target.fired[ns.node.Name] = in
			}
		}
		target.pending--
		if target.pending == 0 {
			g.ready(c, target)
			if g.done {
				return
			}
		}
	}
}

// ready starts a node whose incoming edges are all resolved, or skips it
// (and everything only it feeds) when none of them fired.
func (g *groupActor) ready(c actor.Context, ns *nodeState) {
	if !ns.fanout && len(ns.fired) == 0 {
		ns.status = nodeSkipped
		for _, e := range ns.node.Out {
			t := g.nodes[e.To]
			t.pending--
			if t.pending == 0 {
				g.ready(c, t)
			}
		}
		return
	}
	if !ns.fanout {
		if len(ns.node.In) == 1 {
			for _, in := range ns.fired {
				ns.input = in
			}
		} else {
			ns.input = multiInput(ns)
		}
	}
	g.startNode(c, ns)
}

// multiInput is the input of a node with several incoming edges: an object
// keyed by the upstream nodes that fired, in definition order.
func multiInput(ns *nodeState) json.RawMessage {
	var b bytes.Buffer
	b.WriteByte('{')
	first := true
	for _, e := range ns.node.In {
		in, ok := ns.fired[e.From]
		if !ok {
			continue
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		k, _ := json.Marshal(e.From)
		b.Write(k)
		b.WriteByte(':')
		b.Write(in)
	}
	b.WriteByte('}')
	return b.Bytes()
}

func (g *groupActor) maybeFinish(c actor.Context) {
	if g.done || g.active > 0 {
		return
	}
	for _, ns := range g.nodes {
		if ns.status == nodeWaiting || ns.status == nodeRunning {
			return
		}
	}
	var fired []*nodeState
	for _, name := range g.req.Graph.Terminal {
		if ns := g.nodes[name]; ns.status == nodeDone {
			fired = append(fired, ns)
		}
	}
	dur := ms(time.Since(g.start))
	switch len(fired) {
	case 0:
		g.fail(c, svc.RunResult{}, &svc.Error{Kind: svc.KindTopology,
			Message: fmt.Sprintf("group %s: no terminal node fired (every path was cut by a condition)", g.req.Graph.Def.Name)})
		return
	case 1:
		res := fired[0].result
		res.TaskID = g.req.Task.ID
		res.Metadata.TraceID = g.req.Task.Trace
		res.Metadata.TokensUsed, res.Metadata.CostUSD, res.Metadata.DurationMS = g.tokens, g.cost, dur
		g.finish(c, GroupReply{Result: svc.RunResult{Agent: &res}})
	default:
		gr := &svc.GroupResult{Group: true, Success: true, Outputs: make(map[string]svc.AgentResult, len(fired)),
			Metadata: svc.GroupMetadata{TraceID: g.req.Task.Trace, GroupName: g.req.Graph.Def.Name, DurationMS: dur,
				TokensUsed: g.tokens, CostUSD: g.cost, Invocations: g.invs, Backend: g.env.BackendName()}}
		for _, ns := range fired {
			gr.Outputs[ns.node.Name] = ns.result
		}
		g.finish(c, GroupReply{Result: svc.RunResult{Group: gr}})
	}
}

// fail ends the run: the other nodes are stopped (their contexts cancelled),
// and the caller gets res (a failed node's result) or err.
func (g *groupActor) fail(c actor.Context, res svc.RunResult, err error) {
	if g.done {
		return
	}
	cause := err
	if cause == nil {
		cause = context.Canceled
	}
	g.cancel(cause)
	for _, ns := range g.nodes {
		if ns.pid != nil {
			c.Send(ns.pid, cancelRun{cause: cause})
		}
	}
	g.finish(c, GroupReply{Result: res, Err: err})
}

// finish answers the caller at once. The actor itself stays until the node
// runs it cancelled have reported, so their invocations end with their own
// agent_failed events, and group_completed is the run's last event.
func (g *groupActor) finish(c actor.Context, r GroupReply) {
	g.done = true
	g.dur = ms(time.Since(g.start))
	g.success = r.Err == nil && r.Result.Success()
	if g.active == 0 {
		g.emitCompleted() // before the answer, so callers see it
	}
	g.req.Reply <- r
	g.maybeStop(c)
}

func (g *groupActor) emitCompleted() {
	if !g.completed && g.paused == nil { // a paused run has not completed
		g.completed = true
		g.emit(svc.EventGroupCompleted, svc.Payload{"group_name": g.req.Graph.Def.Name, "duration_ms": g.dur, "success": g.success})
	}
}

func (g *groupActor) maybeStop(c actor.Context) {
	if g.active > 0 || g.stopped {
		return
	}
	g.stopped = true
	g.emitCompleted()
	c.Send(c.Parent(), runEnded{c.Self()})
	c.Stop(c.Self())
}

func (g *groupActor) emit(t svc.EventType, p svc.Payload) {
	g.env.Emitter.Emit(svc.RuntimeEvent{
		EventType: t, Timestamp: time.Now().UTC(), AgentName: g.req.Graph.Def.Name,
		TraceID: g.req.Task.Trace, ParentTraceID: g.req.ParentTrace,
		SpanID: g.span, ParentSpanID: g.req.ParentSpan, Payload: p,
	})
}

func (*RunFinished) IgnoreDeadLetterLogging() {}

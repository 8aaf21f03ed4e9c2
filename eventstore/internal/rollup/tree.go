package rollup

import (
	"context"
	"slices"
	"time"

	"github.com/svc-dev/svc"
)

// MaxTreeDepth is how many levels of child runs Tree follows below the
// requested run; deeper runs are left out.
const MaxTreeDepth = 16

// Tree node statuses.
const (
	statusRunning   = "running"
	statusCompleted = "completed"
	statusFailed    = "failed"
)

// StoredEvent is an event with its place in the store's order.
type StoredEvent struct {
	Ev svc.RuntimeEvent
	At Pos
}

// TreeSource is what a store gives BuildTree.
type TreeSource interface {
	// ChildTraces returns, sorted, the distinct trace ids other than
	// trace of the events whose parent trace is trace.
	ChildTraces(ctx context.Context, trace string) ([]string, error)
	// Events returns the events of each of traces, oldest first.
	Events(ctx context.Context, traces []string) (map[string][]StoredEvent, error)
}

// BuildTree builds the tree of one run. Both stores share it, so their
// trees are the same.
//
// The shape:
//   - The root is the run (kind "group" when the trace has a group_started
//     of its own, named after the group; else "run", named after its first
//     agent). Its events are the group_started and group_completed.
//   - Below it, one "agent" node per invocation: the agent_spawned,
//     agent_dispatched, agent_completed and agent_failed events of one
//     task_id and agent (a new invocation starts when one of those comes
//     after the previous invocation's end).
//   - Below an invocation, one "tool" node per tool call: a
//     tool_call_started paired, in order, with the next completed or
//     failed call of the same tool name in that invocation.
//   - Other events (budget_exceeded, depth_limit_exceeded, batch_*, ...)
//     are "event" nodes below the invocation of their task and agent, else
//     below the root.
//   - Child runs, the events whose parent_trace_id is this trace, are
//     nested below the invocation whose span id is their parent_span_id.
//     Events without span ids (stored by earlier versions) fall back to
//     time: below the invocation of this trace that was running when they
//     started (the latest started of those, when several were), else
//     below the root. A child run with its own trace id is a subtree of
//     its own (followed up to MaxTreeDepth levels); a child run that
//     shares this trace id (a team's delegate call) is an invocation
//     placed the same way.
//
// Events link by ids where they have them: an invocation is its span id
// (its agent_*, tool_call_* and budget events carry it), a lone event
// with a span id or parent span id goes below that invocation, and a
// group's or batch's span is the root's. Only events without span ids
// are paired and placed by (task, agent) and time.
//
// Status: an invocation and a tool call are running until their
// completed or failed event; an event node is failed for the failure
// event types and completed otherwise; the root is running while an
// invocation below it runs or its group has not completed, else failed if
// an invocation or event below it failed, else completed. End is the last
// event's time, nil while running. Children are in start order.
func BuildTree(ctx context.Context, src TreeSource, traceID string) (svc.EventTree, error) {
	if traceID == "" {
		return svc.EventTree{}, svc.Errorf(svc.KindRegistry, "eventstore: no trace id")
	}
	// First every trace the tree reaches, breadth first so that the depth
	// bound keeps the same set whatever the order of the children...
	depth := map[string]int{traceID: 0}
	order := []string{traceID}
	children := map[string][]string{}
	for i := 0; i < len(order); i++ {
		t := order[i]
		if depth[t] == MaxTreeDepth {
			continue
		}
		kids, err := src.ChildTraces(ctx, t)
		if err != nil {
			return svc.EventTree{}, err
		}
		children[t] = kids
		for _, k := range kids {
			if _, ok := depth[k]; !ok {
				depth[k] = depth[t] + 1
				order = append(order, k)
			}
		}
	}
	// ...then their events in one go.
	evs, err := src.Events(ctx, order)
	if err != nil {
		return svc.EventTree{}, err
	}
	if len(evs[traceID]) == 0 && len(children[traceID]) == 0 {
		return svc.EventTree{}, svc.Errorf(svc.KindRegistry, "eventstore: no events of trace %q", traceID)
	}
	b := &treeBuilder{evs: evs, children: children, placed: map[string]bool{traceID: true}}
	root := b.build(traceID)
	return svc.EventTree{TraceID: traceID, Root: root.n}, nil
}

// parentSpanOf is the parent span id by which child run trace hangs below
// parent: that of its first event naming parent as its parent trace.
func (b *treeBuilder) parentSpanOf(trace, parent string) string {
	for i := range b.evs[trace] {
		if ev := &b.evs[trace][i].Ev; ev.ParentTraceID == parent && ev.ParentSpanID != "" {
			return ev.ParentSpanID
		}
	}
	return ""
}

type treeBuilder struct {
	evs      map[string][]StoredEvent
	children map[string][]string
	placed   map[string]bool // traces already in the tree
}

type tnode struct {
	n      *svc.TreeNode
	start  Pos
	end    Pos
	ended  bool
	nested bool                // an invocation of a child run sharing the trace
	open   map[string][]*tnode // tool calls awaiting their end, by tool name
	// parentSpan is the parent span id of the node's first event: the
	// invocation (or group or batch run) it hangs below.
	parentSpan string
}

type invKey struct{ task, agent string }

func newNode(kind, name string, ev *svc.RuntimeEvent, at Pos) *tnode {
	n := &svc.TreeNode{
		Kind: kind, Name: name, TraceID: ev.TraceID, Status: statusRunning,
		Start: ev.Timestamp, Events: []svc.RuntimeEvent{}, Children: []*svc.TreeNode{},
	}
	if kind != "run" && ev.TaskID != "" {
		id := ev.TaskID
		n.TaskID = &id
	}
	return &tnode{n: n, start: at}
}

// finish ends t at ev with status.
func (t *tnode) finish(ev *svc.RuntimeEvent, at Pos, status string) {
	t.n.Status, t.end, t.ended = status, at, true
	end := ev.Timestamp
	t.n.End = &end
}

type placedNode struct {
	parent *tnode // nil: the root
	node   *tnode
}

func (b *treeBuilder) build(trace string) *tnode {
	evs := b.evs[trace]
	root := &tnode{n: &svc.TreeNode{
		Kind: "run", TraceID: trace, Status: statusRunning,
		Events: []svc.RuntimeEvent{}, Children: []*svc.TreeNode{},
	}}
	if len(evs) > 0 {
		root.start, root.n.Start = evs[0].At, evs[0].Ev.Timestamp
	}
	var (
		invs   []*tnode
		cur    = map[invKey]*tnode{}
		nodes  []placedNode // everything below the root, with its parent once known
		byTime []*tnode     // nested nodes to place (by span id, else by time)
		busy   bool         // the group is open, or an invocation below the root runs
		failed bool
		// groupOutcome is group_completed's "success", when it has one.
		groupOutcome *bool
		// spans are the invocations with span ids; rootSpans the spans of
		// the run itself (its group or batch).
		spans     = map[string]*tnode{}
		rootSpans = map[string]bool{}
	)
	invocation := func(se *StoredEvent, reopen bool) *tnode {
		k := invKey{se.Ev.TaskID, se.Ev.AgentName}
		span := se.Ev.SpanID
		inv := cur[k]
		if span != "" {
			inv = spans[span]
		}
		if inv == nil || (span == "" && reopen && inv.ended) {
			inv = newNode("agent", se.Ev.AgentName, &se.Ev, se.At)
			inv.nested = se.Ev.ParentTraceID == trace
			inv.parentSpan = se.Ev.ParentSpanID
			inv.open = map[string][]*tnode{}
			cur[k] = inv
			if span != "" {
				spans[span] = inv
			}
			invs = append(invs, inv)
			if inv.nested {
				byTime = append(byTime, inv)
			} else {
				nodes = append(nodes, placedNode{node: inv})
			}
		}
		return inv
	}
	for i := range evs {
		se := &evs[i]
		ev := &se.Ev
		switch ev.EventType {
		case svc.EventGroupStarted, svc.EventGroupCompleted:
			if ev.ParentTraceID == trace {
				break // a nested group: a lone event
			}
			root.n.Events = append(root.n.Events, *ev)
			if ev.SpanID != "" {
				rootSpans[ev.SpanID] = true
			}
			if ev.EventType == svc.EventGroupStarted {
				root.n.Kind, busy = "group", true
				if root.n.Name = Str(ev.Payload["group_name"]); root.n.Name == "" {
					root.n.Name = ev.AgentName
				}
			} else {
				busy = false
				if ok, known := ev.Payload["success"].(bool); known {
					groupOutcome = &ok
				}
			}
			continue
		case svc.EventAgentSpawned, svc.EventAgentDispatched:
			inv := invocation(se, true)
			inv.n.Events = append(inv.n.Events, *ev)
			continue
		case svc.EventAgentCompleted, svc.EventAgentFailed:
			inv := invocation(se, true)
			inv.n.Events = append(inv.n.Events, *ev)
			status := statusCompleted
			if ev.EventType == svc.EventAgentFailed {
				status = statusFailed
			}
			inv.finish(ev, se.At, status)
			continue
		case svc.EventToolCallStarted:
			inv := invocation(se, false)
			name := Str(ev.Payload["tool_name"])
			call := newNode("tool", name, ev, se.At)
			call.n.Events = append(call.n.Events, *ev)
			inv.open[name] = append(inv.open[name], call)
			nodes = append(nodes, placedNode{parent: inv, node: call})
			continue
		case svc.EventToolCallCompleted, svc.EventToolCallFailed:
			inv := invocation(se, false)
			name := Str(ev.Payload["tool_name"])
			var call *tnode
			if q := inv.open[name]; len(q) > 0 {
				call, inv.open[name] = q[0], q[1:]
			} else { // its start is not stored (pruned, or never emitted)
				call = newNode("tool", name, ev, se.At)
				nodes = append(nodes, placedNode{parent: inv, node: call})
			}
			call.n.Events = append(call.n.Events, *ev)
			status := statusCompleted
			if ev.EventType == svc.EventToolCallFailed {
				status = statusFailed
			}
			call.finish(ev, se.At, status)
			continue
		}
		// A lone event.
		lone := newNode("event", string(ev.EventType), ev, se.At)
		lone.n.Events = append(lone.n.Events, *ev)
		lone.parentSpan = ev.ParentSpanID
		status := statusCompleted
		if ev.EventType.IsFailure() {
			status = statusFailed
		}
		lone.finish(ev, se.At, status)
		if ev.SpanID != "" {
			if inv := spans[ev.SpanID]; inv != nil { // budget_exceeded of an invocation
				nodes = append(nodes, placedNode{parent: inv, node: lone})
				continue
			}
			if ev.EventType == svc.EventBatchStarted || ev.EventType == svc.EventBatchCompleted {
				rootSpans[ev.SpanID] = true
			}
		}
		switch inv := cur[invKey{ev.TaskID, ev.AgentName}]; {
		case inv != nil && ev.SpanID == "" && ev.ParentSpanID == "":
			nodes = append(nodes, placedNode{parent: inv, node: lone})
		case ev.ParentTraceID == trace:
			byTime = append(byTime, lone)
		default:
			nodes = append(nodes, placedNode{node: lone})
		}
	}
	// running finds the invocation of this trace that was running at at:
	// started before it and not ended before it; the latest started of
	// those, as the innermost.
	running := func(at Pos, self *tnode) *tnode {
		var best *tnode
		for _, inv := range invs {
			if inv == self || !at.After(inv.start) || (inv.ended && at.After(inv.end)) {
				continue
			}
			if best == nil || inv.start.After(best.start) {
				best = inv
			}
		}
		return best
	}
	// parentOf places a nested node: below the invocation of its parent
	// span, at the root when that span is the run's own, else by time.
	parentOf := func(n *tnode, parentSpan string) *tnode {
		if parentSpan != "" {
			if inv := spans[parentSpan]; inv != nil && inv != n {
				return inv
			}
			if rootSpans[parentSpan] {
				return nil
			}
		}
		return running(n.start, n)
	}
	for _, n := range byTime {
		nodes = append(nodes, placedNode{parent: parentOf(n, n.parentSpan), node: n})
	}
	var subs []*tnode
	for _, c := range b.children[trace] {
		if b.placed[c] {
			continue
		}
		b.placed[c] = true
		sub := b.build(c)
		subs = append(subs, sub)
		nodes = append(nodes, placedNode{parent: parentOf(sub, b.parentSpanOf(c, trace)), node: sub})
	}
	if len(evs) == 0 {
		// Only child runs: the root starts with the first.
		for i, s := range subs {
			if i == 0 || root.start.After(s.start) {
				root.start, root.n.Start = s.start, s.n.Start
			}
		}
	}

	// Attach in start order, so every node's children are.
	slices.SortStableFunc(nodes, func(a, b placedNode) int {
		switch {
		case a.node.start.After(b.node.start):
			return 1
		case b.node.start.After(a.node.start):
			return -1
		}
		return 0
	})
	for _, pn := range nodes {
		parent := pn.parent
		if parent == nil {
			parent = root
			// The root's status follows its own invocations and events;
			// a child run's only when the root has nothing else.
			if k := pn.node.n.Kind; k == "agent" || k == "event" || len(evs) == 0 {
				failed = failed || pn.node.n.Status == statusFailed
				busy = busy || pn.node.n.Status == statusRunning
			}
		}
		parent.n.Children = append(parent.n.Children, pn.node.n)
	}

	if root.n.Name == "" {
		for _, inv := range invs {
			if !inv.nested {
				root.n.Name = inv.n.Name
				break
			}
		}
		if root.n.Name == "" && len(evs) > 0 {
			root.n.Name = evs[0].Ev.AgentName
		}
	}
	switch {
	case busy:
		return root
	case groupOutcome != nil && root.n.Kind == "group":
		// The group run says how it ended: one whose fan-out lost a
		// branch may still have succeeded (its run completed), the failed
		// branch marked failed below it. Events stored before
		// group_completed carried "success" fall to the children's rule.
		root.n.Status = statusFailed
		if *groupOutcome {
			root.n.Status = statusCompleted
		}
	case failed:
		root.n.Status = statusFailed
	default:
		root.n.Status = statusCompleted
	}
	// The run ended with the last of its events and of its child runs'.
	var end time.Time
	if len(evs) > 0 {
		root.end, end = evs[len(evs)-1].At, evs[len(evs)-1].Ev.Timestamp
	}
	for _, s := range subs {
		if s.ended && s.end.After(root.end) {
			root.end, end = s.end, *s.n.End
		}
	}
	root.ended = true
	root.n.End = &end
	return root
}

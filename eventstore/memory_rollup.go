package eventstore

import (
	"context"
	"slices"
	"time"

	"github.com/svc-dev/svc"
)

// The memory store's rollups scan what it holds once, under its lock, with
// the facts extracted at write time: linear in the events held (plus a
// sort of the durations for ToolUsage).

var _ svc.EventReader = (*Memory)(nil)

// locked runs f on the retained events under the lock.
func (m *Memory) locked(ctx context.Context, what string, f func(evs []memEvent)) error {
	if err := ctx.Err(); err != nil {
		return svc.Wrap(svc.KindOf(err), err, "eventstore: memory "+what)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return errClosed("memory")
	}
	m.pruneLocked()
	f(m.evs)
	return nil
}

// Usage sums agent_completed tokens; see svc.EventReader and rollup.go.
func (m *Memory) Usage(ctx context.Context, groupBy string) (svc.Usage, error) {
	groupBy, err := usageGroup(groupBy)
	if err != nil {
		return svc.Usage{}, err
	}
	u := newUsage(groupBy)
	err = m.locked(ctx, "usage", func(evs []memEvent) {
		for i := range evs {
			e := &evs[i]
			if e.ev.EventType == svc.EventAgentCompleted {
				u.add(usageKey(groupBy, e.ev.AgentName, e.ev.TraceID, e.f.model), 1, e.f.tokens, e.f.costNanos)
			}
		}
	})
	if err != nil {
		return svc.Usage{}, err
	}
	return u.result(), nil
}

// ToolUsage computes per-tool rows; see svc.EventReader and rollup.go.
func (m *Memory) ToolUsage(ctx context.Context, groupBy string) (svc.ToolUsage, error) {
	if err := toolGroup(groupBy); err != nil {
		return svc.ToolUsage{}, err
	}
	type key struct{ tool, agent string }
	aggs := map[key]*toolAgg{}
	durs := map[key][]int64{}
	err := m.locked(ctx, "tool usage", func(evs []memEvent) {
		for i := range evs {
			e := &evs[i]
			t := e.ev.EventType
			if t != svc.EventToolCallCompleted && t != svc.EventToolCallFailed {
				continue
			}
			k := key{tool: e.f.tool}
			if groupBy == svc.GroupByAgentTool {
				k.agent = e.ev.AgentName
			}
			a := aggs[k]
			if a == nil {
				a = &toolAgg{tool: k.tool, agent: k.agent}
				aggs[k] = a
			}
			a.calls++
			if t == svc.EventToolCallFailed {
				a.failures++
			}
			if e.f.hasDur {
				a.sumUS += e.f.durUS
				durs[k] = append(durs[k], e.f.durUS)
			}
		}
	})
	if err != nil {
		return svc.ToolUsage{}, err
	}
	list := make([]*toolAgg, 0, len(aggs))
	for k, a := range aggs {
		d := durs[k]
		slices.Sort(d)
		a.setPercentiles(d)
		list = append(list, a)
	}
	return toolUsage(groupBy, list), nil
}

// RuntimeStats computes the dashboard as of now; see svc.EventReader and
// statsAcc.
func (m *Memory) RuntimeStats(ctx context.Context, now time.Time) (svc.RuntimeStats, error) {
	s := newStatsAcc(now)
	burnFrom, burnTo := now.Add(-BurnWindow).UnixMicro(), now.UnixMicro()
	traces := map[string]struct{}{}
	err := m.locked(ctx, "runtime stats", func(evs []memEvent) {
		for i := range evs {
			e := &evs[i]
			t := e.ev.EventType
			s.count(t, 1)
			at := pos{e.us, int64(e.seq)}
			switch t {
			case svc.EventAgentCompleted:
				s.header.TokensUsed += e.f.tokens
				if e.us > burnFrom && e.us <= burnTo {
					s.burnTokens += e.f.tokens
				}
			case svc.EventAgentFailed, svc.EventToolCallFailed:
				s.failures(t, e.f.errKind, 1)
				s.latest(e.f.errKind, at, str(e.ev.Payload["error"]))
				s.agent(e.f.errKind, e.ev.AgentName)
			case svc.EventWorkerHeartbeat, svc.EventWorkerStopped:
				s.worker(e.f.runtime, at, e.ev)
			}
			if !isWorkerEvent(t) && e.ev.TraceID != "" {
				traces[e.ev.TraceID] = struct{}{}
			}
		}
	})
	if err != nil {
		return svc.RuntimeStats{}, err
	}
	s.header.Traces = int64(len(traces))
	return s.result(), nil
}

func isWorkerEvent(t svc.EventType) bool {
	return t == svc.EventWorkerStarted || t == svc.EventWorkerStopped || t == svc.EventWorkerHeartbeat
}

// Tree returns the event tree of one run; see buildTree.
func (m *Memory) Tree(ctx context.Context, traceID string) (svc.EventTree, error) {
	var (
		tree svc.EventTree
		err  error
	)
	lerr := m.locked(ctx, "tree", func(evs []memEvent) {
		tree, err = buildTree(ctx, &memTreeSource{evs: evs}, traceID)
	})
	if lerr != nil {
		return svc.EventTree{}, lerr
	}
	return tree, err
}

// memTreeSource reads the memory store's events for buildTree, which runs
// under the store's lock.
type memTreeSource struct {
	evs  []memEvent
	kids map[string][]string // parent trace → child traces, built on first use
}

func (s *memTreeSource) childTraces(_ context.Context, trace string) ([]string, error) {
	if s.kids == nil {
		sets := map[string]map[string]struct{}{}
		for i := range s.evs {
			ev := &s.evs[i].ev
			if ev.ParentTraceID == "" || ev.ParentTraceID == ev.TraceID {
				continue
			}
			set := sets[ev.ParentTraceID]
			if set == nil {
				set = map[string]struct{}{}
				sets[ev.ParentTraceID] = set
			}
			set[ev.TraceID] = struct{}{}
		}
		s.kids = make(map[string][]string, len(sets))
		for p, set := range sets {
			s.kids[p] = sortedKeys(set)
		}
	}
	return s.kids[trace], nil
}

func (s *memTreeSource) events(_ context.Context, traces []string) (map[string][]storedEvent, error) {
	out := make(map[string][]storedEvent, len(traces))
	for _, t := range traces {
		out[t] = nil
	}
	for i := range s.evs {
		e := &s.evs[i]
		if list, ok := out[e.ev.TraceID]; ok {
			out[e.ev.TraceID] = append(list, storedEvent{ev: e.ev, at: pos{e.us, int64(e.seq)}})
		}
	}
	return out, nil
}

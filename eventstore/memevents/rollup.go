package memevents

import (
	"context"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/eventstore/internal/rollup"
)

// The memory store's rollups scan what it holds once, under its lock, with
// the facts extracted at write time: linear in the events held (plus a
// sort of the durations for ToolUsage).

var _ svc.EventReader = (*Store)(nil)

// locked runs f on the retained events under the lock.
func (m *Store) locked(ctx context.Context, what string, f func(evs []memEvent)) error {
	if err := ctx.Err(); err != nil {
		return svc.Wrap(svc.KindOf(err), err, "eventstore: memory "+what)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return rollup.ErrClosed("memory")
	}
	m.pruneLocked()
	f(m.evs)
	return nil
}

var _ svc.WindowedEventReader = (*Store)(nil)

// Usage sums agent_completed tokens; see svc.EventReader and the rollup package.
func (m *Store) Usage(ctx context.Context, groupBy string) (svc.Usage, error) {
	return m.UsageIn(ctx, groupBy, svc.Window{})
}

// UsageIn is Usage over the events in w; see svc.WindowedEventReader.
func (m *Store) UsageIn(ctx context.Context, groupBy string, w svc.Window) (svc.Usage, error) {
	groupBy, err := rollup.UsageGroup(groupBy)
	if err != nil {
		return svc.Usage{}, err
	}
	if err := rollup.CheckWindow(w); err != nil {
		return svc.Usage{}, err
	}
	b := rollup.BoundsOf(w)
	u := rollup.NewUsage(groupBy)
	err = m.locked(ctx, "usage", func(evs []memEvent) {
		for i := range evs {
			e := &evs[i]
			if e.ev.EventType == svc.EventAgentCompleted && b.Has(e.us) {
				u.Add(rollup.UsageKey(groupBy, e.ev.AgentName, e.ev.TraceID, e.f.Model), 1, e.f.Tokens, e.f.Cached, e.f.CostNanos)
			}
		}
	})
	if err != nil {
		return svc.Usage{}, err
	}
	return u.Result(), nil
}

// ToolUsage computes per-tool rows; see svc.EventReader and the rollup package.
func (m *Store) ToolUsage(ctx context.Context, groupBy string) (svc.ToolUsage, error) {
	return m.ToolUsageIn(ctx, groupBy, svc.Window{})
}

// ToolUsageIn is ToolUsage over the events in w; see
// svc.WindowedEventReader.
func (m *Store) ToolUsageIn(ctx context.Context, groupBy string, w svc.Window) (svc.ToolUsage, error) {
	if err := rollup.ToolGroup(groupBy); err != nil {
		return svc.ToolUsage{}, err
	}
	if err := rollup.CheckWindow(w); err != nil {
		return svc.ToolUsage{}, err
	}
	b := rollup.BoundsOf(w)
	acc := rollup.NewToolAcc(groupBy)
	err := m.locked(ctx, "tool usage", func(evs []memEvent) {
		for i := range evs {
			if e := &evs[i]; b.Has(e.us) {
				acc.Add(e.ev.EventType, e.ev.AgentName, &e.f)
			}
		}
	})
	if err != nil {
		return svc.ToolUsage{}, err
	}
	return acc.Result(), nil
}

// RuntimeStats computes the dashboard as of now; see svc.EventReader and
// rollup.Stats.
func (m *Store) RuntimeStats(ctx context.Context, now time.Time) (svc.RuntimeStats, error) {
	return m.RuntimeStatsIn(ctx, now, svc.Window{})
}

// RuntimeStatsIn is RuntimeStats over the events in w; see
// svc.WindowedEventReader and the rollup package's windows.
func (m *Store) RuntimeStatsIn(ctx context.Context, now time.Time, w svc.Window) (svc.RuntimeStats, error) {
	if err := rollup.CheckWindow(w); err != nil {
		return svc.RuntimeStats{}, err
	}
	b := rollup.BoundsOf(w)
	s := rollup.NewStats(now)
	burnFrom, burnTo := now.Add(-rollup.BurnWindow).UnixMicro(), now.UnixMicro()
	type span struct{ first, last int64 }
	traces := map[string]span{}
	err := m.locked(ctx, "runtime stats", func(evs []memEvent) {
		for i := range evs {
			e := &evs[i]
			t := e.ev.EventType
			at := rollup.Pos{US: e.us, Seq: int64(e.seq)}
			if t == svc.EventAgentCompleted && e.us > burnFrom && e.us <= burnTo {
				s.BurnTokens += e.f.Tokens
			}
			if t == svc.EventWorkerHeartbeat || t == svc.EventWorkerStopped {
				s.Worker(e.f.Runtime, at, e.ev)
			}
			if !rollup.IsWorkerEvent(t) && e.ev.TraceID != "" {
				sp, ok := traces[e.ev.TraceID]
				if !ok {
					sp.first = e.us
				}
				sp.last = e.us // events are in time order
				traces[e.ev.TraceID] = sp
			}
			if !b.Has(e.us) {
				continue
			}
			s.Count(t, 1)
			switch t {
			case svc.EventAgentCompleted:
				s.Header.TokensUsed += e.f.Tokens
			case svc.EventAgentFailed, svc.EventToolCallFailed:
				s.Failures(t, e.f.ErrKind, 1)
				s.Latest(e.f.ErrKind, at, rollup.Str(e.ev.Payload["error"]))
				s.Agent(e.f.ErrKind, e.ev.AgentName)
			}
		}
	})
	if err != nil {
		return svc.RuntimeStats{}, err
	}
	for _, sp := range traces {
		if b.Overlaps(sp.first, sp.last) {
			s.Header.Traces++
		}
	}
	return s.Result(), nil
}

// Tree returns the event tree of one run; see rollup.BuildTree.
func (m *Store) Tree(ctx context.Context, traceID string) (svc.EventTree, error) {
	var (
		tree svc.EventTree
		err  error
	)
	lerr := m.locked(ctx, "tree", func(evs []memEvent) {
		tree, err = rollup.BuildTree(ctx, &memTreeSource{evs: evs}, traceID)
	})
	if lerr != nil {
		return svc.EventTree{}, lerr
	}
	return tree, err
}

// memTreeSource reads the memory store's events for rollup.BuildTree, which runs
// under the store's lock.
type memTreeSource struct {
	evs  []memEvent
	kids map[string][]string // parent trace → child traces, built on first use
}

func (s *memTreeSource) ChildTraces(_ context.Context, trace string) ([]string, error) {
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
			s.kids[p] = rollup.SortedKeys(set)
		}
	}
	return s.kids[trace], nil
}

func (s *memTreeSource) Events(_ context.Context, traces []string) (map[string][]rollup.StoredEvent, error) {
	out := make(map[string][]rollup.StoredEvent, len(traces))
	for _, t := range traces {
		out[t] = nil
	}
	for i := range s.evs {
		e := &s.evs[i]
		if list, ok := out[e.ev.TraceID]; ok {
			out[e.ev.TraceID] = append(list, rollup.StoredEvent{Ev: e.ev, At: rollup.Pos{US: e.us, Seq: int64(e.seq)}})
		}
	}
	return out, nil
}

var _ svc.RunHistoryReader = (*Store)(nil)

// RunHistory lists the top-level runs; see svc.RunHistoryReader and the
// rollup package's history definitions. It sums every trace held.
func (m *Store) RunHistory(ctx context.Context, q svc.RunHistoryQuery) (svc.HistoryPage, error) {
	q, err := rollup.CheckHistory(q)
	if err != nil {
		return svc.HistoryPage{}, err
	}
	var rows []*rollup.RunRow
	err = m.locked(ctx, "run history", func(evs []memEvent) {
		rows = runRows(evs)
	})
	if err != nil {
		return svc.HistoryPage{}, err
	}
	return rollup.HistoryPage(rows, q), nil
}

// runRows sums evs by trace, leaving out worker lifecycle events.
func runRows(evs []memEvent) []*rollup.RunRow {
	byTrace := map[string]*rollup.RunRow{}
	var rows []*rollup.RunRow
	for i := range evs {
		e := &evs[i]
		if e.ev.TraceID == "" || rollup.IsWorkerEvent(e.ev.EventType) {
			continue
		}
		r := byTrace[e.ev.TraceID]
		if r == nil {
			r = &rollup.RunRow{TraceID: e.ev.TraceID}
			byTrace[e.ev.TraceID] = r
			rows = append(rows, r)
		}
		r.Add(&e.ev, e.us, &e.f)
	}
	return rows
}

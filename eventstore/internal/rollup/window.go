package rollup

import (
	"math"
	"slices"
	"time"

	"github.com/svc-dev/svc"
)

// Windows (svc.WindowedEventReader): a windowed rollup reads the events
// with Since <= timestamp < Until, as Events does, and is defined as the
// unwindowed one over those events, but for RuntimeStats:
//
//   - Header.Traces counts the traces active in the window: those with an
//     event before Until and one at or after Since (the first and latest
//     of all the trace's events held, so a run that spans the window
//     counts even with no event inside it);
//   - BurnRate stays the last BurnWindow before now, and Workers their
//     latest state: they describe now, not the window.

// Bounds is a window in Unix microseconds: Since <= us < Until.
type Bounds struct{ Since, Until int64 }

// BoundsOf is w in microseconds; a zero bound is unbounded.
func BoundsOf(w svc.Window) Bounds {
	b := Bounds{Since: math.MinInt64, Until: math.MaxInt64}
	if !w.Since.IsZero() {
		b.Since = w.Since.UnixMicro()
	}
	if !w.Until.IsZero() {
		b.Until = w.Until.UnixMicro()
	}
	return b
}

// Has reports whether us is in the window.
func (b Bounds) Has(us int64) bool { return us >= b.Since && us < b.Until }

// Overlaps reports whether a trace whose events run from first to last
// is active in the window.
func (b Bounds) Overlaps(first, last int64) bool { return first < b.Until && last >= b.Since }

// CheckWindow refuses a window that ends before it starts.
func CheckWindow(w svc.Window) error {
	if !w.Since.IsZero() && !w.Until.IsZero() && w.Until.Before(w.Since) {
		return svc.Errorf(svc.KindSpecValidation, "eventstore: until %s is before since %s",
			w.Until.Format(time.RFC3339Nano), w.Since.Format(time.RFC3339Nano))
	}
	return nil
}

// ToolAcc gathers ToolUsage rows from events one at a time.
type ToolAcc struct {
	groupBy string
	aggs    map[[2]string]*ToolAgg
	durs    map[[2]string][]int64
}

// NewToolAcc returns an empty accumulator for groupBy (checked).
func NewToolAcc(groupBy string) *ToolAcc {
	return &ToolAcc{groupBy: groupBy, aggs: map[[2]string]*ToolAgg{}, durs: map[[2]string][]int64{}}
}

// Add counts one tool_call_completed or tool_call_failed event of agent
// with facts f (another type is ignored).
func (a *ToolAcc) Add(t svc.EventType, agent string, f *Facts) {
	if t != svc.EventToolCallCompleted && t != svc.EventToolCallFailed {
		return
	}
	k := [2]string{f.Tool, ""}
	if a.groupBy == svc.GroupByAgentTool {
		k[1] = agent
	}
	g := a.aggs[k]
	if g == nil {
		g = &ToolAgg{Tool: k[0], Agent: k[1]}
		a.aggs[k] = g
	}
	g.Calls++
	if t == svc.EventToolCallFailed {
		g.Failures++
	}
	if f.HasDur {
		g.SumUS += f.DurUS
		a.durs[k] = append(a.durs[k], f.DurUS)
	}
}

// Result is the answer.
func (a *ToolAcc) Result() svc.ToolUsage {
	list := make([]*ToolAgg, 0, len(a.aggs))
	for k, g := range a.aggs {
		d := a.durs[k]
		slices.Sort(d)
		g.SetPercentiles(d)
		list = append(list, g)
	}
	return ToolRows(a.groupBy, list)
}

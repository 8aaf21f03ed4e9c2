package actors

import (
	"encoding/json"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/agent"
)

// Replay (issue 30): an invocation of a submitted run that ends well has
// its outcome recorded in the run's journal, after its agent_completed
// event, so that a resumed run takes a finished group node (or fan-out
// item) as it was instead of running it again, whether it ran here or on
// a worker of the fleet. The run's own entry invocation is not recorded:
// its outcome is the run's result. An invocation a previous life started
// but did not finish runs again, without emitting its start a second
// time; inside it, the agent loop replays the model and tool calls it
// finished (agent/replay.go).

// replayMark is what a resumed run's journal holds of an invocation.
type replayMark uint8

const (
	replayNone    replayMark = iota // a new invocation
	replayStarted                   // started before: its start was emitted
	replayOutcome                   // finished before: its outcome is recorded
)

// replayed is the mark of st in its run's journal.
//
//go:noinline
func (st *invState) replayed() replayMark {
	j := svc.JournalFrom(st.base())
	if j == nil {
		return replayNone
	}
	path := svc.InvocationPath(st.task.ID, st.run.Agent.Def.Name)
	if _, ok := j.Replay(svc.StepGroupNode, path); ok {
		return replayOutcome
	}
	if j.Started(path) {
		return replayStarted
	}
	return replayNone
}

// endedBefore reports whether the run's history has st's completion.
//
//go:noinline
func (st *invState) endedBefore() bool {
	j := svc.JournalFrom(st.base())
	return j != nil && j.Ended(svc.InvocationPath(st.task.ID, st.run.Agent.Def.Name))
}

// replayOutcome is the attempt of an invocation whose outcome is recorded:
// it takes the outcome. A record that does not decode runs the invocation
// after all.
//
//go:noinline
func (st *invState) replayOutcome(d *workDone) {
	j := svc.JournalFrom(st.base())
	var rec svc.ReplayedOutcome
	if data, ok := j.Replay(svc.StepGroupNode, svc.InvocationPath(st.task.ID, st.run.Agent.Def.Name)); !ok || json.Unmarshal(data, &rec) != nil {
		st.replay = replayStarted
		execute(st.run.env.Execute, st, &st.inv, d)
		return
	}
	d.out = agent.Outcome{Output: rec.Output, Model: rec.Model, TokensUsed: rec.TokensUsed, CostUSD: rec.CostUSD,
		CostUnknown: rec.CostUnknown, CachedTokens: rec.CachedTokens, ModelCalls: rec.ModelCalls, ModelsTried: rec.ModelsTried, Remote: rec.Remote}
}

// recordOutcome queues the outcome of a finished invocation in its run's
// journal. It does not wait (an actor calls it): the run's writer stores
// it after the events before it, and before any step that follows.
//
//go:noinline
func (st *invState) recordOutcome(out *agent.Outcome) {
	j := svc.JournalFrom(st.base())
	if j == nil {
		return
	}
	data, err := json.Marshal(svc.ReplayedOutcome{Output: out.Output, Model: out.Model, TokensUsed: out.TokensUsed,
		CostUSD: out.CostUSD, CostUnknown: out.CostUnknown, CachedTokens: out.CachedTokens, ModelCalls: out.ModelCalls,
		ModelsTried: out.ModelsTried, Remote: out.Remote})
	if err != nil {
		return
	}
	j.Queue(svc.StepGroupNode, svc.InvocationPath(st.task.ID, st.run.Agent.Def.Name), data)
}

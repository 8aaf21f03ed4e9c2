package submitted

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/svc-dev/svc"
)

// Journal is the svc.Journal of one submitted run: what a previous life of
// the run recorded (read-only while the run executes), and the run's
// Writer to record the steps of this life.
type Journal struct {
	w *Writer
	// root is the run's task id: the outcome of its entry invocations
	// (root/agent) is the run's result, not a step to record.
	root    string
	steps   map[stepID]json.RawMessage
	started map[string]struct{}
	ended   map[string]struct{}
	n       int
}

type stepID struct {
	kind svc.StepKind
	key  string
}

// NewJournal returns the journal of the run w writes, replaying steps (its
// step log when it is resumed; nil for a new run). Of two steps with one
// key (an attempt retried in one life made its calls again) the later
// wins.
//
// history, the run's events so far, tells which invocations started
// before (their agent_started is in it) though they completed no step.
func NewJournal(w *Writer, taskID string, steps []svc.RunStep, history []svc.RunEvent) *Journal {
	j := &Journal{w: w, root: taskID, n: len(steps)}
	if len(steps) > 0 || len(history) > 0 {
		j.steps = make(map[stepID]json.RawMessage, len(steps))
		j.started = make(map[string]struct{})
		for _, st := range steps {
			j.steps[stepID{st.Kind, st.Key}] = st.Data
			j.started[invocationOf(st.Kind, st.Key)] = struct{}{}
		}
		j.ended = make(map[string]struct{})
		for _, ev := range history {
			switch ev.Type {
			case svc.RunAgentStarted:
				j.started[svc.InvocationPath(ev.TaskID, ev.Agent)] = struct{}{}
			case svc.RunAgentCompleted:
				j.ended[svc.InvocationPath(ev.TaskID, ev.Agent)] = struct{}{}
			}
		}
	}
	return j
}

// invocationOf is the invocation path a step's key belongs to: an
// outcome's key is the path itself, a call's is path/model#i or
// path/tool#i (svc.StepKey), possibly with a suffix of its own.
func invocationOf(kind svc.StepKind, key string) string {
	if kind == svc.StepGroupNode {
		return key
	}
	if i := strings.LastIndexByte(key, '#'); i >= 0 {
		key = key[:i]
	}
	if i := strings.LastIndexByte(key, '/'); i >= 0 {
		key = key[:i]
	}
	return key
}

// Replayed is how many steps the journal started with.
func (j *Journal) Replayed() int { return j.n }

// Replay implements svc.Journal.
func (j *Journal) Replay(kind svc.StepKind, key string) (json.RawMessage, bool) {
	d, ok := j.steps[stepID{kind, key}]
	return d, ok
}

// Started implements svc.Journal.
func (j *Journal) Started(path string) bool {
	_, ok := j.started[path]
	return ok
}

// Ended implements svc.Journal.
func (j *Journal) Ended(path string) bool {
	_, ok := j.ended[path]
	return ok
}

// Record implements svc.Journal: the step goes through the run's Writer,
// after the events queued before it.
func (j *Journal) Record(_ context.Context, kind svc.StepKind, key string, data json.RawMessage) {
	j.w.Step(svc.RunStep{Kind: kind, Key: key, Data: data})
}

// Queue implements svc.Journal.
func (j *Journal) Queue(kind svc.StepKind, key string, data json.RawMessage) {
	if kind == svc.StepGroupNode && j.entry(key) {
		return
	}
	j.w.QueueStep(svc.RunStep{Kind: kind, Key: key, Data: data})
}

// entry reports whether key is the path of one of the run's entry
// invocations: root/agent, where agent names have no slash.
func (j *Journal) entry(key string) bool {
	rest, ok := strings.CutPrefix(key, j.root+"/")
	return ok && !strings.Contains(rest, "/")
}

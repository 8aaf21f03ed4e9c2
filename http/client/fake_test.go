package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	svc "github.com/svc-dev/svc"
)

// fakeBackend serves the clienttest fixture (agents echo, fail, slow; the
// groups of fakegroups_test.go) plus the agents:
//
//	budget  a BudgetExceededError
//	err     an *svc.Error whose kind is the input (a JSON string)
//
// It follows the runtime's rules for ids: task ids and trace ids are
// generated when absent, a run takes its trace id from the task, else from
// the context; a gather's tasks without one take the batch's.
type fakeBackend struct {
	closed atomic.Int32
}

var fakeAgents = []string{"budget", "echo", "err", "fail", "slow"}

// registryError says what the runtime says of a name that is no agent.
func registryError(name string) error {
	msg := fmt.Sprintf("unknown agent %q (registered agents: %s)", name, strings.Join(fakeAgents, ", "))
	if _, ok := fakeGroups[name]; ok {
		msg = fmt.Sprintf("unknown agent %q: %s is a group: POST /groups/%s/run (RunGroup in Go)", name, name, name)
	}
	return &svc.Error{Kind: svc.KindRegistry, Message: msg, Agent: name}
}

func (f *fakeBackend) Agents(context.Context) ([]string, error) {
	return slices.Clone(fakeAgents), nil
}

func (f *fakeBackend) AgentSchema(_ context.Context, name string) (svc.AgentSchema, error) {
	if !slices.Contains(fakeAgents, name) {
		return svc.AgentSchema{}, registryError(name)
	}
	return svc.AgentSchema{Name: name, Input: svc.AnySchema, Output: svc.AnySchema}, nil
}

func (f *fakeBackend) Run(ctx context.Context, name string, task svc.TaskSpec) (svc.AgentResult, error) {
	if !slices.Contains(fakeAgents, name) {
		return svc.AgentResult{}, registryError(name)
	}
	if task.ID == "" {
		task.ID = uuid.Must(uuid.NewV7()).String()
	}
	trace := task.RequestID
	if trace == "" {
		trace = svc.RequestIDFrom(ctx)
	}
	if trace == "" {
		trace = uuid.Must(uuid.NewV7()).String()
	}
	if err := task.CheckTokenBudget(); err != nil {
		return svc.AgentResult{}, err
	}
	res := svc.AgentResult{AgentName: name, TaskID: task.ID, Metadata: svc.ResultMetadata{TraceID: trace, Backend: "local", Attempts: 1}}
	switch name {
	case "echo":
		// Like test:echo on the one-word inputs of the suite: a word in
		// and a word out.
		const spent = 2
		if task.TokenBudget > 0 && task.TokenBudget < spent {
			return svc.AgentResult{}, &svc.Error{Kind: svc.KindBudgetExceeded, Message: "token budget of the run exceeded", Agent: name, TaskID: task.ID}
		}
		res.Success, res.Output, res.Metadata.Model, res.Metadata.TokensUsed = true, task.Input, "test:echo", spent
	case "fail":
		res.Error, res.Metadata.Model = &svc.ErrorInfo{Type: string(svc.KindModel), Message: "test:fail always fails"}, "test:fail"
	case "slow":
		select {
		case <-ctx.Done():
			return svc.AgentResult{}, svc.Wrap(svc.KindOf(ctx.Err()), ctx.Err(), "slow")
		case <-time.After(10 * time.Second):
			res.Success, res.Output = true, task.Input
		}
	case "budget":
		return svc.AgentResult{}, &svc.Error{Kind: svc.KindBudgetExceeded, Message: "token budget 10 exceeded", Agent: name, TaskID: task.ID}
	case "err":
		var kind string
		if err := json.Unmarshal(task.Input, &kind); err != nil {
			return svc.AgentResult{}, svc.Wrap(svc.KindSpecValidation, err, "err agent wants a kind name")
		}
		return svc.AgentResult{}, &svc.Error{Kind: svc.Kind(kind), Message: "boom: " + kind, Agent: name, TaskID: task.ID, Reason: "because"}
	}
	return res, nil
}

func (f *fakeBackend) Gather(ctx context.Context, name string, tasks []svc.TaskSpec, n int) ([]svc.AgentResult, error) {
	if _, err := svc.CheckGatherConcurrency(n); err != nil {
		return nil, err
	}
	if len(tasks) == 0 {
		return nil, &svc.Error{Kind: svc.KindSpecValidation, Err: svc.ErrNoTasks}
	}
	if !slices.Contains(fakeAgents, name) {
		return nil, registryError(name)
	}
	batch := svc.RequestIDFrom(ctx)
	if batch == "" {
		batch = uuid.Must(uuid.NewV7()).String()
	}
	out := make([]svc.AgentResult, len(tasks))
	for i, t := range tasks {
		if t.RequestID == "" {
			t.RequestID = batch
		}
		r, err := f.Run(ctx, name, t)
		if err != nil {
			r = svc.AgentResult{AgentName: name, TaskID: t.ID, Error: svc.ErrorInfoOf(err)}
		}
		out[i] = r
	}
	return out, nil
}

func (f *fakeBackend) Ready(context.Context) error { return nil }

func (f *fakeBackend) Close() error {
	f.closed.Add(1)
	return errors.New("fake: closed")
}

// GatherStream runs the tasks one at a time, as they come, like the
// runtime's streamed gather with a window of one.
func (f *fakeBackend) GatherStream(ctx context.Context, name string, tasks iter.Seq[svc.TaskSpec], n int) iter.Seq2[svc.GatherItem, error] {
	return func(yield func(svc.GatherItem, error) bool) {
		if !slices.Contains(fakeAgents, name) {
			yield(svc.GatherItem{}, registryError(name))
			return
		}
		if _, err := svc.CheckGatherConcurrency(n); err != nil {
			yield(svc.GatherItem{}, err)
			return
		}
		batch := svc.RequestIDFrom(ctx)
		if batch == "" {
			batch = uuid.Must(uuid.NewV7()).String()
		}
		i := 0
		for t := range tasks {
			if ctx.Err() != nil {
				break
			}
			if t.RequestID == "" {
				t.RequestID = batch
			}
			var r svc.AgentResult
			var err error
			if t.Invalid != nil {
				err = t.Invalid
			} else {
				r, err = f.Run(ctx, name, t)
			}
			if err != nil {
				r = svc.AgentResult{AgentName: name, TaskID: t.ID, Error: svc.ErrorInfoOf(err)}
			}
			if !yield(svc.GatherItem{Index: i, Result: r}, nil) {
				return
			}
			i++
		}
		if ctx.Err() != nil {
			yield(svc.GatherItem{}, svc.Wrap(svc.KindOf(ctx.Err()), ctx.Err(), "gather"))
		}
	}
}

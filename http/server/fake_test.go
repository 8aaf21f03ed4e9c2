package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"

	"github.com/google/uuid"

	svc "github.com/svc-dev/svc"
)

// fakeBackend is a small svc.Backend with one agent per behaviour the
// router must translate:
//
//	echo    output = input
//	fail    a failed result (success false, ModelError), not a Go error
//	slow    blocks until ctx ends
//	budget  a BudgetExceededError
//	err     an *svc.Error whose kind is the input (a JSON string)
//	raw     a non-domain error whose text must not reach the client
//	panic   panics with the input (a string value, or an error for "error")
//
// Its groups are in fakegroups_test.go. It records the last task and request
// id it saw.
type fakeBackend struct {
	mu        sync.Mutex
	lastTask  svc.TaskSpec
	lastCtxID string
	lastTasks []svc.TaskSpec
	lastConc  int
	readyErr  error
}

const secret = "password=hunter2"

var fakeAgents = []string{"budget", "echo", "err", "fail", "panic", "raw", "slow"}

func (f *fakeBackend) Agents(context.Context) ([]string, error) {
	return slices.Clone(fakeAgents), nil
}

func (f *fakeBackend) AgentSchema(_ context.Context, name string) (svc.AgentSchema, error) {
	if !slices.Contains(fakeAgents, name) {
		return svc.AgentSchema{}, &svc.Error{Kind: svc.KindRegistry, Message: "agent " + name + " is not registered", Agent: name}
	}
	return svc.AgentSchema{Name: name, Input: svc.AnySchema, Output: json.RawMessage(`{"type":"object"}`)}, nil
}

func (f *fakeBackend) Run(ctx context.Context, name string, task svc.TaskSpec) (svc.AgentResult, error) {
	f.mu.Lock()
	f.lastTask, f.lastCtxID = task, svc.RequestIDFrom(ctx)
	f.mu.Unlock()
	if task.ID == "" {
		task.ID = uuid.NewString()
	}
	trace := task.RequestID
	if trace == "" {
		trace = svc.RequestIDFrom(ctx)
	}
	res := svc.AgentResult{AgentName: name, TaskID: task.ID, Metadata: svc.ResultMetadata{TraceID: trace, Backend: "local", Model: "test:echo", Attempts: 1}}
	switch name {
	case "echo":
		res.Success, res.Output = true, task.Input
		return res, nil
	case "fail":
		res.Error = &svc.ErrorInfo{Type: string(svc.KindModel), Message: "test:fail always fails"}
		return res, nil
	case "slow":
		<-ctx.Done()
		return svc.AgentResult{}, svc.Wrap(svc.KindOf(ctx.Err()), ctx.Err(), "slow")
	case "budget":
		return svc.AgentResult{}, &svc.Error{Kind: svc.KindBudgetExceeded, Message: "token budget 10 exceeded", Agent: name, TaskID: task.ID}
	case "err":
		var kind string
		if err := json.Unmarshal(task.Input, &kind); err != nil {
			return svc.AgentResult{}, svc.Wrap(svc.KindSpecValidation, err, "err agent wants a kind name")
		}
		return svc.AgentResult{}, &svc.Error{Kind: svc.Kind(kind), Message: "boom: " + kind, Agent: name, TaskID: task.ID, Reason: "because"}
	case "raw":
		return svc.AgentResult{}, errors.New("dial tcp 10.0.0.7:5432: " + secret)
	case "panic":
		var v string
		_ = json.Unmarshal(task.Input, &v)
		switch v {
		case "registry":
			panic(svc.Errorf(svc.KindRegistry, "panicked registry"))
		case "error":
			panic(errors.New("internal " + secret))
		}
		panic(v)
	}
	return svc.AgentResult{}, &svc.Error{Kind: svc.KindRegistry, Message: "agent " + name + " is not registered", Agent: name}
}

func (f *fakeBackend) Gather(ctx context.Context, name string, tasks []svc.TaskSpec, n int) ([]svc.AgentResult, error) {
	f.mu.Lock()
	f.lastTasks, f.lastConc, f.lastCtxID = slices.Clone(tasks), n, svc.RequestIDFrom(ctx)
	f.mu.Unlock()
	if _, err := svc.CheckGatherConcurrency(n); err != nil {
		return nil, err
	}
	out := make([]svc.AgentResult, len(tasks))
	for i, t := range tasks {
		r, err := f.Run(ctx, name, t)
		if err != nil {
			if errors.Is(err, svc.ErrRegistry) {
				return nil, err
			}
			r = svc.AgentResult{AgentName: name, TaskID: t.ID, Error: svc.ErrorInfoOf(err)}
		}
		out[i] = r
	}
	return out, nil
}

func (f *fakeBackend) Ready(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.readyErr
}

func (f *fakeBackend) Close() error { return nil }

func (f *fakeBackend) setReady(err error) {
	f.mu.Lock()
	f.readyErr = err
	f.mu.Unlock()
}

func (f *fakeBackend) seen() (svc.TaskSpec, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lastTask, f.lastCtxID
}

func (f *fakeBackend) seenGather() ([]svc.TaskSpec, int, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lastTasks, f.lastConc, f.lastCtxID
}

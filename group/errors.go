package group

import (
	"fmt"

	"github.com/svc-dev/svc"
)

// Error is a problem with one part of a group: a validation error found by
// Compile, a TopologyError (so also a SpecValidationError and an
// AgentRuntimeError); or an expression that compiled but failed while a run
// evaluated it (the cost limit, an overflow, a missing key, a value of the
// wrong type), a ConditionError: the request was fine, the run failed, and
// over HTTP it is a 500 rather than a 400.
//
// Key names the part, in the shape of the YAML spec so a loader can point at
// a line: "name", "kind", "nodes", "nodes.billing", "nodes.billing.agent",
// "edges", "edges[2]", "edges[2].from", "edges[2].to", "edges[2].when",
// "edges[2].input", "edges[2].fan_out", "edges[2].max_concurrency",
// "coordinator", "delegates", "delegates[1]", "max_rounds", and "" for the
// group as a whole. Edge indexes count from 0 in the order of Group.Edges.
type Error struct {
	Group string
	Key   string
	Msg   string
	// Kind is svc.KindTopology when empty (a Compile error), or
	// svc.KindCondition for an evaluation that failed during a run.
	Kind svc.Kind
}

// kind is the error's kind, TopologyError by default.
func (e *Error) kind() svc.Kind {
	if e.Kind == "" {
		return svc.KindTopology
	}
	return e.Kind
}

// Error reads "group support: edges[2].when: <msg>".
func (e *Error) Error() string {
	name := e.Group
	if !svc.ValidName(name) {
		name = fmt.Sprintf("%q", name)
	}
	if e.Key == "" {
		return "group " + name + ": " + e.Msg
	}
	return "group " + name + ": " + e.Key + ": " + e.Msg
}

// Is matches the kind sentinels of the error's kind: svc.ErrTopology,
// svc.ErrSpecValidation and svc.ErrRuntime for a TopologyError;
// svc.ErrCondition and svc.ErrRuntime for a ConditionError.
func (e *Error) Is(target error) bool { return (&svc.Error{Kind: e.kind()}).Is(target) }

// As lets errors.As read an *Error as a *svc.Error of its kind, so
// svc.KindOf and the HTTP error mapping see the right kind without the
// caller wrapping it.
func (e *Error) As(target any) bool {
	t, ok := target.(**svc.Error)
	if !ok {
		return false
	}
	*t = &svc.Error{Kind: e.kind(), Message: e.Error()}
	return true
}

func errorf(group, key, format string, args ...any) *Error {
	return &Error{Group: group, Key: key, Msg: fmt.Sprintf(format, args...)}
}

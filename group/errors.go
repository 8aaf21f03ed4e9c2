package group

import (
	"fmt"

	"github.com/svc-dev/svc"
)

// Error is a problem with one part of a group: a validation error found by
// Compile, or an expression that failed while a run evaluated it. It is a
// TopologyError (so also a SpecValidationError and an AgentRuntimeError).
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

// topology is the kind every *Error has; its Is carries the kind hierarchy.
var topology = &svc.Error{Kind: svc.KindTopology}

// Is matches the kind sentinels a TopologyError matches: svc.ErrTopology,
// svc.ErrSpecValidation and svc.ErrRuntime.
func (e *Error) Is(target error) bool { return topology.Is(target) }

// As lets errors.As read an *Error as a *svc.Error of kind TopologyError,
// so svc.KindOf and the HTTP error mapping see the right kind without the
// caller wrapping it.
func (e *Error) As(target any) bool {
	t, ok := target.(**svc.Error)
	if !ok {
		return false
	}
	*t = &svc.Error{Kind: svc.KindTopology, Message: e.Error()}
	return true
}

func errorf(group, key, format string, args ...any) *Error {
	return &Error{Group: group, Key: key, Msg: fmt.Sprintf(format, args...)}
}

package supervisor

import (
	"context"
	"fmt"

	"github.com/svc-dev/svc"
)

// Groups lists the registered group names, sorted.
func (rt *Runtime) Groups(context.Context) ([]string, error) {
	return nil, nil
}

// GroupTopology describes a registered group.
func (rt *Runtime) GroupTopology(_ context.Context, name string) (svc.Topology, error) {
	return svc.Topology{}, &svc.Error{Kind: svc.KindRegistry, Message: fmt.Sprintf("unknown group %q", name)}
}

// RunGroup runs a group on one task.
func (rt *Runtime) RunGroup(_ context.Context, name string, _ svc.TaskSpec) (svc.RunResult, error) {
	return svc.RunResult{}, &svc.Error{Kind: svc.KindRegistry, Message: fmt.Sprintf("unknown group %q", name)}
}

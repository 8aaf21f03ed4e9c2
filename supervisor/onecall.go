package supervisor

import (
	"context"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/agent"
)

// OneCall returns a registered agent as the one model call of a provider
// batch (agent.Compiled.OneCall): a SpecValidationError names why an
// agent, or a group, cannot run that way; any other name is a
// RegistryError.
func (rt *Runtime) OneCall(_ context.Context, name string) (*agent.OneCall, error) {
	c, err := rt.lookup(name)
	if err != nil {
		if _, ok := rt.reg.Load().Group(name); ok {
			return nil, svc.Errorf(svc.KindSpecValidation, "%s is a group: a provider batch (mode provider) runs an agent whose run is one model call", name)
		}
		return nil, err
	}
	return c.OneCall()
}

package client

import (
	"context"
	"errors"

	"github.com/svc-dev/svc"
)

// TODO(groups): replaced by the real group calls.
var errGroupsTODO = errors.New("client: groups not implemented yet")

func (c *Client) Groups(context.Context) ([]string, error) { return nil, errGroupsTODO }
func (c *Client) GroupTopology(context.Context, string) (svc.Topology, error) {
	return svc.Topology{}, errGroupsTODO
}
func (c *Client) RunGroup(context.Context, string, svc.TaskSpec) (svc.RunResult, error) {
	return svc.RunResult{}, errGroupsTODO
}
func (l *Local) Groups(context.Context) ([]string, error) { return nil, errGroupsTODO }
func (l *Local) GroupTopology(context.Context, string) (svc.Topology, error) {
	return svc.Topology{}, errGroupsTODO
}
func (l *Local) RunGroup(context.Context, string, svc.TaskSpec) (svc.RunResult, error) {
	return svc.RunResult{}, errGroupsTODO
}

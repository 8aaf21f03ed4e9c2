package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	svc "github.com/svc-dev/svc"
)

// Groups lists the server's group names, sorted.
func (c *Client) Groups(ctx context.Context) ([]string, error) {
	var names []string
	if err := c.call(ctx, http.MethodGet, "/groups", "", nil, &names); err != nil {
		return nil, err
	}
	return names, nil
}

// GroupTopology describes a group: its nodes, its edges with their
// conditions as written, its entry and terminal nodes, and a Mermaid
// flowchart.
func (c *Client) GroupTopology(ctx context.Context, name string) (svc.Topology, error) {
	var t svc.Topology
	err := c.call(ctx, http.MethodGet, "/groups/"+url.PathEscape(name)+"/topology", "", nil, &t)
	return t, err
}

// RunGroup runs a group on one task and waits for its result: the plain
// AgentResult (res.Agent) when one terminal node fired, a GroupResult
// (res.Group) when several did. The request id is chosen as for Run and
// becomes the group run's trace id unless the task carries its own.
func (c *Client) RunGroup(ctx context.Context, name string, task svc.TaskSpec) (svc.RunResult, error) {
	id := runRequestID(ctx, task)
	var body json.RawMessage
	if err := c.call(ctx, http.MethodPost, "/groups/"+url.PathEscape(name)+"/run", id, runRequest{Task: task, RequestID: id}, &body); err != nil {
		return svc.RunResult{}, err
	}
	res, err := decodeRunResult(body)
	if err != nil {
		return svc.RunResult{}, svc.Wrap(svc.KindRuntime, err, fmt.Sprintf("client: decoding the result of group %q", name))
	}
	return res, nil
}

// decodeRunResult decodes the answer of a group run into exactly one
// envelope. A null body would leave both unset, which a caller could take
// for a run that produced nothing, so it is refused like malformed JSON.
func decodeRunResult(data []byte) (svc.RunResult, error) {
	var res svc.RunResult
	if err := json.Unmarshal(data, &res); err != nil {
		return svc.RunResult{}, err
	}
	if res.Agent == nil && res.Group == nil {
		return svc.RunResult{}, errors.New("neither an agent nor a group result")
	}
	return res, nil
}

// Groups implements svc.GroupBackend.
func (l *Local) Groups(ctx context.Context) ([]string, error) { return l.b.Groups(ctx) }

// GroupTopology implements svc.GroupBackend.
func (l *Local) GroupTopology(ctx context.Context, name string) (svc.Topology, error) {
	return l.b.GroupTopology(ctx, name)
}

// RunGroup implements svc.GroupBackend.
func (l *Local) RunGroup(ctx context.Context, name string, task svc.TaskSpec) (svc.RunResult, error) {
	return l.b.RunGroup(ctx, name, task)
}

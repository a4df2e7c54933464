package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/meshlet/meshlet/api"
	"github.com/meshlet/meshlet/client"
)

var _ api.CheckBackend = (*Backend)(nil)

// AllocChecks implements api.CheckBackend from this node's catalog: the
// checks of the allocation's registrations as last run here.
func (b *Backend) AllocChecks(ctx context.Context, allocID string) (nomadapi.AllocCheckStatuses, error) {
	if b.client == nil {
		return nil, fmt.Errorf("%w: %w", api.ErrNotFound, api.ErrNoChecks)
	}
	alloc, err := b.client.Alloc(allocID)
	switch {
	case errors.Is(err, client.ErrAllocNotFound) || (err == nil && alloc == nil):
		return nil, fmt.Errorf("%w: allocation %s does not run on this node", api.ErrNotFound, allocID)
	case err != nil:
		return nil, fmt.Errorf("failed to read the checks of allocation %s: %w", allocID, err)
	}
	out := nomadapi.AllocCheckStatuses{}
	now := time.Now().Unix()
	node := b.client.Node().ID
	for _, inst := range b.catalog.ByAlloc(alloc.ID) {
		if inst.NodeID != node {
			continue
		}
		for _, c := range inst.Checks {
			if c.Type == "alias" { // mirrors the service's own checks
				continue
			}
			out[c.ID] = nomadapi.AllocCheckStatus{ID: c.ID, Check: c.Name, Group: alloc.TaskGroup, Mode: "healthiness",
				Output: c.Output, Service: inst.Name, Status: c.Status, Timestamp: now}
		}
	}
	return out, nil
}

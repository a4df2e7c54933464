package apitest

import (
	"context"
	"fmt"
	"time"

	"github.com/meshlet/meshlet/api"
	"github.com/meshlet/meshlet/structs"
)

// UpdateNodeEligibility implements api.Backend.
func (b *Backend) UpdateNodeEligibility(_ context.Context, id string, eligible bool) (*api.NodeUpdateResult, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	found, err := byPrefix(b.nodes, id, "node")
	if err != nil {
		return nil, err
	}
	n := b.nodes[found.ID]
	if eligible && n.Draining() {
		return nil, fmt.Errorf("%w: node %s is draining: can not set its scheduling eligibility to eligible", api.ErrInvalid, n.ID)
	}
	n.SchedulingEligibility = structs.NodeSchedulingIneligible
	if eligible {
		n.SchedulingEligibility = structs.NodeSchedulingEligible
	}
	n.ModifyIndex = b.bump()
	return &api.NodeUpdateResult{EvalIDs: []string{}, NodeModifyIndex: n.ModifyIndex}, nil
}

// UpdateNodeDrain implements api.Backend. A drain stops the node's live
// allocations at once (desired stop, "alloc is being migrated", client
// complete; the fake does not replace them) and then completes, one index
// later, leaving the node ineligible.
func (b *Backend) UpdateNodeDrain(_ context.Context, id string, spec *structs.DrainSpec, markEligible bool) (*api.NodeUpdateResult, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	found, err := byPrefix(b.nodes, id, "node")
	if err != nil {
		return nil, err
	}
	n := b.nodes[found.ID]
	res := &api.NodeUpdateResult{EvalIDs: []string{}}
	if spec == nil {
		n.Drain, n.DrainStrategy = false, nil
		if markEligible {
			n.SchedulingEligibility = structs.NodeSchedulingEligible
		}
		n.ModifyIndex = b.bump()
		res.NodeModifyIndex = n.ModifyIndex
		return res, nil
	}
	now := time.Now().UTC()
	ds := &structs.DrainStrategy{DrainSpec: *spec, StartedAt: now}
	if spec.Deadline > 0 {
		ds.ForceDeadline = now.Add(spec.Deadline)
	}
	n.Drain, n.DrainStrategy, n.SchedulingEligibility = true, ds, structs.NodeSchedulingIneligible
	n.ModifyIndex = b.bump()
	res.NodeModifyIndex = n.ModifyIndex
	idx := b.bump()
	for _, a := range b.allocs {
		if a.NodeID == n.ID && a.DesiredStatus == structs.AllocDesiredStatusRun && !a.TerminalStatus() {
			a.DesiredStatus, a.DesiredDescription = structs.AllocDesiredStatusStop, "alloc is being migrated"
			a.ClientStatus, a.ModifyIndex, a.ModifyTime = structs.AllocClientStatusComplete, idx, now.UnixNano()
		}
	}
	n.Drain, n.DrainStrategy, n.ModifyIndex = false, nil, b.bump()
	return res, nil
}

package server

import (
	"fmt"

	"github.com/meshlet/meshlet/state"
	"github.com/meshlet/meshlet/structs"
)

// loseStopped marks lost the allocations on a down node that the servers
// already stopped (a stopped or purged job's, a replaced one's) but whose
// stop the node never reported, as Nomad's reconciler does: the
// scheduler only looks at allocations meant to run, and without this
// they would stay "running" (and their job too) and never be collected.
// (Allocations stopped after the node is down are lost at once: the
// scheduler's stop.)
func (s *Server) loseStopped(nodeID string) error {
	allocs, err := s.store.AllocsByNode(nodeID)
	if err != nil {
		return fmt.Errorf("failed to list allocations of node %s: %w", nodeID, err)
	}
	now := s.now().UnixNano()
	var lost []*structs.Allocation
	for _, a := range allocs {
		if a.DesiredStatus != structs.AllocDesiredStatusStop || a.TerminalStatus() {
			continue
		}
		cp := *a
		cp.ClientStatus, cp.ModifyTime = structs.AllocClientStatusLost, now
		lost = append(lost, &cp)
	}
	// Stopped allocations stay stopped: what was read is still to mark.
	// A purged job's go at the next collection (terminal, job gone).
	err = s.applyInBatches(len(lost), func(lo, hi int) *state.Plan { return &state.Plan{Allocs: lost[lo:hi]} })
	if err != nil {
		return fmt.Errorf("failed to store lost allocations: %w", err)
	}
	return nil
}

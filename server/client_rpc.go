package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/meshlet/meshlet/state"
	"github.com/meshlet/meshlet/structs"
)

// This file is the client-facing surface of the server: the client role
// reaches the server only through these three calls (see client.ServerConn).

// RegisterNode stores (or refreshes) a client node. When the node is new or
// its drivers, attributes or status changed, every job that is not stopped
// is re-evaluated so that placements blocked on this node are retried.
func (s *Server) RegisterNode(ctx context.Context, node *structs.Node) error {
	if node == nil || node.ID == "" {
		return invalid(errors.New("node ID is required"))
	}
	cp := *node
	if cp.Status == "" {
		cp.Status = structs.NodeStatusReady
	}
	s.planMu.Lock()
	defer s.planMu.Unlock()
	old, err := s.store.Node(cp.ID)
	if err != nil && !errors.Is(err, state.ErrNotFound) {
		return fmt.Errorf("failed to read node %s: %w", cp.ID, err)
	}
	if old != nil && nodeEqual(old, &cp) {
		return nil
	}
	if _, err := s.store.UpsertNode(&cp); err != nil {
		return fmt.Errorf("failed to store node %s: %w", cp.ID, err)
	}
	s.logger.Info("node registered", "node_id", cp.ID, "node_name", cp.Name)
	jobs, err := s.store.Jobs()
	if err != nil {
		return fmt.Errorf("failed to list jobs: %w", err)
	}
	for _, j := range jobs {
		if j.Stop {
			continue
		}
		if _, err := s.evaluate(j, TriggerNodeUpdate); err != nil {
			return err
		}
	}
	return nil
}

func nodeEqual(a, b *structs.Node) bool {
	x, y := *a, *b
	x.CreateIndex, x.ModifyIndex, y.CreateIndex, y.ModifyIndex = 0, 0, 0, 0
	for _, n := range []*structs.Node{&x, &y} {
		drivers := map[string]*structs.DriverInfo{}
		for k, v := range n.Drivers {
			d := *v
			d.UpdateTime = time.Time{} // refresh times are not part of identity
			drivers[k] = &d
		}
		n.Drivers = drivers
	}
	xb, _ := json.Marshal(&x)
	yb, _ := json.Marshal(&y)
	return string(xb) == string(yb)
}

// NodeAllocs blocks until the state index passes minIndex (or ctx ends) and
// returns every allocation placed on the node with the index it reflects.
// Clients act on allocations whose AllocModifyIndex they have not seen.
func (s *Server) NodeAllocs(ctx context.Context, nodeID string, minIndex uint64) ([]*structs.Allocation, uint64, error) {
	idx := s.store.WaitIndex(ctx, minIndex)
	allocs, err := s.store.AllocsByNode(nodeID)
	if err != nil {
		return nil, 0, fmt.Errorf("failed to list allocations of node %s: %w", nodeID, err)
	}
	return allocs, idx, nil
}

// UpdateAllocs records what a client reports about its allocations
// (ClientStatus, TaskStates, NetworkStatus) and removes allocations of
// purged jobs once they are terminal.
func (s *Server) UpdateAllocs(ctx context.Context, updates []*structs.Allocation) error {
	if len(updates) == 0 {
		return nil
	}
	if _, err := s.store.UpdateAllocsFromClient(updates); err != nil {
		return fmt.Errorf("failed to update allocations: %w", err)
	}
	for _, u := range updates {
		if u.TerminalStatus() {
			return s.gcAllocs()
		}
	}
	return nil
}

// gcAllocs deletes terminal allocations whose job was purged.
func (s *Server) gcAllocs() error {
	allocs, err := s.store.Allocs()
	if err != nil {
		return fmt.Errorf("failed to list allocations: %w", err)
	}
	jobs := map[string]bool{}
	var dead []string
	for _, a := range allocs {
		exists, ok := jobs[a.JobID]
		if !ok {
			_, err := s.store.Job(a.JobID)
			exists = err == nil
			jobs[a.JobID] = exists
		}
		if !exists && a.TerminalStatus() {
			dead = append(dead, a.ID)
		}
	}
	if len(dead) == 0 {
		return nil
	}
	if _, err := s.store.DeleteAllocs(dead); err != nil {
		return fmt.Errorf("failed to delete allocations: %w", err)
	}
	s.logger.Debug("removed allocations of purged jobs", "count", len(dead))
	return nil
}

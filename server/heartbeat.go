package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/meshlet/meshlet/state"
	"github.com/meshlet/meshlet/structs"
)

// Heartbeat defaults, as Nomad's min_heartbeat_ttl, heartbeat_grace and
// max_heartbeats_per_second.
const (
	DefaultMinHeartbeatTTL        = 10 * time.Second
	DefaultHeartbeatGrace         = 10 * time.Second
	DefaultMaxHeartbeatsPerSecond = 50.0
	DefaultFailoverHeartbeatTTL   = time.Minute
)

// ErrUnknownNode is returned for a heartbeat of a node that is not
// registered (its client registers again).
var ErrUnknownNode = structs.ErrUnknownNode

// heartbeatTTL is the interval a client heartbeats at: at least the
// minimum, longer when many nodes would exceed the heartbeat rate.
func (s *Server) heartbeatTTL() time.Duration {
	s.mu.Lock()
	n := len(s.heartbeats)
	s.mu.Unlock()
	ttl := time.Duration(float64(n) / s.cfg.MaxHeartbeatsPerSecond * float64(time.Second))
	return max(ttl, s.cfg.MinHeartbeatTTL)
}

// Heartbeat records that a node is alive and returns the interval of its
// next heartbeat. A node that was down is ready again and its jobs are
// evaluated (allocations replaced meanwhile are stopped on it). Only the
// leader takes heartbeats.
func (s *Server) Heartbeat(ctx context.Context, nodeID string) (time.Duration, error) {
	if err := s.requireLeader(); err != nil {
		return 0, err
	}
	node, err := s.store.Node(nodeID)
	if errors.Is(err, state.ErrNotFound) {
		return 0, fmt.Errorf("%w: %s", ErrUnknownNode, nodeID)
	}
	if err != nil {
		return 0, fmt.Errorf("failed to read node %s: %w", nodeID, err)
	}
	ttl := s.heartbeatTTL()
	s.armHeartbeat(nodeID, ttl+s.cfg.HeartbeatGrace)
	if node.Status == structs.NodeStatusDown {
		cp := *node
		cp.Status = structs.NodeStatusReady
		if err := s.nodeChanged(&cp, "node is alive again"); err != nil {
			return 0, err
		}
	}
	return ttl, nil
}

// armHeartbeat (re)starts the node's heartbeat timer: when it fires before
// the next heartbeat, the node is marked down.
func (s *Server) armHeartbeat(nodeID string, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutdown {
		return
	}
	if t, ok := s.heartbeats[nodeID]; ok {
		t.Reset(d)
		return
	}
	s.heartbeats[nodeID] = time.AfterFunc(d, func() { s.heartbeatMissed(nodeID) })
}

// heartbeatMissed marks a silent node down and evaluates its jobs, whose
// allocations on it are lost and replaced elsewhere.
func (s *Server) heartbeatMissed(nodeID string) {
	s.mu.Lock()
	delete(s.heartbeats, nodeID)
	s.mu.Unlock()
	if !s.IsLeader() {
		return
	}
	node, err := s.store.Node(nodeID)
	if err != nil || node.Status == structs.NodeStatusDown {
		return
	}
	cp := *node
	cp.Status = structs.NodeStatusDown
	s.logger.Warn("node missed its heartbeat; marking it down", "node_id", nodeID, "node_name", node.Name)
	if err := s.nodeChanged(&cp, "node down"); err != nil {
		s.logger.Error("failed to mark node down", "node_id", nodeID, "error", err)
	}
}

// nodeChanged stores a node whose status changed and evaluates every job
// that is not stopped (placements blocked on it, allocations lost on it).
func (s *Server) nodeChanged(node *structs.Node, why string) error {
	changed, err := s.storeNode(node)
	if err != nil || !changed {
		return err
	}
	s.logger.Info("node status changed", "node_id", node.ID, "status", node.Status, "reason", why)
	if node.Status == structs.NodeStatusDown && s.cfg.NodeDown != nil {
		// Only once the down status is stored (by this leader): a failed
		// store leaves the node's services where they are.
		s.cfg.NodeDown(node.ID)
	}
	if node.Status == structs.NodeStatusDown {
		if err := s.loseStopped(node.ID); err != nil {
			s.logger.Error("failed to mark stopped allocations of a down node lost", "node_id", node.ID, "error", err)
		}
	}
	return s.evaluateAll(node.ID)
}

// loseStopped marks lost the allocations on a down node that the servers
// already stopped (a stopped or purged job's, a replaced one's) but whose
// stop the node never reported, as Nomad's reconciler does: the
// scheduler only looks at allocations meant to run, and without this
// they would stay "running" (and their job too) and never be collected.
// A purged job's are removed at once.
func (s *Server) loseStopped(nodeID string) error {
	s.planMu.Lock()
	allocs, err := s.store.AllocsByNode(nodeID)
	if err != nil {
		s.planMu.Unlock()
		return fmt.Errorf("failed to list allocations of node %s: %w", nodeID, err)
	}
	now := s.now().UnixNano()
	var lost []*structs.Allocation
	var ids []string
	for _, a := range allocs {
		if a.DesiredStatus != structs.AllocDesiredStatusStop || a.TerminalStatus() {
			continue
		}
		cp := *a
		cp.ClientStatus, cp.ModifyTime = structs.AllocClientStatusLost, now
		lost = append(lost, &cp)
		ids = append(ids, a.ID)
	}
	if len(lost) > 0 {
		if _, err := s.store.ApplyPlan(&state.Plan{Allocs: lost}); err != nil {
			s.planMu.Unlock()
			return fmt.Errorf("failed to store lost allocations: %w", err)
		}
		s.planGen.Add(1)
	}
	s.planMu.Unlock()
	if len(ids) == 0 {
		return nil
	}
	_, err = s.collectPurged(ids)
	return err
}

// evaluateAll evaluates every job that is not stopped after a node change.
func (s *Server) evaluateAll(nodeID string) error {
	jobs, err := s.store.Jobs()
	if err != nil {
		return fmt.Errorf("failed to list jobs: %w", err)
	}
	for _, j := range jobs {
		if j.Stop {
			continue
		}
		_, err := s.plan(&planRequest{jobID: j.ID, trigger: TriggerNodeUpdate, prepare: storedJob})
		if err != nil && !errors.Is(err, state.ErrNotFound) { // purged meanwhile
			s.logger.Error("failed to evaluate job for node update", "job_id", j.ID, "node_id", nodeID, "error", err)
		}
	}
	return nil
}

// armAllHeartbeats gives every live node a first deadline when this server
// becomes the leader: the failover TTL, long enough for clients to find it.
func (s *Server) armAllHeartbeats() error {
	nodes, err := s.store.Nodes()
	if err != nil {
		return fmt.Errorf("failed to list nodes: %w", err)
	}
	for _, n := range nodes {
		if n.Status != structs.NodeStatusDown {
			s.armHeartbeat(n.ID, s.cfg.FailoverHeartbeatTTL)
		}
	}
	return nil
}

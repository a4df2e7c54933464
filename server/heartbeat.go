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
	// Armed before the read: a missed deadline's down write either sees
	// this arming and gives up, or lands before this read (setNodeStatus).
	ttl := s.heartbeatTTL()
	s.armHeartbeat(nodeID, ttl+s.cfg.HeartbeatGrace)
	node, err := s.store.Node(nodeID)
	if errors.Is(err, state.ErrNotFound) {
		s.disarmHeartbeat(nodeID)
		return 0, fmt.Errorf("%w: %s", ErrUnknownNode, nodeID)
	}
	if err != nil {
		return 0, fmt.Errorf("failed to read node %s: %w", nodeID, err)
	}
	if node.Status == structs.NodeStatusDown {
		if err := s.setNodeStatus(nodeID, structs.NodeStatusReady, "node is alive again", nil); err != nil {
			return 0, err
		}
	}
	return ttl, nil
}

// armHeartbeat (re)starts the node's heartbeat timer: when it fires before
// the next heartbeat, the node is marked down. Each arming is a new timer,
// so a deadline that already fired can tell that a heartbeat came after
// it (its timer is no longer the node's).
func (s *Server) armHeartbeat(nodeID string, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutdown {
		return
	}
	if t, ok := s.heartbeats[nodeID]; ok {
		t.Stop()
	}
	var t *time.Timer
	t = time.AfterFunc(d, func() {
		s.mu.Lock() // held by the arming until t is set
		fired := t
		s.mu.Unlock()
		s.heartbeatMissed(nodeID, fired)
	})
	s.heartbeats[nodeID] = t
}

// disarmHeartbeat stops the node's deadline (a heartbeat of a node that is
// not registered).
func (s *Server) disarmHeartbeat(nodeID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.heartbeats[nodeID]; ok {
		t.Stop()
		delete(s.heartbeats, nodeID)
	}
}

// heartbeatMissed marks a silent node down and evaluates its jobs, whose
// allocations on it are lost and replaced elsewhere. A heartbeat or a
// registration that came after the deadline (a newer timer) cancels it.
func (s *Server) heartbeatMissed(nodeID string, fired *time.Timer) {
	if !s.heartbeatDue(nodeID, fired, true) || !s.IsLeader() {
		return
	}
	s.logger.Warn("node missed its heartbeat; marking it down", "node_id", nodeID)
	if err := s.setNodeStatus(nodeID, structs.NodeStatusDown, "node down", fired); err != nil {
		s.logger.Error("failed to mark node down", "node_id", nodeID, "error", err)
	}
}

// heartbeatDue reports whether fired is still the node's deadline (no
// heartbeat since), forgetting it when forget is set.
func (s *Server) heartbeatDue(nodeID string, fired *time.Timer, forget bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.heartbeats[nodeID]; ok && cur != fired {
		return false
	}
	if forget {
		delete(s.heartbeats, nodeID)
	}
	return true
}

// setNodeStatus changes only the node's status, on a read of the node
// under the plan lock (a registration committed meanwhile is kept); then
// the node's jobs are evaluated as for any status change. With deadline
// (a missed heartbeat's timer) the change is made only while that
// deadline is still the node's, checked before and after the write: a
// heartbeat armed before the check stops it; one armed during the write
// is seen after it (the node is set ready again, the down change dropped);
// one armed after reads the down and sets the node ready itself.
func (s *Server) setNodeStatus(nodeID, status, why string, deadline *time.Timer) error {
	s.planMu.Lock()
	node, err := s.store.Node(nodeID)
	switch {
	case errors.Is(err, state.ErrNotFound):
		s.planMu.Unlock()
		return nil
	case err != nil:
		s.planMu.Unlock()
		return fmt.Errorf("failed to read node %s: %w", nodeID, err)
	case node.Status == status:
		s.planMu.Unlock()
		return nil
	}
	if deadline != nil && !s.heartbeatDue(nodeID, deadline, false) {
		s.planMu.Unlock()
		return nil
	}
	node.Status, node.StatusUpdatedAt = status, s.now().Unix()
	_, err = s.store.UpsertNode(node)
	if err == nil {
		s.planGen.Add(1)
	}
	s.planMu.Unlock()
	if err != nil {
		return fmt.Errorf("failed to store node %s: %w", nodeID, err)
	}
	if deadline != nil && !s.heartbeatDue(nodeID, deadline, false) {
		return s.setNodeStatus(nodeID, structs.NodeStatusReady, "heartbeat during the down write", nil)
	}
	return s.afterNodeChange(node, why)
}

// nodeChanged stores a node whose registration changed and evaluates every
// job that is not stopped (placements blocked on it).
func (s *Server) nodeChanged(node *structs.Node, why string) error {
	changed, err := s.storeNode(node)
	if err != nil || !changed {
		return err
	}
	return s.afterNodeChange(node, why)
}

// afterNodeChange follows a stored node change: a down node's services
// leave the mesh and its stopped allocations are lost; every job that is
// not stopped is evaluated (placements blocked on the node, allocations
// lost on it).
func (s *Server) afterNodeChange(node *structs.Node, why string) error {
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

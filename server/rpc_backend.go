package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/meshlet/meshlet/state"
	"github.com/meshlet/meshlet/structs"
)

// leaderCacheTTL bounds how stale a follower's idea of the leader's
// address may be.
const leaderCacheTTL = time.Second

// RPCBackend is what the RPC port (package rpc) serves to client nodes:
// the client-facing calls plus exact lookups for node authentication.
type RPCBackend struct {
	*Server
	mu         sync.Mutex
	leaderAddr string
	checked    time.Time
}

// RPCBackend returns the server's backend for the RPC port.
func (s *Server) RPCBackend() *RPCBackend { return &RPCBackend{Server: s} }

// Node returns the node with exactly this ID; an unknown node is an error
// wrapping structs.ErrUnknownNode.
func (b *RPCBackend) Node(ctx context.Context, id string) (*structs.Node, error) {
	n, err := b.store.Node(id)
	if errors.Is(err, state.ErrNotFound) {
		return nil, fmt.Errorf("%w: %s", structs.ErrUnknownNode, id)
	}
	return n, err
}

// Alloc returns the allocation with exactly this ID, or nil.
func (b *RPCBackend) Alloc(ctx context.Context, id string) (*structs.Allocation, error) {
	a, err := b.store.Alloc(id)
	if errors.Is(err, state.ErrNotFound) {
		return nil, nil
	}
	return a, err
}

// Leader reports whether this server takes writes and, when it does not,
// the leader's RPC address (looked up at most once a second).
func (b *RPCBackend) Leader() (bool, string) {
	if b.IsLeader() {
		return true, ""
	}
	if b.cfg.Leadership == nil {
		return false, ""
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if time.Since(b.checked) < leaderCacheTTL {
		return false, b.leaderAddr
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	addr, err := b.cfg.Leadership.Leader(ctx)
	if err != nil {
		b.logger.Warn("failed to look up the leader", "error", err)
		addr = ""
	}
	b.leaderAddr, b.checked = addr, time.Now()
	return false, addr
}

package apitest

import (
	"context"
	"fmt"
	"maps"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/meshlet/meshlet/api"
)

// AllocChecks implements api.CheckBackend: the results SetAllocChecks
// stored for the allocation (none: an empty set); an unknown allocation
// is api.ErrNotFound. A hook set with SetChecksHook runs first.
func (b *Backend) AllocChecks(ctx context.Context, allocID string) (nomadapi.AllocCheckStatuses, error) {
	b.mu.Lock()
	b.checksCalls++
	hook := b.checksHook
	b.mu.Unlock()
	if hook != nil {
		hook(ctx)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.allocs[allocID]; !ok {
		return nil, fmt.Errorf("%w: allocation %s", api.ErrNotFound, allocID)
	}
	return maps.Clone(b.checks[allocID]), nil
}

// SetAllocChecks sets the check results AllocChecks answers for allocID.
func (b *Backend) SetAllocChecks(allocID string, checks nomadapi.AllocCheckStatuses) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.checks[allocID] = maps.Clone(checks)
}

// SetChecksHook makes every AllocChecks call run fn first (nil: none); a
// hook that blocks until ctx ends plays a node that does not answer.
func (b *Backend) SetChecksHook(fn func(ctx context.Context)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.checksHook = fn
}

// AllocChecksCalls counts the AllocChecks calls so far.
func (b *Backend) AllocChecksCalls() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.checksCalls
}

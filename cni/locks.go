package cni

import (
	"context"
	"fmt"
	"runtime"
	"sync"
)

// The package's locks (see the package comment for the rules):
//
//   - allocLocks: one lock per allocation namespace path, held by Setup,
//     Restore and Teardown for their whole duration and by GC while it
//     removes one allocation. Different allocations never wait on each
//     other: the plugins lock what they share themselves (host-local its
//     lease dir with a file lock, iptables the xtables lock through
//     go-iptables' --wait), and a hung plugin stalls only its allocation.
//   - firstAddLock: the first ADD of each network a Manager runs goes
//     alone, so the plugins' check-then-create of their shared state (the
//     bridge, the firewall's CNI-FORWARD chain and its jumps, portmap's
//     top-level chains) never races and duplicates a rule; later ADDs
//     find it in place.
//   - opSlots: a bound, not a lock: at most that many of those
//     operations run at once in the process (taken after the allocation's
//     lock). Past a few they only compete for CPU, for the kernel's
//     namespace and link locks and for the ruleset (iptables-nft starts a
//     commit over when the ruleset changed meanwhile): on 2 busy CPUs
//     (BenchmarkSetupConcurrent), 100 setups all at once took 8-12 s, 4
//     at a time 4.2-7.8 s, one at a time 7.7-10.6 s. A hung plugin holds
//     one slot until its context ends.
//   - hostMu: meshlet's own host-global work, for its duration only: the
//     shared netns mount and the masquerade rules (ensureHost,
//     RemoveBridgeNAT) and the iptables sweeps after a failed DEL and in GC.
//
// Order: an allocation lock, then an operation slot, then firstAddLock,
// then hostMu; never the other way round.
var (
	allocLocks   = newKeyedMutex()
	firstAddLock = newKeyedMutex()
	opSlots      = make(chan struct{}, min(max(4, 2*runtime.NumCPU()), 16))
	hostMu       sync.Mutex
)

// keyedMutex is a set of mutexes named by string whose Lock gives up when
// its context ends. Entries exist only while held or waited for.
type keyedMutex struct {
	mu      sync.Mutex
	entries map[string]*keyEntry
}

type keyEntry struct {
	token chan struct{} // holds one value while the key is locked
	refs  int           // holders and waiters
}

func newKeyedMutex() *keyedMutex {
	return &keyedMutex{entries: map[string]*keyEntry{}}
}

// lock locks key, waiting until it is free or ctx ends. The returned
// unlock must be called exactly once.
func (k *keyedMutex) lock(ctx context.Context, key string) (unlock func(), err error) {
	k.mu.Lock()
	e := k.entries[key]
	if e == nil {
		e = &keyEntry{token: make(chan struct{}, 1)}
		k.entries[key] = e
	}
	e.refs++
	k.mu.Unlock()
	select {
	case e.token <- struct{}{}:
		return func() {
			<-e.token
			k.release(key, e)
		}, nil
	case <-ctx.Done():
		k.release(key, e)
		return nil, ctx.Err()
	}
}

func (k *keyedMutex) release(key string, e *keyEntry) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if e.refs--; e.refs == 0 {
		delete(k.entries, key)
	}
}

// lockAlloc takes allocID's lock (keyed by its namespace path, which is
// what two Managers of one process would share), then an operation slot.
func (m *Manager) lockAlloc(ctx context.Context, allocID string) (unlock func(), err error) {
	unlockID, err := allocLocks.lock(ctx, m.NetNSPath(allocID))
	if err != nil {
		return nil, fmt.Errorf("failed to wait for another operation on the allocation's network: %w", err)
	}
	select {
	case opSlots <- struct{}{}:
	case <-ctx.Done():
		unlockID()
		return nil, fmt.Errorf("failed to wait for a free slot among the running network operations: %w", ctx.Err())
	}
	return func() {
		<-opSlots
		unlockID()
	}, nil
}

package client

import (
	"fmt"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/meshlet/meshlet/client/allocrunner"
	"github.com/meshlet/meshlet/structs"
)

// Garbage collection of terminal allocations, as Nomad's client does: a
// replaced or finished allocation keeps its runner, its alloc dir and its
// logs (up to max_files × max_file_size per stream) only while it may still
// be looked at. Once the server has recorded its terminal status, it is
// destroyed when the node tracks more than GCMaxAllocs allocations (oldest
// terminal first), when it has been terminal for longer than GCAllocTTL, or
// while the data dir's filesystem is fuller than GCDiskUsageThreshold
// (oldest first, one at a time, measuring again after each).
// The server keeps its record until the job is purged.

// Defaults of the client's garbage collection (Nomad's gc_max_allocs and
// gc_interval; GCAllocTTL has no Nomad counterpart).
const (
	DefaultGCMaxAllocs = 50
	DefaultGCInterval  = time.Minute
	DefaultGCAllocTTL  = time.Hour
	// DefaultMaxKillTimeout is Nomad's max_kill_timeout default.
	DefaultMaxKillTimeout = 30 * time.Second
	// DefaultGCDiskUsageThreshold is Nomad's gc_disk_usage_threshold.
	DefaultGCDiskUsageThreshold = 80.0
)

// diskUsage is the percentage of dir's filesystem in use (blocks
// available to unprivileged users count as free, as df reports).
func diskUsage(dir string) (float64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("failed to stat the filesystem of %s: %w", dir, err)
	}
	used := st.Blocks - st.Bfree
	total := used + st.Bavail
	if total == 0 {
		return 0, nil
	}
	return 100 * float64(used) / float64(total), nil
}

// diskFull reports whether the data dir's filesystem is over the GC
// threshold (an unreadable usage counts as not full).
func (c *Client) diskFull() bool {
	pct, err := c.cfg.DiskUsage()
	if err != nil {
		c.logger.Warn("failed to read disk usage for garbage collection", "error", err)
		return false
	}
	if pct > c.cfg.GCDiskUsageThreshold {
		c.logger.Info("disk usage over the garbage collection threshold: collecting the oldest terminal allocation",
			"usage_percent", pct, "threshold_percent", c.cfg.GCDiskUsageThreshold)
		return true
	}
	return false
}

// gcLoop collects terminal allocations every GCInterval: over the limits,
// then, while the disk is over its threshold, one at a time.
func (c *Client) gcLoop() {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.GCInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			now := time.Now()
			for _, ar := range c.claimOverLimits(now) {
				c.wg.Add(1)
				c.destroy(ar) // done before the disk usage is measured
			}
			c.collectForDisk(now)
		case <-c.ctx.Done():
			return
		}
	}
}

// gcCandidate is a terminal allocation that may be collected.
type gcCandidate struct {
	ar    *allocrunner.AllocRunner
	since time.Time
}

// terminalAllocs returns the allocations the servers recorded terminal and
// that are done stopping here, oldest first, and how many allocations the
// node tracks.
func (c *Client) terminalAllocs(now time.Time) ([]gcCandidate, int) {
	c.mu.Lock()
	total := len(c.runners)
	runners := make([]*allocrunner.AllocRunner, 0, total)
	for id, ar := range c.runners {
		if c.serverTerminal[id] {
			runners = append(runners, ar)
		}
	}
	c.mu.Unlock()
	var terminal []gcCandidate
	for _, ar := range runners {
		select {
		case <-ar.WaitCh():
		default:
			continue // still stopping
		}
		if v := ar.ClientView(); v.TerminalStatus() {
			terminal = append(terminal, gcCandidate{ar, finishedAt(v, now)})
		}
	}
	slices.SortFunc(terminal, func(a, b gcCandidate) int { return a.since.Compare(b.since) })
	return terminal, total
}

// claimLocked removes ar from the tracked allocations for collection;
// false if it was removed meanwhile. c.mu is held.
func (c *Client) claimLocked(ar *allocrunner.AllocRunner) bool {
	id := ar.ID()
	if c.runners[id] != ar {
		return false
	}
	delete(c.runners, id)
	delete(c.seen, id)
	c.collected[id] = true
	return true
}

// collect destroys, in the background, the terminal allocations over
// GCMaxAllocs (oldest first) and those terminal for longer than GCAllocTTL.
func (c *Client) collect(now time.Time) {
	for _, ar := range c.claimOverLimits(now) {
		c.wg.Add(1)
		go c.destroy(ar)
	}
}

// claimOverLimits claims the terminal allocations over GCMaxAllocs and
// GCAllocTTL for collection.
func (c *Client) claimOverLimits(now time.Time) []*allocrunner.AllocRunner {
	terminal, total := c.terminalAllocs(now)
	excess := total - c.cfg.GCMaxAllocs
	var victims []*allocrunner.AllocRunner
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, cand := range terminal {
		if i >= excess && now.Sub(cand.since) <= c.cfg.GCAllocTTL {
			continue
		}
		if c.claimLocked(cand.ar) {
			c.logger.Info("garbage-collecting terminal allocation", "alloc_id", cand.ar.ID())
			victims = append(victims, cand.ar)
		}
	}
	return victims
}

// collectForDisk destroys terminal allocations, oldest first and one at a
// time, while the data dir's filesystem is over GCDiskUsageThreshold
// (Nomad's gc_disk_usage_threshold): the usage is measured again after
// each one is destroyed.
func (c *Client) collectForDisk(now time.Time) {
	terminal, _ := c.terminalAllocs(now)
	for _, cand := range terminal {
		if c.ctx.Err() != nil || !c.diskFull() {
			return
		}
		c.mu.Lock()
		ok := c.claimLocked(cand.ar)
		c.mu.Unlock()
		if !ok {
			continue
		}
		c.logger.Info("garbage-collecting terminal allocation: disk usage over the threshold", "alloc_id", cand.ar.ID())
		c.wg.Add(1)
		c.destroy(cand.ar)
	}
}

// finishedAt is when the allocation's last task finished (now if unknown).
func finishedAt(a *structs.Allocation, now time.Time) time.Time {
	var last time.Time
	for _, s := range a.TaskStates {
		if s.FinishedAt.After(last) {
			last = s.FinishedAt
		}
	}
	if last.IsZero() {
		return now
	}
	return last
}

package client

import (
	"context"
	"time"

	"github.com/meshlet/meshlet/client/allocrunner"
	"github.com/meshlet/meshlet/structs"
)

// retryDelay paces retries after a failed server call.
const retryDelay = time.Second

// watch follows the server's view of this node's allocations.
func (c *Client) watch() {
	defer c.wg.Done()
	var index uint64
	nodeID := c.node.ID
	for {
		allocs, idx, err := c.cfg.Server.NodeAllocs(c.ctx, nodeID, index)
		if c.ctx.Err() != nil {
			return
		}
		if err != nil {
			c.logger.Warn("failed to fetch allocations", "error", err)
			select {
			case <-time.After(retryDelay):
			case <-c.ctx.Done():
				return
			}
			continue
		}
		index = idx
		c.reconcile(allocs)
		if c.unrestored != nil {
			c.settleUnrestored()
		}
	}
}

// reconcile starts runners for new allocations, passes server-side changes
// to existing ones and destroys those the server no longer has.
func (c *Client) reconcile(allocs []*structs.Allocation) {
	present := map[string]bool{}
	for _, a := range allocs {
		present[a.ID] = true
		c.mu.Lock()
		ar, seen, collected := c.runners[a.ID], c.seen[a.ID], c.collected[a.ID]
		c.serverTerminal[a.ID] = a.TerminalStatus()
		c.mu.Unlock()
		switch {
		case collected:
			// Garbage-collected here; the server keeps its record.
		case ar == nil && a.TerminalStatus():
			// Finished before we knew it (e.g. state wiped): nothing to run.
		case ar == nil:
			c.add(a)
		case a.AllocModifyIndex > seen:
			c.mu.Lock()
			c.seen[a.ID] = a.AllocModifyIndex
			c.mu.Unlock()
			ar.Update(a)
		}
	}
	c.mu.Lock()
	var gone []*allocrunner.AllocRunner
	for id, ar := range c.runners {
		if !present[id] {
			gone = append(gone, ar)
			delete(c.runners, id)
			delete(c.seen, id)
			c.destroying[id] = ar
		}
	}
	for _, m := range []map[string]bool{c.serverTerminal, c.collected} {
		for id := range m {
			if !present[id] {
				delete(m, id)
			}
		}
	}
	c.mu.Unlock()
	for _, ar := range gone {
		c.wg.Add(1)
		go c.destroy(ar)
	}
	c.collect(time.Now())
}

func (c *Client) add(a *structs.Allocation) {
	if err := c.db.PutAlloc(a); err != nil {
		c.logger.Error("failed to persist allocation", "alloc_id", a.ID, "error", err)
		return
	}
	// Task states without a runner: a previous agent ran the allocation
	// but its local record could not be restored (see restore). Its tasks
	// may still run: re-attach to them rather than start them again.
	tasks, err := c.db.TaskStates(a.ID)
	if err != nil {
		c.logger.Error("failed to read task states; not running the allocation", "alloc_id", a.ID, "error", err)
		return
	}
	ar, err := c.newRunner(a, len(tasks) > 0, tasks)
	if err != nil {
		c.logger.Error("failed to create alloc runner", "alloc_id", a.ID, "error", err)
		c.queueUpdate(&structs.Allocation{ID: a.ID, ClientStatus: structs.AllocClientStatusFailed, ClientDescription: err.Error()})
		return
	}
	c.mu.Lock()
	c.runners[a.ID] = ar
	c.seen[a.ID] = a.AllocModifyIndex
	c.mu.Unlock()
	c.logger.Info("running allocation", "alloc_id", a.ID, "job_id", a.JobID, "name", a.Name)
	go ar.Run()
}

// destroy stops and removes an allocation the server forgot. It waits for
// the allocation's stop (kill timeouts, poststop tasks) as long as it
// takes; if the agent stops first, the allocation's runner stops as on
// any shutdown and its state stays for the next start to finish the job,
// rather than being deleted under a runner still at work.
//
// Each hook's teardown (network, sockets) that follows is bounded
// (allocrunner.HookDestroyTimeout), so one stuck teardown cannot hold
// the garbage collection, which destroys one allocation after another,
// nor leave the other hooks no time.
func (c *Client) destroy(ar *allocrunner.AllocRunner) {
	defer c.wg.Done()
	defer func() {
		c.mu.Lock()
		if c.destroying[ar.ID()] == ar {
			delete(c.destroying, ar.ID())
		}
		c.mu.Unlock()
	}()
	ar.Kill()
	select {
	case <-ar.WaitCh():
	default:
		select {
		case <-ar.WaitCh():
		case <-c.ctx.Done():
			ar.Shutdown()
			c.logger.Info("agent stopping before the allocation's tasks stopped; its state is kept for the next start", "alloc_id", ar.ID())
			return
		}
	}
	// The tasks are dead: the teardown runs to its end even when the agent
	// is stopping (each hook bounded), so nothing is left behind.
	if err := ar.Destroy(context.WithoutCancel(c.ctx)); err != nil {
		c.logger.Warn("failed to destroy allocation", "alloc_id", ar.ID(), "error", err)
	}
	if err := c.db.DeleteAlloc(ar.ID()); err != nil {
		c.logger.Warn("failed to forget allocation", "alloc_id", ar.ID(), "error", err)
	}
	c.logger.Info("removed allocation", "alloc_id", ar.ID())
}

// queueUpdate records the latest client view of an allocation for the
// updater; older views of the same allocation are replaced.
func (c *Client) queueUpdate(a *structs.Allocation) {
	c.mu.Lock()
	c.pending[a.ID] = a
	c.mu.Unlock()
	c.wakeUpdater()
}

// sendUpdates pushes queued status updates to the server.
func (c *Client) sendUpdates() {
	defer c.wg.Done()
	for {
		select {
		case <-c.updateCh:
		case <-c.ctx.Done():
			return
		}
		if !c.flush(c.ctx) {
			select {
			case <-time.After(retryDelay):
			case <-c.ctx.Done():
				return
			}
			c.wakeUpdater()
		}
	}
}

// wakeUpdater makes sendUpdates flush soon; a wake-up already pending is
// enough.
func (c *Client) wakeUpdater() {
	select {
	case c.updateCh <- struct{}{}:
	default:
	}
}

// flush sends every pending update; on failure they are re-queued.
func (c *Client) flush(ctx context.Context) bool {
	c.mu.Lock()
	batch := make([]*structs.Allocation, 0, len(c.pending))
	for _, a := range c.pending {
		batch = append(batch, a)
	}
	c.pending = map[string]*structs.Allocation{}
	c.mu.Unlock()
	if len(batch) == 0 {
		return true
	}
	if err := c.cfg.Server.UpdateAllocs(ctx, batch); err != nil {
		c.logger.Warn("failed to send allocation updates", "count", len(batch), "error", err)
		c.mu.Lock()
		for _, a := range batch {
			if _, newer := c.pending[a.ID]; !newer {
				c.pending[a.ID] = a
			}
		}
		c.mu.Unlock()
		return false
	}
	return true
}

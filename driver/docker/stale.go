package docker

import (
	"context"
	"fmt"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"github.com/meshlet/meshlet/driver"
)

// removeStale removes the running or created containers of cfg's task (its
// allocation and task name, this driver's owner label) that no handle
// tracks. The task runner starts a task only when no handle of it runs, so
// such a container is one an earlier StartTask created before the agent
// was killed, its handle never saved: nothing waits for it or reads its
// logs, and in the allocation's shared namespace it would hold the task's
// ports (the new container's app failing "address already in use") until
// the dangling sweep's grace ends. Exited containers of earlier runs are
// left to the gc settings.
func (d *Driver) removeStale(ctx context.Context, c *client.Client, cfg *driver.TaskConfig) error {
	list, err := c.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(
		filters.Arg("label", LabelAllocID+"="+cfg.AllocID), filters.Arg("label", LabelTask+"="+cfg.Name))})
	if err != nil {
		return fmt.Errorf("failed to list the containers of task %s: %w", cfg.Name, err)
	}
	tracked, _, _ := d.tracked()
	for _, ct := range list {
		if !d.owns(ct.Labels[LabelOwner]) || tracked[ct.ID] || (ct.State != "running" && ct.State != "created" && ct.State != "restarting") {
			continue
		}
		d.logger.Warn("removing a container of the task that no handle tracks (a start the agent did not finish)",
			"alloc_id", cfg.AllocID, "task", cfg.Name, "container_id", shortID(ct.ID))
		d.removeContainer(ct.ID)
	}
	return nil
}

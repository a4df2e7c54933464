package docker

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/meshlet/meshlet/internal/atomicfile"
)

// Nomad's gc { dangling_containers } defaults.
const (
	defaultDanglingPeriod = 5 * time.Minute
	defaultCreationGrace  = 5 * time.Minute
)

// LabelOwner names the driver that made a container (its state
// directory), so one driver's sweep never touches another agent's
// containers on a shared daemon.
const LabelOwner = "com.meshlet.owner"

// DanglingConfig is Nomad's gc { dangling_containers } block: every Period
// the driver removes its running containers that no task it tracks owns
// (a task whose create call failed after the daemon made the container, a
// pause container left behind), once older than CreationGrace. With
// DryRun it only logs them.
type DanglingConfig struct {
	// Enabled nil means true.
	Enabled *bool
	// Period 0 means 5m; CreationGrace 0 means 5m.
	Period, CreationGrace time.Duration
	DryRun                bool
}

func (c DanglingConfig) withDefaults() DanglingConfig {
	if c.Period <= 0 {
		c.Period = defaultDanglingPeriod
	}
	if c.CreationGrace <= 0 {
		c.CreationGrace = defaultCreationGrace
	}
	return c
}

// reconcile runs the dangling-container sweep every period until ctx
// ends; the first run waits for the creation grace (as Nomad's), so
// tasks an agent restart is recovering are tracked by then. Each round
// also schedules the removal of owned images nothing uses.
func (d *Driver) reconcile(ctx context.Context, cfg DanglingConfig) {
	defer close(d.reconcileDone)
	timer := time.NewTimer(max(cfg.Period, cfg.CreationGrace))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		n, err := d.removeDangling(ctx, cfg)
		if err != nil && ctx.Err() == nil {
			d.logger.Warn("failed to remove dangling containers", "error", err)
		} else if n > 0 {
			d.logger.Info("removed dangling containers", "count", n)
		}
		d.images.scheduleIdle()
		timer.Reset(cfg.Period)
	}
}

// removeDangling removes (or with DryRun lists) this driver's running
// containers created before the grace that no tracked task owns; a pause
// container is owned while a task of its allocation is tracked. While a
// task is starting nothing is removed.
func (d *Driver) removeDangling(ctx context.Context, cfg DanglingConfig) (int, error) {
	c, err := d.docker()
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	list, err := c.ContainerList(ctx, container.ListOptions{Filters: filters.NewArgs(filters.Arg("label", LabelOwner))})
	if err != nil {
		return 0, fmt.Errorf("failed to list containers: %w", err)
	}
	list = slices.DeleteFunc(list, func(ct container.Summary) bool { return !d.owns(ct.Labels[LabelOwner]) })
	containers, allocs, starting := d.tracked()
	if starting {
		return 0, nil // a starting task's container is not known yet: next round
	}
	cutoff := time.Now().Add(-cfg.CreationGrace).Unix()
	removed := 0
	for _, ct := range list {
		alloc := ct.Labels[LabelAllocID]
		switch {
		case ct.Created > cutoff, containers[ct.ID]:
			continue
		case ct.Labels[LabelPause] != "" && allocs[alloc]:
			continue
		}
		if cfg.DryRun {
			d.logger.Info("dangling container (dry run: kept)", "alloc_id", alloc, "task", ct.Labels[LabelTask], "container_id", shortID(ct.ID))
			continue
		}
		d.logger.Info("removing dangling container", "alloc_id", alloc, "task", ct.Labels[LabelTask], "container_id", shortID(ct.ID))
		d.removeContainer(ct.ID)
		removed++
	}
	return removed, nil
}

// tracked returns the tracked tasks' container IDs, their allocations, and
// whether a task is starting (its container not known yet).
func (d *Driver) tracked() (containers, allocs map[string]bool, starting bool) {
	containers, allocs = map[string]bool{}, map[string]bool{}
	d.mu.RLock()
	defer d.mu.RUnlock()
	for _, h := range d.tasks {
		if h == nil {
			starting = true
			continue
		}
		containers[h.st.ContainerID] = true
		allocs[h.cfg.AllocID] = true
	}
	return containers, allocs, starting
}

// ownerFile keeps the driver's owner ID in its state directory.
const ownerFile = "owner-id"

// owner is the value of LabelOwner on this driver's containers: a random
// ID made once and kept in the state directory, so two agents on one
// daemon never share it, even with the same data_dir (agents in
// containers that mount one docker.sock; agents of several hosts on one
// TCP endpoint). If it cannot be kept (or the kept one is unreadable), a
// random ID that lives only as long as this process labels its
// containers: never a value another agent could take for its own (its
// sweeps would remove them), at worst containers left behind after a
// restart.
func (d *Driver) owner() string {
	d.ownerOnce.Do(func() {
		var raw [16]byte
		_, _ = rand.Read(raw[:])
		d.ownerID = hex.EncodeToString(raw[:])
		path := filepath.Join(d.cfg.StateDir, ownerFile)
		b, err := os.ReadFile(path)
		switch id := string(bytes.TrimSpace(b)); {
		case err == nil && id != "":
			d.ownerID = id
			return
		case err == nil || !errors.Is(err, os.ErrNotExist):
			// Lost or unreadable: a new kept ID would disown every
			// container labelled with the old one for good. Keep the file
			// for the operator; the unkept ID labels containers meanwhile.
			d.logger.Error("the driver's owner ID is unreadable; containers it labelled before are not swept until it is restored",
				"path", path, "error", cmp.Or(err, errors.New("empty file")))
			return
		}
		if err := os.MkdirAll(d.cfg.StateDir, 0o700); err != nil {
			d.logger.Warn("cannot keep the driver's owner ID; containers started now are not swept after a restart", "error", err)
			return
		}
		if err := atomicfile.WriteFile(path, []byte(d.ownerID+"\n"), 0o600); err != nil {
			d.logger.Warn("cannot keep the driver's owner ID; containers started now are not swept after a restart", "error", err)
		}
	})
	return d.ownerID
}

// owns reports whether a container's LabelOwner value is this driver's:
// its owner ID, or its state directory's path (the label of containers
// made before the ID existed).
func (d *Driver) owns(label string) bool {
	return label != "" && (label == d.owner() || label == d.cfg.StateDir)
}

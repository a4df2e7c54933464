package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"

	"github.com/meshlet/meshlet/internal/atomicfile"
)

// defaultImageDelay is Nomad's gc { image_delay }.
const defaultImageDelay = 3 * time.Minute

// ownedImagesFile, in the state dir, lists the images this driver pulled
// or imported: the only ones image GC removes.
const ownedImagesFile = "owned-images.json"

// imageGC is Nomad's image garbage collection, limited to the images the
// driver pulled or imported itself: each use (a task's container, an
// allocation's pause container) holds a reference; when an owned image's
// last reference goes, it is removed after the delay unless used again
// meanwhile, and never while any container (tracked or not) is made from
// it. The owned set is kept on disk so an agent restart does not forget
// it.
//
// Concurrency: mu guards the maps; daemon calls happen without it.
type imageGC struct {
	d       *Driver
	enabled bool
	delay   time.Duration
	file    string

	// inflight counts removals under way; stop waits for them.
	inflight sync.WaitGroup

	mu     sync.Mutex
	loaded bool
	closed bool
	owned  map[string]bool
	refs   map[string]map[string]bool
	timers map[string]*time.Timer
	// removing holds a channel per image being removed, closed when done.
	removing map[string]chan struct{}
}

func newImageGC(d *Driver) *imageGC {
	g := &imageGC{d: d, enabled: d.cfg.GCImage == nil || *d.cfg.GCImage, delay: d.cfg.GCImageDelay,
		file: filepath.Join(d.cfg.StateDir, ownedImagesFile),
		refs: map[string]map[string]bool{}, timers: map[string]*time.Timer{}, removing: map[string]chan struct{}{}}
	if g.delay <= 0 {
		g.delay = defaultImageDelay
	}
	return g
}

// load reads the owned set once; mu held.
func (g *imageGC) load() {
	if g.loaded {
		return
	}
	g.loaded, g.owned = true, map[string]bool{}
	data, err := os.ReadFile(g.file)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	var list []string
	if err == nil {
		err = json.Unmarshal(data, &list)
	}
	if err != nil {
		// Kept aside, not overwritten by the next save: the images it
		// lists are never collected, but stay known to an operator.
		aside := g.file + ".corrupt"
		if rerr := os.Rename(g.file, aside); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			aside = g.file
		}
		g.d.logger.Warn("failed to read the images the driver pulled; they will not be collected", "error", err, "path", aside)
		return
	}
	for _, ref := range list {
		g.owned[imageKey(ref)] = true
	}
}

// imageKey is the one name of an image reference: "redis", "redis:latest"
// and "docker.io/library/redis:latest" are one image to hold and collect.
// A reference that does not parse is kept as written.
func imageKey(ref string) string {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return ref
	}
	return reference.TagNameOnly(named).String()
}

// save writes the owned set; mu held.
func (g *imageGC) save() {
	data, _ := json.Marshal(slices.Sorted(maps.Keys(g.owned)))
	if err := os.MkdirAll(filepath.Dir(g.file), 0o700); err == nil {
		err = atomicfile.WriteFile(g.file, data, 0o600)
		if err == nil {
			return
		}
		g.d.logger.Warn("failed to save the images the driver pulled", "error", err)
	}
}

// pulled records that the driver pulled or imported ref.
func (g *imageGC) pulled(ref string) {
	ref = imageKey(ref)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.load()
	if !g.owned[ref] {
		g.owned[ref] = true
		g.save()
	}
}

// acquire records that user (a task ID, "pause/<alloc>") uses ref and
// cancels a pending removal; a removal under way is waited for, so the
// caller then finds the image gone and pulls it again.
func (g *imageGC) acquire(ref, user string) {
	ref = imageKey(ref)
	g.mu.Lock()
	if g.refs[ref] == nil {
		g.refs[ref] = map[string]bool{}
	}
	g.refs[ref][user] = true
	if t := g.timers[ref]; t != nil {
		t.Stop()
		delete(g.timers, ref)
	}
	done := g.removing[ref]
	g.mu.Unlock()
	if done != nil {
		<-done
	}
}

// release drops user's use of ref; an owned image left unused is removed
// after the delay.
func (g *imageGC) release(ref, user string) {
	ref = imageKey(ref)
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.refs[ref], user)
	if len(g.refs[ref]) == 0 {
		delete(g.refs, ref)
		g.scheduleLocked(ref)
	}
}

// scheduleIdle schedules the removal of every owned image nothing tracked
// uses (after an agent restart, say).
func (g *imageGC) scheduleIdle() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.load()
	for ref := range g.owned {
		if len(g.refs[ref]) == 0 {
			g.scheduleLocked(ref)
		}
	}
}

func (g *imageGC) scheduleLocked(ref string) {
	g.load()
	if !g.enabled || g.closed || !g.owned[ref] || g.timers[ref] != nil {
		return
	}
	g.timers[ref] = time.AfterFunc(g.delay, func() { g.collect(ref) })
}

// stop cancels pending removals and waits for those under way (the
// driver closes).
func (g *imageGC) stop() {
	g.mu.Lock()
	g.closed = true
	for ref, t := range g.timers {
		t.Stop()
		delete(g.timers, ref)
	}
	g.mu.Unlock()
	g.inflight.Wait()
}

// collect removes ref unless it is used again or a container is made
// from it.
func (g *imageGC) collect(ref string) {
	g.mu.Lock()
	delete(g.timers, ref)
	busy := len(g.refs[ref]) > 0 || g.closed
	done := make(chan struct{})
	if !busy {
		g.inflight.Add(1) // under mu, before stop can wait
		g.removing[ref] = done
	}
	g.mu.Unlock()
	if busy {
		return
	}
	defer g.inflight.Done()
	defer func() {
		g.mu.Lock()
		delete(g.removing, ref)
		g.mu.Unlock()
		close(done)
	}()
	err := g.remove(ref)
	if errors.Is(err, errImageInUse) {
		g.d.logger.Debug("image still used by a container; not removed", "image", ref)
		return
	}
	if err != nil {
		g.d.logger.Warn("failed to remove unused image", "image", ref, "error", err)
		return
	}
	g.mu.Lock()
	if len(g.refs[ref]) == 0 {
		delete(g.owned, ref)
		g.save()
	}
	g.mu.Unlock()
	g.d.logger.Info("removed unused image", "image", ref)
}

var errImageInUse = errors.New("image in use")

// remove removes ref from the daemon unless a container uses it; a
// missing image is success.
func (g *imageGC) remove(ref string) error {
	c, err := g.d.docker()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), controlTimeout)
	defer cancel()
	users, err := c.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("ancestor", ref))})
	if err != nil && !cerrdefs.IsNotFound(err) && !cerrdefs.IsInvalidArgument(err) {
		return fmt.Errorf("failed to list the image's containers: %w", err)
	}
	if len(users) > 0 {
		return errImageInUse
	}
	if _, err := c.ImageRemove(ctx, ref, image.RemoveOptions{PruneChildren: true}); err != nil && !cerrdefs.IsNotFound(err) {
		if cerrdefs.IsConflict(err) {
			return fmt.Errorf("%w: %w", errImageInUse, err)
		}
		return err
	}
	return nil
}

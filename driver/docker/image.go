package docker

import (
	"context"
	"fmt"

	cerrdefs "github.com/containerd/errdefs"
)

// ImagePresent reports whether the daemon has image locally, without
// pulling it (the connect_proxy driver runs a sidecar as an Envoy container
// only where its image is present, unless configured to pull it). An
// unreachable daemon is an error.
func (d *Driver) ImagePresent(ctx context.Context, image string) (bool, error) {
	c, err := d.docker()
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(ctx, fingerprintTimeout)
	defer cancel()
	if _, err := c.ImageInspect(ctx, image); err != nil {
		if cerrdefs.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("failed to inspect image %s: %w", image, err)
	}
	return true, nil
}

package docker

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/meshlet/meshlet/internal/nofollow"
)

// checkSourcesBeneath refuses a relative volume or bind mount source that
// leaves the task directory through a symlink. Without volumes { enabled }
// a task may only bind paths in its task directory, which it can write
// (local/): a link it planted there on an earlier run (local/data -> /)
// would otherwise bind that host path into its container.
func checkSourcesBeneath(taskDir string, tc *taskConfig) error {
	for _, v := range tc.Volumes {
		src, _, _ := strings.Cut(v, ":")
		if filepath.IsAbs(src) {
			continue
		}
		if err := nofollow.CheckBeneath(taskDir, src); err != nil {
			return fmt.Errorf("volume %q: %w; host paths outside the task directory are %w: set volumes { enabled = true }", v, err, ErrNotAllowed)
		}
	}
	for _, mt := range tc.Mounts {
		if mt.Type != "bind" || filepath.IsAbs(mt.Source) {
			continue
		}
		if err := nofollow.CheckBeneath(taskDir, mt.Source); err != nil {
			return fmt.Errorf("bind mount of %q: %w; host paths outside the task directory are %w: set volumes { enabled = true }", mt.Source, err, ErrNotAllowed)
		}
	}
	return nil
}

package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/meshlet/meshlet/ca"
	"github.com/meshlet/meshlet/internal/atomicfile"
)

// meshRootsWait bounds how long a client agent that never had the
// cluster's CA roots waits for them at start: its control plane cannot be
// built without the trust domain.
const meshRootsWait = 60 * time.Second

// rootsCachePath keeps a client agent's last known CA roots (public), so a
// restart serves its sidecars before the servers answer.
func rootsCachePath(dataDir string) string {
	return filepath.Join(dataDir, "client", "mesh-roots.json")
}

// installRemoteRoots gives a client agent's remote CA its first roots: the
// cached ones, or else the servers' (retried until meshRootsWait).
func (a *Agent) installRemoteRoots(m *ca.Manager) error {
	path := rootsCachePath(a.cfg.DataDir)
	if r, err := loadRoots(path); err == nil {
		if err := m.SetRoots(r); err == nil {
			return nil
		}
		a.logger.Warn("ignoring the cached CA roots", "path", path, "error", err)
	} else if !errors.Is(err, fs.ErrNotExist) {
		a.logger.Warn("ignoring the cached CA roots", "path", path, "error", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), meshRootsWait)
	defer cancel()
	for {
		r, err := a.rpcClient.ConnectRoots(ctx)
		if err == nil {
			if err = m.SetRoots(r); err == nil {
				a.saveRoots(r)
				return nil
			}
		}
		a.logger.Warn("waiting for the cluster's CA roots", "error", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("failed to get the cluster's CA roots from the servers within %s: %w", meshRootsWait, err)
		case <-time.After(2 * time.Second):
		}
	}
}

// saveRoots caches r; a failure only costs the next start a server call.
func (a *Agent) saveRoots(r ca.Roots) {
	path := rootsCachePath(a.cfg.DataDir)
	b, err := json.Marshal(r)
	if err == nil {
		if err = os.MkdirAll(filepath.Dir(path), 0o700); err == nil {
			err = atomicfile.WriteFile(path, b, 0o600)
		}
	}
	if err != nil {
		a.logger.Warn("failed to cache the cluster's CA roots", "path", path, "error", err)
	}
}

func loadRoots(path string) (ca.Roots, error) {
	var r ca.Roots
	b, err := os.ReadFile(path)
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("failed to decode %s: %w", path, err)
	}
	return r, nil
}

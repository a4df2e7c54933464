package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/meshlet/meshlet/ca"
	"github.com/meshlet/meshlet/intention"
	"github.com/meshlet/meshlet/meshstate"
)

// migratedSuffix marks a connect state directory whose content was
// imported into etcd (kept as a backup, never read again).
const migratedSuffix = ".migrated-to-etcd"

// ErrConnectStateConflict: this server's data dir holds a CA of another
// trust domain than the cluster's.
var ErrConnectStateConflict = errors.New("connect state conflicts with the cluster's")

// importConnectState moves the CA and intentions a pre-cluster agent kept
// in <data_dir>/connect into etcd, once: what etcd already holds wins for
// intentions; a CA of another trust domain is refused (importing it would
// cut off every sidecar of one side). The directories are renamed, not
// deleted.
func (a *Agent) importConnectState(ctx context.Context, st *meshstate.Store) error {
	dir := filepath.Join(a.cfg.DataDir, "connect")
	if err := importCA(ctx, filepath.Join(dir, "ca"), st.CAStorage()); err != nil {
		return err
	}
	return a.importIntentions(ctx, filepath.Join(dir, "intentions"), st)
}

func importCA(ctx context.Context, dir string, to ca.Storage) error {
	if !dirExists(dir) {
		return nil
	}
	local, err := ca.LoadDir(dir) // reads only: a one-time import
	if err != nil {
		return fmt.Errorf("failed to import the CA from %s: %w", dir, err)
	}
	if local != nil {
		cur, err := to.Load(ctx)
		if err != nil {
			return fmt.Errorf("failed to read the cluster's CA: %w", err)
		}
		if cur == nil {
			err = to.Save(ctx, nil, local)
			if errors.Is(err, ca.ErrStateConflict) {
				cur, err = to.Load(ctx)
			}
		}
		if err != nil {
			return fmt.Errorf("failed to import the CA from %s: %w", dir, err)
		}
		if cur != nil && cur.ClusterID != local.ClusterID {
			return fmt.Errorf("%w: %s holds the CA of cluster %s but the cluster's CA is %s; move %s away to join with the cluster's CA (this node's sidecars then get new certificates)",
				ErrConnectStateConflict, dir, local.ClusterID, cur.ClusterID, dir)
		}
	}
	return markMigrated(dir)
}

func (a *Agent) importIntentions(ctx context.Context, dir string, st *meshstate.Store) error {
	if !dirExists(dir) {
		return nil
	}
	local, found, err := intention.LoadDir(dir)
	if err != nil {
		return fmt.Errorf("failed to import the intentions from %s: %w", dir, err)
	}
	if found {
		created, err := st.ImportIntentions(ctx, local)
		if err != nil {
			return fmt.Errorf("failed to import the intentions from %s: %w", dir, err)
		}
		if !created && len(local.Intentions) > 0 {
			a.logger.Warn("the cluster already has intentions; this server's own were not imported (kept in the renamed directory)",
				"path", dir+migratedSuffix, "count", len(local.Intentions))
		}
	}
	return markMigrated(dir)
}

func markMigrated(dir string) error {
	if err := os.Rename(dir, dir+migratedSuffix); err != nil {
		return fmt.Errorf("failed to mark %s as imported into etcd: %w", dir, err)
	}
	return nil
}

func dirExists(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

// connectStateLost reports whether d, a connect state directory of an
// agent that ran before, is gone without having been imported into etcd.
func connectStateLost(d string) (bool, error) {
	for _, p := range []string{d, d + migratedSuffix} {
		_, err := os.Stat(p)
		if err == nil {
			return false, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return false, fmt.Errorf("failed to check %s: %w", p, err)
		}
	}
	return true, nil
}

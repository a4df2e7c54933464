package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/meshlet/meshlet/ca"
	clientstate "github.com/meshlet/meshlet/client/state"
	"github.com/meshlet/meshlet/state"
)

// ErrConnectStateLost: an earlier agent completed a start on this data dir
// but the control plane's state under connect/ is gone. Starting anyway
// would make a new trust domain that no running sidecar trusts, with no
// intentions.
var ErrConnectStateLost = errors.New("connect state lost")

// serverMarker is the server state's marker (see state.Options.MarkerPath).
func serverMarker(dataDir string) string { return filepath.Join(dataDir, "server-state.marker") }

// startedBefore reports whether an agent got past the control plane's start
// on dataDir before: the client writes its node marker only after that.
func startedBefore(dataDir string) bool {
	_, err := os.Stat(clientstate.MarkerPath(filepath.Join(dataDir, "client", "state.db")))
	return err == nil
}

// checkConnectState refuses to start when an earlier agent started on
// dataDir but connect/ca or connect/intentions is gone as a whole. The
// stores catch a lost file inside their own dirs through their markers; an
// empty dir (no marker, no files: what the documented reset leaves, or a
// deliberate fresh start) is allowed. A first start that
// failed before the control plane was up is not taken for a lost one.
func checkConnectState(dataDir string, startedBefore bool) error {
	if !startedBefore {
		return nil
	}
	connectDir := filepath.Join(dataDir, "connect")
	if !dirExists(connectDir) {
		// Agents since the cluster keep the mesh state in etcd (guarded by
		// the server marker); only a pre-etcd layout has connect/.
		return nil
	}
	for _, d := range []string{filepath.Join(connectDir, "ca"), filepath.Join(connectDir, "intentions")} {
		lost, err := connectStateLost(d)
		if err != nil {
			return err
		}
		if lost {
			return fmt.Errorf("%w: %s is missing but an agent ran on this data dir before; restore it from a backup (a new trust domain would cut every running sidecar off, no intentions would fail open), or create it empty to start over deliberately",
				ErrConnectStateLost, d)
		}
	}
	return nil
}

// checkCAImported guards a server's data dir from before etcd that lost
// connect/ as a whole (checkConnectState passes a data dir without
// connect/: agents since etcd have none). The rule, checked after the
// mesh store is opened and before the import: refuse when
//   - an agent started on this data dir before (startedBefore),
//   - the data dir predates etcd: its server kept the bbolt state
//     (server/state.db, or state.db.migrated-to-etcd once imported),
//   - neither connect/ca nor connect/ca.migrated-to-etcd exists (the CA
//     was never imported from this data dir), and
//   - the cluster's CA storage is empty (no CA to join).
//
// Starting anyway would make a new trust domain that no running sidecar
// of this node trusts.
func checkCAImported(ctx context.Context, dataDir string, startedBefore bool, cluster ca.Storage) error {
	if !startedBefore {
		return nil
	}
	legacy := legacyStatePath(dataDir)
	if !fileExists(legacy) && !fileExists(legacy+state.MigratedSuffix) {
		return nil
	}
	caDir := filepath.Join(dataDir, "connect", "ca")
	if dirExists(caDir) || dirExists(caDir+migratedSuffix) {
		return nil
	}
	cur, err := cluster.Load(ctx)
	if err != nil {
		return fmt.Errorf("failed to read the cluster's CA: %w", err)
	}
	if cur != nil {
		return nil
	}
	return fmt.Errorf("%w: %s (nor %s) is missing but an agent from before etcd ran on this data dir (%s) and the cluster has no CA to join; restore it from a backup (a new trust domain would cut every running sidecar off), or create it empty to start over deliberately",
		ErrConnectStateLost, caDir, caDir+migratedSuffix, legacy)
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/meshlet/meshlet/internal/boltsafe"
	"github.com/meshlet/meshlet/state"
)

// memberDB is the embedded member's database file.
func memberDB(dataDir string) string { return filepath.Join(etcdDir(dataDir), "member", "snap", "db") }

// memberFiles reports damage of the member's database as state.ErrCorrupt
// (etcd itself would panic on a bad page, or start over on an empty file).
var memberFiles = boltsafe.Files{
	Corrupt: func(path string, cause error) error {
		return fmt.Errorf("%w: %s: %w; restore %s from a backup (meshlet operator snapshot restore)", state.ErrCorrupt,
			path, cause, filepath.Dir(filepath.Dir(filepath.Dir(path))))
	},
	Locked: func(path string) error {
		return fmt.Errorf("%w: %s is held by another process (another meshlet agent on this data dir?)", state.ErrLocked, path)
	},
}

// checkMember refuses to start the embedded member on state that was lost
// or damaged: a data dir whose server held a cluster (its marker exists)
// but whose member directory or database is now missing or empty, or a
// database with a bad page. A pre-etcd state file being moved in is not a
// loss.
func checkMember(dataDir string) error {
	db := memberDB(dataDir)
	_, markerErr := os.Stat(serverMarker(dataDir))
	_, legacyErr := os.Stat(legacyStatePath(dataDir))
	hadState := markerErr == nil && errors.Is(legacyErr, os.ErrNotExist)
	fi, err := os.Stat(db)
	switch {
	case err != nil && hadState:
		return fmt.Errorf("%w: %s is missing but this data dir held a cluster (%s); restore %s from a backup, or remove the marker to start an empty cluster (this stops every running allocation)",
			state.ErrStateLost, db, serverMarker(dataDir), etcdDir(dataDir))
	case err == nil && fi.Size() == 0 && hadState:
		return fmt.Errorf("%w: %s is empty but this data dir held a cluster (%s); restore %s from a backup",
			state.ErrStateLost, db, serverMarker(dataDir), etcdDir(dataDir))
	case err == nil:
		return memberFiles.Walk(db, 5*time.Second)
	}
	return nil
}

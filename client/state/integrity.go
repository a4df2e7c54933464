package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/meshlet/meshlet/internal/atomicfile"
	"github.com/meshlet/meshlet/internal/boltsafe"
)

// A client state file that held a node is never replaced by an empty one:
// when the node ID is first stored, it is also written to a small marker
// next to state.db (state.db.marker). At every later open a missing or
// empty state.db, or one whose node ID differs from the marker's, is
// refused with ErrStateLost: starting empty would register a second node,
// orphan the running tasks and tear their networks down as leaked. A
// damaged file is refused with ErrCorrupt (bbolt's panics on bad pages
// become that error), a file locked by another process with ErrLocked.

// Sentinel errors of Open.
var (
	// ErrStateLost: the data dir held client state that is now missing or
	// empty.
	ErrStateLost = errors.New("client state lost")
	// ErrCorrupt: the client state file is damaged.
	ErrCorrupt = errors.New("client state corrupt")
	// ErrLocked: another process holds the client state file.
	ErrLocked = errors.New("client state locked")
)

// formatVersion is the layout of the client's state.db this code reads
// and writes.
const formatVersion = 1

var keyFormat = []byte("format")

// marker is the content of state.db.marker.
type marker struct {
	Format    int    `json:"format"`
	NodeID    string `json:"node_id"`
	CreatedAt string `json:"created_at"`
}

// MarkerPath is the marker file of the state at path.
func MarkerPath(path string) string { return path + ".marker" }

// RecoveryHint ends every refusal: what the operator can do.
func RecoveryHint(path string) string {
	return fmt.Sprintf("restore %s from a backup; to start as a new node instead, stop this node's tasks and remove %s and the data dir's alloc/ (see docs/operations.md, \"If the data dir is lost\")",
		path, filepath.Dir(path))
}

// checkMarker reads the marker, if any, and refuses a state file that is
// missing or empty while the marker says it held a node. An empty state
// file is refused even without a marker: bbolt never leaves one.
func checkMarker(path string) (*marker, error) {
	var m *marker
	raw, err := os.ReadFile(MarkerPath(path))
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("failed to read %s: %w", MarkerPath(path), err)
	default:
		m = new(marker)
		if err := json.Unmarshal(raw, m); err != nil || m.NodeID == "" {
			return nil, fmt.Errorf("%w: %s is unreadable; %s", ErrCorrupt, MarkerPath(path), RecoveryHint(path))
		}
	}
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist) && m != nil:
		return nil, fmt.Errorf("%w: %s is missing but held node %s; %s", ErrStateLost, path, m.NodeID, RecoveryHint(path))
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("failed to stat %s: %w", path, err)
	case fi.Size() == 0:
		return nil, fmt.Errorf("%w: %s is empty; %s", ErrStateLost, path, RecoveryHint(path))
	}
	return m, nil
}

// writeMarker records the node ID next to the state file.
func writeMarker(path, nodeID string) error {
	buf, _ := json.Marshal(&marker{Format: formatVersion, NodeID: nodeID, CreatedAt: time.Now().UTC().Format(time.RFC3339)})
	if err := atomicfile.WriteFile(MarkerPath(path), append(buf, '\n'), 0o600); err != nil {
		return fmt.Errorf("failed to write client state marker: %w", err)
	}
	return nil
}

// boltFiles opens the state file: damage is ErrCorrupt (with how to
// recover), another process holding it ErrLocked.
var boltFiles = boltsafe.Files{
	Corrupt: corrupt,
	Locked: func(path string) error {
		return fmt.Errorf("%w: %s is held by another process (another meshlet agent on this data dir?)", ErrLocked, path)
	},
}

// openDB checks an existing file page by page and opens it (see boltsafe).
func openDB(path string, timeout time.Duration) (*bolt.DB, error) {
	return boltFiles.Open(path, timeout)
}

func corrupt(path string, err error) error {
	return fmt.Errorf("%w: %s: %w; %s", ErrCorrupt, path, err, RecoveryHint(path))
}

// initialise creates the buckets and checks the format and the node ID
// against the marker.
func (d *DB) initialise(mark *marker) error {
	return d.update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketAllocs, bucketMeta} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return fmt.Errorf("failed to initialise client state: %w", err)
			}
		}
		meta := tx.Bucket(bucketMeta)
		if v := meta.Get(keyFormat); v != nil && string(v) != fmt.Sprint(formatVersion) {
			return fmt.Errorf("%w: %s has format %s, not this meshlet's %d", ErrCorrupt, d.path, v, formatVersion)
		}
		id := string(meta.Get(keyNodeID))
		switch {
		case mark != nil && id == "":
			return fmt.Errorf("%w: %s holds no node but %s says it held node %s; %s", ErrStateLost, d.path,
				MarkerPath(d.path), mark.NodeID, RecoveryHint(d.path))
		case mark != nil && id != mark.NodeID:
			return fmt.Errorf("%w: %s holds node %s but %s says node %s; %s", ErrStateLost, d.path, id,
				MarkerPath(d.path), mark.NodeID, RecoveryHint(d.path))
		}
		return meta.Put(keyFormat, []byte(fmt.Sprint(formatVersion)))
	})
}

// view and update run a transaction, turning bbolt panics into ErrCorrupt.
func (d *DB) view(fn func(tx *bolt.Tx) error) (err error) {
	defer boltFiles.Recover(d.path, &err)
	return d.db.View(fn)
}

func (d *DB) update(fn func(tx *bolt.Tx) error) (err error) {
	defer boltFiles.Recover(d.path, &err)
	return d.db.Update(fn)
}

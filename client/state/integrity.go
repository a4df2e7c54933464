package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/meshlet/meshlet/internal/atomicfile"
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

// openDB checks an existing file with bbolt's own page check (read-only: a
// panic while a writable open loads a corrupt freelist would leave the
// file mapped and locked), then opens it.
func openDB(path string, timeout time.Duration) (*bolt.DB, error) {
	if fi, err := os.Stat(path); err == nil && fi.Size() > 0 {
		if err := checkFile(path, timeout); err != nil {
			return nil, err
		}
	}
	return openBolt(path, &bolt.Options{Timeout: timeout})
}

func checkFile(path string, timeout time.Duration) (err error) {
	db, err := openBolt(path, &bolt.Options{Timeout: timeout, ReadOnly: true})
	if err != nil {
		return err
	}
	defer func() {
		if cerr := db.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("failed to close %s after checking it: %w", path, cerr)
		}
	}()
	defer recoverCorrupt(path, &err)
	return db.View(func(tx *bolt.Tx) error {
		for err := range tx.Check() {
			if err != nil {
				return corrupt(path, errors.New(strings.ReplaceAll(err.Error(), "\n", " ")))
			}
		}
		return nil
	})
}

func openBolt(path string, opts *bolt.Options) (db *bolt.DB, err error) {
	defer recoverCorrupt(path, &err)
	db, err = bolt.Open(path, 0o600, opts)
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return nil, fmt.Errorf("%w: %s is held by another process (another meshlet agent on this data dir?)", ErrLocked, path)
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrChecksum), errors.Is(err, berrors.ErrVersionMismatch):
		return nil, corrupt(path, err)
	case err != nil:
		return nil, fmt.Errorf("failed to open client state %s: %w", path, err)
	}
	return db, nil
}

func corrupt(path string, err error) error {
	return fmt.Errorf("%w: %s: %w; %s", ErrCorrupt, path, err, RecoveryHint(path))
}

// recoverCorrupt turns a bbolt panic (a corrupt page) into an error.
func recoverCorrupt(path string, err *error) {
	if r := recover(); r != nil {
		*err = corrupt(path, errors.New(strings.ReplaceAll(fmt.Sprint(r), "\n", " ")))
	}
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
	defer recoverCorrupt(d.path, &err)
	return d.db.View(fn)
}

func (d *DB) update(fn func(tx *bolt.Tx) error) (err error) {
	defer recoverCorrupt(d.path, &err)
	return d.db.Update(fn)
}

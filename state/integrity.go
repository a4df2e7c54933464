package state

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/google/uuid"
	bolt "go.etcd.io/bbolt"

	"github.com/meshlet/meshlet/internal/boltsafe"

	"github.com/meshlet/meshlet/internal/atomicfile"
)

// A state file that held a cluster's state is never replaced by an empty
// one: the first open records a cluster ID both inside state.db (meta
// bucket) and in a small marker file next to it (state.db.marker). At every
// later open a missing or empty state.db, or one whose cluster ID differs
// from the marker's, is refused with ErrStateLost, because starting empty
// would stop every running workload. A corrupt file is refused with
// ErrCorrupt (bbolt's panics on bad pages become that error), a file locked
// by another process with ErrLocked.

// Sentinel errors of OpenBolt.
var (
	// ErrStateLost: the data dir held state that is now missing or empty.
	ErrStateLost = errors.New("server state lost")
	// ErrCorrupt: the state file is damaged.
	ErrCorrupt = errors.New("server state corrupt")
	// ErrLocked: another process holds the state file.
	ErrLocked = errors.New("server state locked")
)

// formatVersion is the layout of state.db this code reads and writes.
const formatVersion = 1

var (
	keyClusterID = []byte("cluster_id")
	keyFormat    = []byte("format")
)

// marker is the content of state.db.marker.
type marker struct {
	Format    int    `json:"format"`
	ClusterID string `json:"cluster_id"`
	CreatedAt string `json:"created_at"`
}

// files names the state file and its marker.
type files struct{ db, marker string }

func markerPath(path string) string { return path + ".marker" }

// recoveryHint ends every refusal: what the operator can do.
func recoveryHint(f files) string {
	return fmt.Sprintf("restore %s from a backup, or remove %s to start an empty cluster (this stops every running allocation)",
		f.db, f.marker)
}

// checkMarker reads the marker, if any, and refuses a state file that is
// missing or empty while the marker says it held state.
func checkMarker(f files) (*marker, error) {
	m, err := readMarker(f)
	if m == nil || err != nil {
		return nil, err
	}
	fi, err := os.Stat(f.db)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("%w: %s is missing but held cluster %s; %s", ErrStateLost, f.db, m.ClusterID, recoveryHint(f))
	case err != nil:
		return nil, fmt.Errorf("failed to stat %s: %w", f.db, err)
	case fi.Size() == 0:
		return nil, fmt.Errorf("%w: %s is empty but held cluster %s; %s", ErrStateLost, f.db, m.ClusterID, recoveryHint(f))
	}
	return m, nil
}

// readMarker returns the marker, or nil if there is none.
func readMarker(f files) (*marker, error) {
	raw, err := os.ReadFile(f.marker)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("failed to read %s: %w", f.marker, err)
	}
	m := new(marker)
	if err := json.Unmarshal(raw, m); err != nil || m.ClusterID == "" {
		return nil, fmt.Errorf("%w: %s is unreadable; %s", ErrCorrupt, f.marker, recoveryHint(f))
	}
	return m, nil
}

// writeMarker records clusterID in the marker file.
func writeMarker(path, clusterID string) error {
	buf, _ := json.Marshal(&marker{Format: formatVersion, ClusterID: clusterID, CreatedAt: time.Now().UTC().Format(time.RFC3339)})
	if err := atomicfile.WriteFile(path, append(buf, '\n'), 0o600); err != nil {
		return fmt.Errorf("failed to write state marker: %w", err)
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
	return fmt.Errorf("%w: %s: %w; restore it from a backup, or move it and its marker away to start an empty cluster (this stops every running allocation)",
		ErrCorrupt, path, err)
}

// update runs fn in a write transaction, recovering bbolt panics.
func (s *BoltStore) update(fn func(tx *bolt.Tx) error) (err error) {
	defer boltFiles.Recover(s.db.Path(), &err)
	return closedErr(s.db.Update(fn))
}

// initialise creates the buckets, records or compares the
// cluster ID and writes the marker. It returns the stored index.
func (s *BoltStore) initialise(f files, mark *marker) (uint64, error) {
	var idx uint64
	var clusterID string
	err := s.update(func(tx *bolt.Tx) error {
		rebuild := tx.Bucket(bucketAllocByNode) == nil
		for _, b := range [][]byte{bucketJobs, bucketVersions, bucketAllocs, bucketAllocByNode, bucketNodes, bucketEvals, bucketMeta} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		var err error
		if clusterID, err = checkClusterID(tx, f, mark); err != nil {
			return err
		}
		idx = readIndex(tx)
		if rebuild {
			return rebuildNodeIndex(tx)
		}
		return nil
	})
	switch {
	case errors.Is(err, ErrStateLost), errors.Is(err, ErrCorrupt):
		return 0, err
	case err != nil:
		return 0, fmt.Errorf("failed to initialise state store %s: %w", f.db, err)
	}
	if mark == nil {
		if err := writeMarker(f.marker, clusterID); err != nil {
			return 0, err
		}
	}
	return idx, nil
}

// checkClusterID compares the stored cluster ID with the marker's, or
// records a new one for a fresh (or pre-marker) store.
func checkClusterID(tx *bolt.Tx, f files, mark *marker) (string, error) {
	meta := tx.Bucket(bucketMeta)
	if v := meta.Get(keyFormat); len(v) == 8 && binary.BigEndian.Uint64(v) > formatVersion {
		return "", fmt.Errorf("%w: %s has format %d, newer than this meshlet's %d", ErrCorrupt, f.db,
			binary.BigEndian.Uint64(v), formatVersion)
	}
	id := string(meta.Get(keyClusterID))
	if err := compareClusterID(f, mark, id); err != nil || id != "" {
		return id, err
	}
	id = uuid.NewString()
	var buf [8]byte
	binary.BigEndian.PutUint64(buf[:], formatVersion)
	if err := meta.Put(keyFormat, buf[:]); err != nil {
		return "", err
	}
	return id, meta.Put(keyClusterID, []byte(id))
}

// compareClusterID refuses a stored cluster ID (empty: none) that is not
// the one the marker (nil: none) recorded.
func compareClusterID(f files, mark *marker, id string) error {
	switch {
	case mark != nil && id == "":
		return fmt.Errorf("%w: %s holds no cluster but %s says it held cluster %s; %s", ErrStateLost, f.db,
			f.marker, mark.ClusterID, recoveryHint(f))
	case mark != nil && id != mark.ClusterID:
		return fmt.Errorf("%w: %s holds cluster %s but %s says cluster %s; %s", ErrStateLost, f.db, id,
			f.marker, mark.ClusterID, recoveryHint(f))
	}
	return nil
}

// ClusterID implements Store.
func (s *BoltStore) ClusterID() string {
	var id string
	_ = s.view(func(tx *bolt.Tx) error {
		id = string(tx.Bucket(bucketMeta).Get(keyClusterID))
		return nil
	})
	return id
}

package state

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/google/uuid"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

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

// openDB checks the bbolt file (read-only: a panic while a writable open
// loads a corrupt freelist would leave the file mapped and locked) and
// opens it, turning a lock timeout and a damaged file (error or panic) into
// one-line errors.
func openDB(path string, timeout time.Duration) (*bolt.DB, error) {
	if fi, err := os.Stat(path); err == nil && fi.Size() > 0 {
		if err := checkFile(path, timeout); err != nil {
			return nil, err
		}
	}
	return openBolt(path, &bolt.Options{Timeout: timeout})
}

// checkFile walks every page once with bbolt's own check, so that a damaged
// file is refused at start, not at the first read of a bad page.
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
		return nil, fmt.Errorf("failed to open state store %s: %w", path, err)
	}
	return db, nil
}

func corrupt(path string, err error) error {
	return fmt.Errorf("%w: %s: %w; restore it from a backup, or move it and its marker away to start an empty cluster (this stops every running allocation)",
		ErrCorrupt, path, err)
}

// recoverCorrupt turns a bbolt panic (a corrupt page) into an error.
func recoverCorrupt(path string, err *error) {
	if r := recover(); r != nil {
		msg := strings.ReplaceAll(fmt.Sprint(r), "\n", " ")
		*err = corrupt(path, errors.New(msg))
	}
}

// update runs fn in a write transaction, recovering bbolt panics.
func (s *BoltStore) update(fn func(tx *bolt.Tx) error) (err error) {
	defer recoverCorrupt(s.db.Path(), &err)
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
		buf, _ := json.Marshal(&marker{Format: formatVersion, ClusterID: clusterID, CreatedAt: time.Now().UTC().Format(time.RFC3339)})
		if err := atomicfile.WriteFile(f.marker, append(buf, '\n'), 0o600); err != nil {
			return 0, fmt.Errorf("failed to write state marker: %w", err)
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
	switch {
	case mark != nil && id == "":
		return "", fmt.Errorf("%w: %s holds no cluster but %s says it held cluster %s; %s", ErrStateLost, f.db,
			f.marker, mark.ClusterID, recoveryHint(f))
	case mark != nil && id != mark.ClusterID:
		return "", fmt.Errorf("%w: %s holds cluster %s but %s says cluster %s; %s", ErrStateLost, f.db, id,
			f.marker, mark.ClusterID, recoveryHint(f))
	case id != "":
		return id, nil
	}
	id = uuid.NewString()
	var buf [8]byte
	binary.BigEndian.PutUint64(buf[:], formatVersion)
	if err := meta.Put(keyFormat, buf[:]); err != nil {
		return "", err
	}
	return id, meta.Put(keyClusterID, []byte(id))
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

// Package state owns the client role's local, persistent state in
// <data_dir>/client/state.db (bbolt), kept apart from the server's state as
// Nomad does: the node ID, every allocation the client runs, each task's
// driver handle (for recovery after an agent restart) and last TaskState,
// each allocation's network status, and whether its postrun hooks
// completed.
//
// All methods are safe for concurrent use; each is one bbolt transaction.
package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/structs"
)

// ErrNotFound is returned for an unknown allocation.
var ErrNotFound = errors.New("not found")

// LocalTaskState is what the client persists for a task.
type LocalTaskState struct {
	// Handle is the driver's recovery record while the task runs; nil
	// otherwise.
	Handle *driver.TaskHandle `json:"Handle,omitempty"`
	State  *structs.TaskState `json:"State,omitempty"`
	// PrestartDone names the task runner's prestart hooks whose work is
	// done for the allocation (e.g. artifacts fetched): a restart or an
	// agent restore does not run them again.
	PrestartDone []string `json:"PrestartDone,omitempty"`
}

// Store is the client state the runners need; DB implements it.
type Store interface {
	PutAlloc(a *structs.Allocation) error
	PutTaskState(allocID, task string, s *LocalTaskState) error
	TaskStates(allocID string) (map[string]*LocalTaskState, error)
	PutNetworkStatus(allocID string, s *structs.AllocNetworkStatus) error
	NetworkStatus(allocID string) (*structs.AllocNetworkStatus, error)
	PutPostrunDone(allocID string) error
	PostrunDone(allocID string) (bool, error)
}

var (
	bucketAllocs = []byte("allocs")
	bucketMeta   = []byte("meta")
	keyNodeID    = []byte("node_id")
	keySecret    = []byte("node_secret")
	keyAlloc     = []byte("alloc")
	keyNetwork   = []byte("network")
	keyPostrun   = []byte("postrun_done")
	taskPrefix   = "task/"
)

// DB is the bbolt-backed client state.
type DB struct {
	db   *bolt.DB
	path string
	// marked: the marker file exists (written with the node ID).
	marked atomic.Bool
}

var _ Store = (*DB)(nil)

// Open opens (creating if needed) the client state at path. State that was
// lost or damaged is refused (see integrity.go): ErrStateLost, ErrCorrupt,
// ErrLocked, each a one-line error naming the file and how to recover.
func Open(path string) (*DB, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("failed to create client state dir: %w", err)
	}
	mark, err := checkMarker(path)
	if err != nil {
		return nil, err
	}
	db, err := openDB(path, 5*time.Second)
	if err != nil {
		return nil, err
	}
	d := &DB{db: db, path: path}
	d.marked.Store(mark != nil)
	if err := d.initialise(mark); err != nil {
		_ = db.Close()
		return nil, err
	}
	return d, nil
}

// Close closes the database.
func (d *DB) Close() error { return d.db.Close() }

// NodeID returns the persisted node ID, "" if none yet. State written by
// a meshlet that kept no marker gets its marker here.
func (d *DB) NodeID() (string, error) {
	var id string
	err := d.view(func(tx *bolt.Tx) error {
		id = string(tx.Bucket(bucketMeta).Get(keyNodeID))
		return nil
	})
	if err == nil && id != "" && !d.marked.Load() {
		if err = writeMarker(d.path, id); err == nil {
			d.marked.Store(true)
		}
	}
	return id, err
}

// PutNodeID persists the node ID, then the marker that makes a later loss
// of this file detectable.
func (d *DB) PutNodeID(id string) error {
	if err := d.update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keyNodeID, []byte(id)) }); err != nil {
		return err
	}
	if err := writeMarker(d.path, id); err != nil {
		return err
	}
	d.marked.Store(true)
	return nil
}

// NodeSecret returns the node's secret ("" before PutNodeSecret).
func (d *DB) NodeSecret() (string, error) {
	var secret string
	err := d.view(func(tx *bolt.Tx) error {
		secret = string(tx.Bucket(bucketMeta).Get(keySecret))
		return nil
	})
	return secret, err
}

// PutNodeSecret persists the secret the node authenticates with.
func (d *DB) PutNodeSecret(secret string) error {
	return d.update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keySecret, []byte(secret)) })
}

func putJSON(b *bolt.Bucket, key []byte, v any) error {
	buf, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("failed to encode %s: %w", key, err)
	}
	return b.Put(key, buf)
}

// allocBucket returns the allocation's bucket, creating it when create.
func allocBucket(tx *bolt.Tx, id string, create bool) (*bolt.Bucket, error) {
	root := tx.Bucket(bucketAllocs)
	if create {
		return root.CreateBucketIfNotExists([]byte(id))
	}
	if b := root.Bucket([]byte(id)); b != nil {
		return b, nil
	}
	return nil, fmt.Errorf("allocation %s: %w", id, ErrNotFound)
}

// PutAlloc stores (or replaces) an allocation.
func (d *DB) PutAlloc(a *structs.Allocation) error {
	return d.update(func(tx *bolt.Tx) error {
		b, err := allocBucket(tx, a.ID, true)
		if err != nil {
			return err
		}
		return putJSON(b, keyAlloc, a)
	})
}

// Allocs returns every stored allocation.
func (d *DB) Allocs() ([]*structs.Allocation, error) {
	allocs, _, err := d.AllocsAndOrphans()
	return allocs, err
}

// AllocsAndOrphans is Allocs plus the IDs of allocation entries that hold
// task states but no allocation record (its write failed, e.g. on a full
// disk, after tasks had started): their tasks may run, so they must count
// as allocations that could not be restored, never as absent.
func (d *DB) AllocsAndOrphans() ([]*structs.Allocation, []string, error) {
	var out []*structs.Allocation
	var orphans []string
	err := d.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketAllocs).ForEachBucket(func(k []byte) error {
			raw := tx.Bucket(bucketAllocs).Bucket(k).Get(keyAlloc)
			if raw == nil {
				orphans = append(orphans, string(k))
				return nil
			}
			a := new(structs.Allocation)
			if err := json.Unmarshal(raw, a); err != nil {
				return fmt.Errorf("failed to decode allocation %s: %w", k, err)
			}
			out = append(out, a)
			return nil
		})
	})
	return out, orphans, err
}

// DeleteAlloc removes an allocation and everything stored under it.
func (d *DB) DeleteAlloc(id string) error {
	return d.update(func(tx *bolt.Tx) error {
		err := tx.Bucket(bucketAllocs).DeleteBucket([]byte(id))
		if errors.Is(err, berrors.ErrBucketNotFound) {
			return nil
		}
		return err
	})
}

// PutTaskState stores a task's local state.
func (d *DB) PutTaskState(allocID, task string, s *LocalTaskState) error {
	return d.update(func(tx *bolt.Tx) error {
		b, err := allocBucket(tx, allocID, true)
		if err != nil {
			return err
		}
		return putJSON(b, []byte(taskPrefix+task), s)
	})
}

// TaskStates returns the stored state of every task of an allocation.
func (d *DB) TaskStates(allocID string) (map[string]*LocalTaskState, error) {
	out := map[string]*LocalTaskState{}
	err := d.view(func(tx *bolt.Tx) error {
		b, err := allocBucket(tx, allocID, false)
		if err != nil {
			return nil // nothing stored yet
		}
		return b.ForEach(func(k, v []byte) error {
			if len(k) <= len(taskPrefix) || string(k[:len(taskPrefix)]) != taskPrefix || v == nil {
				return nil
			}
			s := new(LocalTaskState)
			if err := json.Unmarshal(v, s); err != nil {
				return fmt.Errorf("failed to decode task state %s: %w", k, err)
			}
			out[string(k[len(taskPrefix):])] = s
			return nil
		})
	})
	return out, err
}

// PutNetworkStatus stores an allocation's network status (nil clears it).
func (d *DB) PutNetworkStatus(allocID string, s *structs.AllocNetworkStatus) error {
	return d.update(func(tx *bolt.Tx) error {
		b, err := allocBucket(tx, allocID, true)
		if err != nil {
			return err
		}
		if s == nil {
			return b.Delete(keyNetwork)
		}
		return putJSON(b, keyNetwork, s)
	})
}

// NetworkStatus returns an allocation's stored network status, nil if none.
func (d *DB) NetworkStatus(allocID string) (*structs.AllocNetworkStatus, error) {
	var out *structs.AllocNetworkStatus
	err := d.view(func(tx *bolt.Tx) error {
		b, err := allocBucket(tx, allocID, false)
		if err != nil {
			return nil
		}
		raw := b.Get(keyNetwork)
		if raw == nil {
			return nil
		}
		out = new(structs.AllocNetworkStatus)
		return json.Unmarshal(raw, out)
	})
	return out, err
}

// PutPostrunDone records that the allocation's postrun hooks completed
// (its services deregistered, its socket and network gone), so a restored
// terminal allocation does not run them again. An allocation with nothing
// stored (already forgotten) is left so: the record alone would make an
// entry without an allocation, which AllocsAndOrphans reports.
func (d *DB) PutPostrunDone(allocID string) error {
	return d.update(func(tx *bolt.Tx) error {
		b, err := allocBucket(tx, allocID, false)
		if errors.Is(err, ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return b.Put(keyPostrun, []byte{1})
	})
}

// PostrunDone reports whether PutPostrunDone was recorded for the
// allocation. State written before this record existed has none: false,
// and its terminal allocations run their (idempotent) postrun hooks once
// more after a restore.
func (d *DB) PostrunDone(allocID string) (bool, error) {
	var done bool
	err := d.view(func(tx *bolt.Tx) error {
		b, err := allocBucket(tx, allocID, false)
		if err != nil {
			return nil
		}
		done = b.Get(keyPostrun) != nil
		return nil
	})
	return done, err
}

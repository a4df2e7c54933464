package state

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/meshlet/meshlet/structs"
)

var (
	bucketJobs        = []byte("jobs")
	bucketVersions    = []byte("job_versions")
	bucketAllocs      = []byte("allocs")
	bucketAllocByNode = []byte("alloc_by_node")
	bucketNodes       = []byte("nodes")
	bucketEvals       = []byte("evals")
	bucketMeta        = []byte("meta")
	keyIndex          = []byte("index")
)

// DefaultJobVersions is how many versions of a job are kept, as Nomad's
// JobTrackedVersions.
const DefaultJobVersions = 6

// Options tune a BoltStore; zero fields take their defaults.
type Options struct {
	// JobVersions is how many versions of each job are kept (the latest
	// ones); default DefaultJobVersions.
	JobVersions int
	// OpenTimeout bounds the wait for the file lock another process holds;
	// default 5 s.
	OpenTimeout time.Duration
	// MarkerPath is where the cluster marker lives (see integrity.go);
	// default "<path>.marker". Outside the state file's dir it also
	// catches that whole dir being removed.
	MarkerPath string
}

// BoltStore is the bbolt implementation of Store. Jobs are keyed by ID
// (meshlet runs one namespace, "default"); versions by "<id>\x00<version>";
// the node index by "<node>\x00<alloc>", written in the same transactions
// as the allocations.
type BoltStore struct {
	db       *bolt.DB
	watch    *indexWatch
	versions int
}

var _ Store = (*BoltStore)(nil)

// OpenBolt opens (creating if needed) the store at path with default
// Options.
func OpenBolt(path string) (*BoltStore, error) { return OpenBoltOptions(path, Options{}) }

// OpenBoltOptions opens (creating if needed) the store at path. A store that
// held state before but is now missing or empty (see marker.go), a corrupt
// file or one locked by another process is an error, never a fresh store.
func OpenBoltOptions(path string, opts Options) (*BoltStore, error) {
	if opts.JobVersions <= 0 {
		opts.JobVersions = DefaultJobVersions
	}
	if opts.OpenTimeout <= 0 {
		opts.OpenTimeout = 5 * time.Second
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("failed to create state dir: %w", err)
	}
	f := files{db: path, marker: opts.MarkerPath}
	if f.marker == "" {
		f.marker = markerPath(path)
	}
	mark, err := checkMarker(f)
	if err != nil {
		return nil, err
	}
	db, err := openDB(path, opts.OpenTimeout)
	if err != nil {
		return nil, err
	}
	s := &BoltStore{db: db, versions: opts.JobVersions}
	idx, err := s.initialise(f, mark)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	s.watch = newIndexWatch(idx)
	return s, nil
}

// Close closes the database.
func (s *BoltStore) Close() error { return s.db.Close() }

// Index implements Store.
func (s *BoltStore) Index() uint64 { return s.watch.get() }

// WaitIndex implements Store.
func (s *BoltStore) WaitIndex(ctx context.Context, minIndex uint64) uint64 {
	return s.watch.wait(ctx, minIndex)
}

// view runs fn in a read transaction; a bbolt panic on a corrupt page
// becomes an error wrapping ErrCorrupt.
func (s *BoltStore) view(fn func(tx *bolt.Tx) error) (err error) {
	defer boltFiles.Recover(s.db.Path(), &err)
	return closedErr(s.db.View(fn))
}

// closedErr marks bbolt's "database not open" as ErrClosed.
func closedErr(err error) error {
	if errors.Is(err, berrors.ErrDatabaseNotOpen) {
		return fmt.Errorf("%w: %w", ErrClosed, err)
	}
	return err
}

func readIndex(tx *bolt.Tx) uint64 {
	v := tx.Bucket(bucketMeta).Get(keyIndex)
	if len(v) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(v)
}

// write runs fn in a write transaction with the next index and publishes the
// index once the transaction committed.
func (s *BoltStore) write(fn func(tx *bolt.Tx, index uint64) error) (uint64, error) {
	var index uint64
	err := s.update(func(tx *bolt.Tx) error {
		index = readIndex(tx) + 1
		if err := fn(tx, index); err != nil {
			return err
		}
		var buf [8]byte
		binary.BigEndian.PutUint64(buf[:], index)
		return tx.Bucket(bucketMeta).Put(keyIndex, buf[:])
	})
	if err != nil {
		return 0, err
	}
	s.watch.set(index)
	return index, nil
}

func put(tx *bolt.Tx, bucket []byte, key string, v any) error {
	buf, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("failed to encode %s/%s: %w", bucket, key, err)
	}
	return tx.Bucket(bucket).Put([]byte(key), buf)
}

func get[T any](tx *bolt.Tx, bucket []byte, key string) (*T, error) {
	raw := tx.Bucket(bucket).Get([]byte(key))
	if raw == nil {
		return nil, ErrNotFound
	}
	out := new(T)
	if err := json.Unmarshal(raw, out); err != nil {
		return nil, fmt.Errorf("failed to decode %s/%s: %w", bucket, key, err)
	}
	return out, nil
}

// list decodes every value of bucket whose key has prefix, keeping those
// for which keep returns true (nil keeps all).
func list[T any](s *BoltStore, bucket []byte, prefix string, keep func(*T) bool) ([]*T, error) {
	var out []*T
	err := s.view(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucket).Cursor()
		p := []byte(prefix)
		for k, v := c.Seek(p); k != nil && hasPrefix(k, p); k, v = c.Next() {
			item := new(T)
			if err := json.Unmarshal(v, item); err != nil {
				return fmt.Errorf("failed to decode %s/%s: %w", bucket, k, err)
			}
			if keep == nil || keep(item) {
				out = append(out, item)
			}
		}
		return nil
	})
	return out, err
}

func hasPrefix(k, p []byte) bool {
	return len(k) >= len(p) && string(k[:len(p)]) == string(p)
}

func versionKey(id string, version uint64) string {
	return fmt.Sprintf("%s\x00%020d", id, version)
}

// UpsertJob implements Store.
func (s *BoltStore) UpsertJob(job *structs.Job) (uint64, error) {
	return s.write(func(tx *bolt.Tx, index uint64) error {
		_, err := s.putJob(tx, index, job)
		return err
	})
}

// putJob stores a copy of job as its latest version and drops the versions
// beyond the newest s.versions.
func (s *BoltStore) putJob(tx *bolt.Tx, index uint64, job *structs.Job) (*structs.Job, error) {
	cp := *job
	if old, err := get[structs.Job](tx, bucketJobs, job.ID); err == nil {
		cp.CreateIndex = old.CreateIndex
	} else {
		cp.CreateIndex = index
	}
	cp.ModifyIndex = index
	cp.JobModifyIndex = index
	if err := put(tx, bucketJobs, cp.ID, &cp); err != nil {
		return nil, err
	}
	if err := put(tx, bucketVersions, versionKey(cp.ID, cp.Version), &cp); err != nil {
		return nil, err
	}
	return &cp, trimVersions(tx.Bucket(bucketVersions), cp.ID, s.versions)
}

// trimVersions deletes all but the keep newest versions of job id (keys sort
// by version).
func trimVersions(b *bolt.Bucket, id string, keep int) error {
	var keys [][]byte
	c := b.Cursor()
	p := []byte(id + "\x00")
	for k, _ := c.Seek(p); k != nil && hasPrefix(k, p); k, _ = c.Next() {
		keys = append(keys, append([]byte(nil), k...))
	}
	for len(keys) > keep {
		if err := b.Delete(keys[0]); err != nil {
			return err
		}
		keys = keys[1:]
	}
	return nil
}

// UpdateJobStatus implements Store.
func (s *BoltStore) UpdateJobStatus(id, status string) (uint64, error) {
	return s.write(func(tx *bolt.Tx, index uint64) error {
		job, err := get[structs.Job](tx, bucketJobs, id)
		if err != nil {
			return err
		}
		job.Status = status
		job.ModifyIndex = index
		return put(tx, bucketJobs, id, job)
	})
}

// Job implements Store.
func (s *BoltStore) Job(id string) (*structs.Job, error) {
	var out *structs.Job
	err := s.view(func(tx *bolt.Tx) error {
		var err error
		out, err = get[structs.Job](tx, bucketJobs, id)
		return err
	})
	return out, err
}

// Jobs implements Store.
func (s *BoltStore) Jobs() ([]*structs.Job, error) {
	return list[structs.Job](s, bucketJobs, "", nil)
}

// JobVersions implements Store.
func (s *BoltStore) JobVersions(id string) ([]*structs.Job, error) {
	out, err := list[structs.Job](s, bucketVersions, id+"\x00", nil)
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, ErrNotFound
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version > out[j].Version })
	return out, nil
}

// DeleteJob implements Store.
func (s *BoltStore) DeleteJob(id string) (uint64, error) {
	return s.write(func(tx *bolt.Tx, _ uint64) error {
		if tx.Bucket(bucketJobs).Get([]byte(id)) == nil {
			return ErrNotFound
		}
		return deleteJob(tx, id, nil)
	})
}

// deleteJob removes the job, its versions and its evaluations except
// those in keep (the purging plan's own).
func deleteJob(tx *bolt.Tx, id string, keep map[string]bool) error {
	if err := tx.Bucket(bucketJobs).Delete([]byte(id)); err != nil {
		return err
	}
	if err := deletePrefix(tx.Bucket(bucketVersions), id+"\x00"); err != nil {
		return err
	}
	return deleteMatching(tx.Bucket(bucketEvals), func(v []byte) bool {
		var e Evaluation
		return json.Unmarshal(v, &e) == nil && e.JobID == id && !keep[e.ID]
	})
}

func deletePrefix(b *bolt.Bucket, prefix string) error {
	var keys [][]byte
	c := b.Cursor()
	for k, _ := c.Seek([]byte(prefix)); k != nil && hasPrefix(k, []byte(prefix)); k, _ = c.Next() {
		keys = append(keys, append([]byte(nil), k...))
	}
	for _, k := range keys {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

func deleteMatching(b *bolt.Bucket, match func(v []byte) bool) error {
	var keys [][]byte
	if err := b.ForEach(func(k, v []byte) error {
		if match(v) {
			keys = append(keys, append([]byte(nil), k...))
		}
		return nil
	}); err != nil {
		return err
	}
	for _, k := range keys {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

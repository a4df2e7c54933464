package state

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/meshlet/meshlet/structs"
)

var (
	bucketJobs     = []byte("jobs")
	bucketVersions = []byte("job_versions")
	bucketAllocs   = []byte("allocs")
	bucketNodes    = []byte("nodes")
	bucketEvals    = []byte("evals")
	bucketMeta     = []byte("meta")
	keyIndex       = []byte("index")
)

// BoltStore is the bbolt implementation of Store. Jobs are keyed by ID
// (meshlet runs one namespace, "default"); versions by "<id>\x00<version>".
type BoltStore struct {
	db    *bolt.DB
	watch *indexWatch
}

var _ Store = (*BoltStore)(nil)

// OpenBolt opens (creating if needed) the store at path.
func OpenBolt(path string) (*BoltStore, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("failed to create state dir: %w", err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("failed to open state store %s: %w", path, err)
	}
	var idx uint64
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketJobs, bucketVersions, bucketAllocs, bucketNodes, bucketEvals, bucketMeta} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		idx = readIndex(tx)
		return nil
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("failed to initialise state store: %w", err)
	}
	return &BoltStore{db: db, watch: newIndexWatch(idx)}, nil
}

// Close closes the database.
func (s *BoltStore) Close() error { return s.db.Close() }

// Index implements Store.
func (s *BoltStore) Index() uint64 { return s.watch.get() }

// WaitIndex implements Store.
func (s *BoltStore) WaitIndex(ctx context.Context, minIndex uint64) uint64 {
	return s.watch.wait(ctx, minIndex)
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
	err := s.db.Update(func(tx *bolt.Tx) error {
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
func list[T any](db *bolt.DB, bucket []byte, prefix string, keep func(*T) bool) ([]*T, error) {
	var out []*T
	err := db.View(func(tx *bolt.Tx) error {
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
		cp := *job
		if old, err := get[structs.Job](tx, bucketJobs, job.ID); err == nil {
			cp.CreateIndex = old.CreateIndex
		} else {
			cp.CreateIndex = index
		}
		cp.ModifyIndex = index
		cp.JobModifyIndex = index
		if err := put(tx, bucketJobs, cp.ID, &cp); err != nil {
			return err
		}
		return put(tx, bucketVersions, versionKey(cp.ID, cp.Version), &cp)
	})
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
	err := s.db.View(func(tx *bolt.Tx) error {
		var err error
		out, err = get[structs.Job](tx, bucketJobs, id)
		return err
	})
	return out, err
}

// Jobs implements Store.
func (s *BoltStore) Jobs() ([]*structs.Job, error) {
	return list[structs.Job](s.db, bucketJobs, "", nil)
}

// JobVersions implements Store.
func (s *BoltStore) JobVersions(id string) ([]*structs.Job, error) {
	out, err := list[structs.Job](s.db, bucketVersions, id+"\x00", nil)
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
		if err := tx.Bucket(bucketJobs).Delete([]byte(id)); err != nil {
			return err
		}
		if err := deletePrefix(tx.Bucket(bucketVersions), id+"\x00"); err != nil {
			return err
		}
		return deleteMatching(tx.Bucket(bucketEvals), func(v []byte) bool {
			var e Evaluation
			return json.Unmarshal(v, &e) == nil && e.JobID == id
		})
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

package state

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"

	"github.com/meshlet/meshlet/structs"
)

// etcdAlloc is an allocation as EtcdStore keeps it: without its Job, which
// lives once per content under alloc_jobs/<JobRef>.
type etcdAlloc struct {
	structs.Allocation
	// JobRef is "<job>/<%020d version>/<hash>" ("": no job).
	JobRef string `json:"MeshletJobRef,omitempty"`
}

func (s *EtcdStore) allocKey(id string) string { return s.key("allocs", esc(id)) }

func (s *EtcdStore) allocNodePrefix(nodeID string) string {
	return s.key("idx", "alloc_node", esc(nodeID), "")
}

func (s *EtcdStore) allocJobPrefix(jobID string) string {
	return s.key("idx", "alloc_job", esc(jobID), "")
}

func (s *EtcdStore) allocJobKey(ref string) string { return s.key("alloc_jobs", ref) }

func (s *EtcdStore) allocJobRefPrefix(ref string) string {
	return s.key("idx", "alloc_jobver", ref, "")
}

// UpsertAllocs implements Store.
func (s *EtcdStore) UpsertAllocs(allocs []*structs.Allocation) (uint64, error) {
	return s.write("upsert allocations", func(tx *etcdTx) error {
		if err := s.prefetchAllocs(tx, allocs); err != nil {
			return err
		}
		for _, a := range allocs {
			if err := s.putServerAlloc(tx, a); err != nil {
				return err
			}
		}
		return nil
	})
}

func (s *EtcdStore) prefetchAllocs(tx *etcdTx, allocs []*structs.Allocation) error {
	keys := make([]string, len(allocs))
	for i, a := range allocs {
		keys[i] = s.allocKey(a.ID)
	}
	return tx.prefetch(keys)
}

// putServerAlloc writes a server-side change of an allocation, keeping
// what the client reported, as BoltStore's putServerAlloc does.
func (s *EtcdStore) putServerAlloc(tx *etcdTx, a *structs.Allocation) error {
	cp := etcdAlloc{Allocation: *a}
	old, err := etcdGet[etcdAlloc](tx, s.allocKey(a.ID))
	switch {
	case err == nil:
		cp.CreateIndex = old.CreateIndex
		keepClientFields(&cp.Allocation, &old.Allocation)
		if old.NodeID != cp.NodeID {
			tx.del(s.allocNodePrefix(old.NodeID) + esc(old.ID))
		}
		if old.JobID != cp.JobID {
			tx.del(s.allocJobPrefix(old.JobID) + esc(old.ID))
		}
	case errors.Is(err, ErrNotFound):
		cp.CreateIndex = tx.index
	default:
		return err
	}
	cp.ModifyIndex = tx.index
	cp.AllocModifyIndex = tx.index
	if cp.JobRef, err = s.putAllocJob(tx, a.Job); err != nil {
		return fmt.Errorf("failed to encode the job of allocation %s: %w", a.ID, err)
	}
	if old != nil && old.JobRef != "" && old.JobRef != cp.JobRef {
		s.dropJobRef(tx, old.JobRef, old.ID)
	}
	cp.Job = nil
	if err := tx.put(s.allocKey(cp.ID), &cp); err != nil {
		return err
	}
	s.markNodeChange(tx, cp.NodeID, cp.ID)
	tx.putRaw(s.allocJobPrefix(cp.JobID)+esc(cp.ID), nil)
	if cp.JobRef != "" {
		tx.putRaw(s.allocJobRefPrefix(cp.JobRef)+esc(cp.ID), nil)
	}
	return nil
}

// putAllocJob stores job under alloc_jobs unless that content is there
// already, and returns its reference ("" for no job).
func (s *EtcdStore) putAllocJob(tx *etcdTx, job *structs.Job) (string, error) {
	if job == nil {
		return "", nil
	}
	if ref, ok := tx.jobRefs[job]; ok {
		return ref, nil
	}
	buf, err := json.Marshal(job)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(buf)
	ref := fmt.Sprintf("%s/%020d/%s", esc(job.ID), job.Version, hex.EncodeToString(sum[:12]))
	key := s.allocJobKey(ref)
	raw, err := tx.getRaw(key)
	if err != nil {
		return "", err
	}
	if raw == nil {
		tx.putRaw(key, buf)
	}
	tx.jobRefs[job] = ref
	return ref, nil
}

// dropJobRef removes one allocation's reference to a job snapshot; the
// snapshot goes at commit if none is left (collectJobs).
func (s *EtcdStore) dropJobRef(tx *etcdTx, ref, allocID string) {
	tx.del(s.allocJobRefPrefix(ref) + esc(allocID))
	tx.gcJobs[ref] = struct{}{}
}

// collectJobs deletes the job snapshots the write left unreferenced.
func (t *etcdTx) collectJobs() error {
	for ref := range t.gcJobs {
		refs, err := t.scan(t.s.allocJobRefPrefix(ref), true)
		if err != nil {
			return err
		}
		if len(refs) == 0 {
			t.del(t.s.allocJobKey(ref))
		}
	}
	return nil
}

// deleteAlloc removes an allocation and its index entries; unknown IDs are
// ignored.
func (s *EtcdStore) deleteAlloc(tx *etcdTx, id string) error {
	old, err := etcdGet[etcdAlloc](tx, s.allocKey(id))
	switch {
	case errors.Is(err, ErrNotFound):
		return nil
	case err != nil:
		return err
	}
	tx.del(s.allocKey(id))
	tx.del(s.allocNodePrefix(old.NodeID) + esc(id))
	tx.del(s.allocJobPrefix(old.JobID) + esc(id))
	if old.JobRef != "" {
		s.dropJobRef(tx, old.JobRef, id)
	}
	return nil
}

// UpdateAllocsFromClient implements Store.
func (s *EtcdStore) UpdateAllocsFromClient(updates []*structs.Allocation) (uint64, error) {
	return s.write("update allocations from client", func(tx *etcdTx) error {
		if err := s.prefetchAllocs(tx, updates); err != nil {
			return err
		}
		for _, u := range updates {
			a, err := etcdGet[etcdAlloc](tx, s.allocKey(u.ID))
			if errors.Is(err, ErrNotFound) {
				continue // deleted meanwhile (purged job)
			}
			if err != nil {
				return err
			}
			a.ClientStatus = u.ClientStatus
			a.ClientDescription = u.ClientDescription
			a.TaskStates = u.TaskStates
			a.NetworkStatus = u.NetworkStatus
			a.ModifyIndex = tx.index
			if u.ModifyTime != 0 {
				a.ModifyTime = u.ModifyTime
			}
			if err := tx.put(s.allocKey(a.ID), a); err != nil {
				return err
			}
			if a.TerminalStatus() {
				// The node collects what the servers hold terminal.
				s.markNodeChange(tx, a.NodeID, a.ID)
			}
		}
		return nil
	})
}

// DeleteAllocs implements Store. Unknown IDs are ignored.
func (s *EtcdStore) DeleteAllocs(ids []string) (uint64, error) {
	return s.write("delete allocations", func(tx *etcdTx) error {
		for _, id := range ids {
			if err := s.deleteAlloc(tx, id); err != nil {
				return err
			}
		}
		return nil
	})
}

// Alloc implements Store.
func (s *EtcdStore) Alloc(id string) (*structs.Allocation, error) {
	var out []*structs.Allocation
	err := s.read(func(tx *etcdTx) error {
		a, err := etcdGet[etcdAlloc](tx, s.allocKey(id))
		if err != nil {
			return err
		}
		out, err = s.hydrate(tx, []*etcdAlloc{a})
		return err
	})
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// Allocs implements Store. It returns allocations sorted by ID.
func (s *EtcdStore) Allocs() ([]*structs.Allocation, error) {
	var out []*structs.Allocation
	err := s.read(func(tx *etcdTx) error {
		stored, err := etcdList[etcdAlloc](tx, s.key("allocs", ""))
		if err != nil {
			return err
		}
		out, err = s.hydrate(tx, stored)
		return err
	})
	return out, err
}

// AllocsByJob implements Store. It reads only the job's allocations.
func (s *EtcdStore) AllocsByJob(jobID string) ([]*structs.Allocation, error) {
	return s.allocsByIndex(s.allocJobPrefix(jobID), "job index")
}

// markNodeChange writes the allocation's entry in the node index with the
// write's index: the entries' values say when the node last has something
// to act on (NodeAllocsIndex).
func (s *EtcdStore) markNodeChange(tx *etcdTx, nodeID, allocID string) {
	tx.putRaw(s.allocNodePrefix(nodeID)+esc(allocID), []byte(strconv.FormatUint(tx.index, 10)))
}

// NodeAllocsIndex implements NodeAllocsIndexer from the node index alone:
// one small range read, no allocation decoded. Entries written before
// they carried an index make it answer ok=false.
func (s *EtcdStore) NodeAllocsIndex(nodeID string) (index uint64, count int, ok bool, err error) {
	err = s.read(func(tx *etcdTx) error {
		kvs, err := tx.scan(s.allocNodePrefix(nodeID), false)
		if err != nil {
			return err
		}
		for _, e := range kvs {
			if len(e.val) == 0 {
				return nil
			}
			v, perr := strconv.ParseUint(string(e.val), 10, 64)
			if perr != nil {
				return fmt.Errorf("%w: node index entry %s is %q", ErrCorrupt, e.key, e.val)
			}
			index = max(index, v)
		}
		count, ok = len(kvs), true
		return nil
	})
	if err != nil || !ok {
		return 0, 0, false, err
	}
	return index, count, true, nil
}

// AllocsByNode implements Store. It reads only the node's allocations.
func (s *EtcdStore) AllocsByNode(nodeID string) ([]*structs.Allocation, error) {
	return s.allocsByIndex(s.allocNodePrefix(nodeID), "node index")
}

func (s *EtcdStore) allocsByIndex(prefix, index string) ([]*structs.Allocation, error) {
	var out []*structs.Allocation
	err := s.read(func(tx *etcdTx) error {
		ids, err := tx.scanIDs(prefix)
		if err != nil {
			return err
		}
		stored, err := getByID[etcdAlloc](tx, ids, s.allocKey, index)
		if err != nil {
			return err
		}
		out, err = s.hydrate(tx, stored)
		return err
	})
	return out, err
}

// hydrate gives the allocations their jobs, sorted by ID.
func (s *EtcdStore) hydrate(tx *etcdTx, stored []*etcdAlloc) ([]*structs.Allocation, error) {
	var missing []string
	for _, a := range stored {
		if a.JobRef != "" && s.jobs.get(a.JobRef) == nil {
			missing = append(missing, s.allocJobKey(a.JobRef))
		}
	}
	if err := tx.prefetch(missing); err != nil {
		return nil, err
	}
	out := make([]*structs.Allocation, len(stored))
	for i, a := range stored {
		out[i] = &a.Allocation
		if a.JobRef == "" {
			continue
		}
		raw := s.jobs.get(a.JobRef)
		if raw == nil {
			var err error
			if raw, err = tx.getRaw(s.allocJobKey(a.JobRef)); err != nil {
				return nil, err
			}
			if raw == nil {
				return nil, fmt.Errorf("allocation %s names job %s: %w", a.ID, a.JobRef, ErrNotFound)
			}
			s.jobs.add(a.JobRef, raw)
		}
		job, err := decode[structs.Job](s, s.allocJobKey(a.JobRef), raw)
		if err != nil {
			return nil, err
		}
		out[i].Job = job
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// jobCache keeps the encoded job snapshots allocations refer to. A
// snapshot's key names its content, so an entry never goes stale.
type jobCache struct {
	mu sync.Mutex
	m  map[string][]byte
}

const jobCacheSize = 256

func newJobCache() *jobCache { return &jobCache{m: map[string][]byte{}} }

func (c *jobCache) get(ref string) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[ref]
}

func (c *jobCache) add(ref string, raw []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= jobCacheSize {
		clear(c.m)
	}
	c.m[ref] = raw
}

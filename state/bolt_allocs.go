package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	bolt "go.etcd.io/bbolt"

	"github.com/meshlet/meshlet/structs"
)

// UpsertAllocs implements Store.
func (s *BoltStore) UpsertAllocs(allocs []*structs.Allocation) (uint64, error) {
	return s.write(func(tx *bolt.Tx, index uint64) error {
		for _, a := range allocs {
			if err := putServerAlloc(tx, index, a); err != nil {
				return err
			}
		}
		return nil
	})
}

// putServerAlloc writes a server-side change of an allocation. What the
// client reports (ClientStatus, ClientDescription, TaskStates,
// NetworkStatus) is kept from the stored allocation, so a plan computed
// before a client update never overwrites it.
func putServerAlloc(tx *bolt.Tx, index uint64, a *structs.Allocation) error {
	cp := *a
	old, err := get[structs.Allocation](tx, bucketAllocs, a.ID)
	switch {
	case err == nil:
		cp.CreateIndex = old.CreateIndex
		keepClientFields(&cp, old)
		if old.NodeID != cp.NodeID {
			if err := tx.Bucket(bucketAllocByNode).Delete(nodeKey(old.NodeID, old.ID)); err != nil {
				return err
			}
		}
	case errors.Is(err, ErrNotFound):
		cp.CreateIndex = index
	default:
		return err
	}
	cp.ModifyIndex = index
	cp.AllocModifyIndex = index
	if err := put(tx, bucketAllocs, cp.ID, &cp); err != nil {
		return err
	}
	return tx.Bucket(bucketAllocByNode).Put(nodeKey(cp.NodeID, cp.ID), nil)
}

// keepClientFields copies what the client reports from the stored
// allocation old into the server's write cp. The one client status the
// server decides itself is "lost" (its node is down), as Nomad does.
func keepClientFields(cp, old *structs.Allocation) {
	if cp.ClientStatus == structs.AllocClientStatusLost && old.ClientStatus != structs.AllocClientStatusLost {
		cp.TaskStates, cp.NetworkStatus = old.TaskStates, old.NetworkStatus
		return
	}
	cp.ClientStatus, cp.ClientDescription = old.ClientStatus, old.ClientDescription
	cp.TaskStates, cp.NetworkStatus = old.TaskStates, old.NetworkStatus
}

func nodeKey(nodeID, allocID string) []byte { return []byte(nodeID + "\x00" + allocID) }

// deleteAlloc removes an allocation and its node index entry.
func deleteAlloc(tx *bolt.Tx, id string) error {
	old, err := get[structs.Allocation](tx, bucketAllocs, id)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := tx.Bucket(bucketAllocByNode).Delete(nodeKey(old.NodeID, id)); err != nil {
		return err
	}
	return tx.Bucket(bucketAllocs).Delete([]byte(id))
}

// rebuildNodeIndex fills the node index from the allocations (a store
// written before the index existed).
func rebuildNodeIndex(tx *bolt.Tx) error {
	idx := tx.Bucket(bucketAllocByNode)
	return tx.Bucket(bucketAllocs).ForEach(func(k, v []byte) error {
		var a structs.Allocation
		if err := json.Unmarshal(v, &a); err != nil {
			return fmt.Errorf("failed to decode %s/%s: %w", bucketAllocs, k, err)
		}
		return idx.Put(nodeKey(a.NodeID, a.ID), nil)
	})
}

// UpdateAllocsFromClient implements Store.
func (s *BoltStore) UpdateAllocsFromClient(updates []*structs.Allocation) (uint64, error) {
	return s.write(func(tx *bolt.Tx, index uint64) error {
		for _, u := range updates {
			a, err := get[structs.Allocation](tx, bucketAllocs, u.ID)
			if err != nil {
				continue // deleted meanwhile (purged job)
			}
			a.ClientStatus = u.ClientStatus
			a.ClientDescription = u.ClientDescription
			a.TaskStates = u.TaskStates
			a.NetworkStatus = u.NetworkStatus
			a.ModifyIndex = index
			if u.ModifyTime != 0 {
				a.ModifyTime = u.ModifyTime
			}
			if err := put(tx, bucketAllocs, a.ID, a); err != nil {
				return err
			}
		}
		return nil
	})
}

// Alloc implements Store.
func (s *BoltStore) Alloc(id string) (*structs.Allocation, error) {
	var out *structs.Allocation
	err := s.view(func(tx *bolt.Tx) error {
		var err error
		out, err = get[structs.Allocation](tx, bucketAllocs, id)
		return err
	})
	return out, err
}

// Allocs implements Store. It returns allocations sorted by ID.
func (s *BoltStore) Allocs() ([]*structs.Allocation, error) {
	return list[structs.Allocation](s, bucketAllocs, "", nil)
}

// AllocsByJob implements Store.
func (s *BoltStore) AllocsByJob(jobID string) ([]*structs.Allocation, error) {
	return list(s, bucketAllocs, "", func(a *structs.Allocation) bool { return a.JobID == jobID })
}

// AllocsByNode implements Store. It reads only the node's allocations,
// through the node index, sorted by ID.
func (s *BoltStore) AllocsByNode(nodeID string) ([]*structs.Allocation, error) {
	var out []*structs.Allocation
	err := s.view(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketAllocByNode).Cursor()
		p := nodeKey(nodeID, "")
		for k, _ := c.Seek(p); k != nil && hasPrefix(k, p); k, _ = c.Next() {
			a, err := get[structs.Allocation](tx, bucketAllocs, string(k[len(p):]))
			if err != nil {
				return fmt.Errorf("node index names allocation %s: %w", k[len(p):], err)
			}
			out = append(out, a)
		}
		return nil
	})
	return out, err
}

// DeleteAllocs implements Store. Unknown IDs are ignored.
func (s *BoltStore) DeleteAllocs(ids []string) (uint64, error) {
	return s.write(func(tx *bolt.Tx, _ uint64) error {
		for _, id := range ids {
			if err := deleteAlloc(tx, id); err != nil {
				return err
			}
		}
		return nil
	})
}

// UpsertNode implements Store.
func (s *BoltStore) UpsertNode(node *structs.Node) (uint64, error) {
	return s.write(func(tx *bolt.Tx, index uint64) error {
		cp := *node
		if old, err := get[structs.Node](tx, bucketNodes, node.ID); err == nil {
			cp.CreateIndex = old.CreateIndex
		} else {
			cp.CreateIndex = index
		}
		cp.ModifyIndex = index
		return put(tx, bucketNodes, cp.ID, &cp)
	})
}

// DeleteNode implements Store.
func (s *BoltStore) DeleteNode(id string) (uint64, error) {
	return s.write(func(tx *bolt.Tx, _ uint64) error {
		if tx.Bucket(bucketNodes).Get([]byte(id)) == nil {
			return ErrNotFound
		}
		return tx.Bucket(bucketNodes).Delete([]byte(id))
	})
}

// Node implements Store.
func (s *BoltStore) Node(id string) (*structs.Node, error) {
	var out *structs.Node
	err := s.view(func(tx *bolt.Tx) error {
		var err error
		out, err = get[structs.Node](tx, bucketNodes, id)
		return err
	})
	return out, err
}

// Nodes implements Store.
func (s *BoltStore) Nodes() ([]*structs.Node, error) {
	return list[structs.Node](s, bucketNodes, "", nil)
}

// UpsertEval implements Store.
func (s *BoltStore) UpsertEval(eval *Evaluation) (uint64, error) {
	return s.write(func(tx *bolt.Tx, index uint64) error { return putEval(tx, index, eval) })
}

func putEval(tx *bolt.Tx, index uint64, eval *Evaluation) error {
	cp := *eval
	if old, err := get[Evaluation](tx, bucketEvals, eval.ID); err == nil {
		cp.CreateIndex = old.CreateIndex
	} else {
		cp.CreateIndex = index
	}
	cp.ModifyIndex = index
	return put(tx, bucketEvals, cp.ID, &cp)
}

// Eval implements Store.
func (s *BoltStore) Eval(id string) (*Evaluation, error) {
	var out *Evaluation
	err := s.view(func(tx *bolt.Tx) error {
		var err error
		out, err = get[Evaluation](tx, bucketEvals, id)
		return err
	})
	return out, err
}

// EvalsByJob implements Store.
func (s *BoltStore) EvalsByJob(jobID string) ([]*Evaluation, error) {
	out, err := list(s, bucketEvals, "", func(e *Evaluation) bool { return e.JobID == jobID })
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreateIndex > out[j].CreateIndex })
	return out, nil
}

// Evals implements Store.
func (s *BoltStore) Evals() ([]*Evaluation, error) {
	return list[Evaluation](s, bucketEvals, "", nil)
}

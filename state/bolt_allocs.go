package state

import (
	"sort"

	bolt "go.etcd.io/bbolt"

	"github.com/meshlet/meshlet/structs"
)

// UpsertAllocs implements Store.
func (s *BoltStore) UpsertAllocs(allocs []*structs.Allocation) (uint64, error) {
	return s.write(func(tx *bolt.Tx, index uint64) error {
		for _, a := range allocs {
			cp := *a
			if old, err := get[structs.Allocation](tx, bucketAllocs, a.ID); err == nil {
				cp.CreateIndex = old.CreateIndex
			} else {
				cp.CreateIndex = index
			}
			cp.ModifyIndex = index
			cp.AllocModifyIndex = index
			if err := put(tx, bucketAllocs, cp.ID, &cp); err != nil {
				return err
			}
		}
		return nil
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
	err := s.db.View(func(tx *bolt.Tx) error {
		var err error
		out, err = get[structs.Allocation](tx, bucketAllocs, id)
		return err
	})
	return out, err
}

// Allocs implements Store. It returns allocations sorted by ID.
func (s *BoltStore) Allocs() ([]*structs.Allocation, error) {
	return list[structs.Allocation](s.db, bucketAllocs, "", nil)
}

// AllocsByJob implements Store.
func (s *BoltStore) AllocsByJob(jobID string) ([]*structs.Allocation, error) {
	return list(s.db, bucketAllocs, "", func(a *structs.Allocation) bool { return a.JobID == jobID })
}

// AllocsByNode implements Store.
func (s *BoltStore) AllocsByNode(nodeID string) ([]*structs.Allocation, error) {
	return list(s.db, bucketAllocs, "", func(a *structs.Allocation) bool { return a.NodeID == nodeID })
}

// DeleteAllocs implements Store. Unknown IDs are ignored.
func (s *BoltStore) DeleteAllocs(ids []string) (uint64, error) {
	return s.write(func(tx *bolt.Tx, _ uint64) error {
		for _, id := range ids {
			if err := tx.Bucket(bucketAllocs).Delete([]byte(id)); err != nil {
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

// Node implements Store.
func (s *BoltStore) Node(id string) (*structs.Node, error) {
	var out *structs.Node
	err := s.db.View(func(tx *bolt.Tx) error {
		var err error
		out, err = get[structs.Node](tx, bucketNodes, id)
		return err
	})
	return out, err
}

// Nodes implements Store.
func (s *BoltStore) Nodes() ([]*structs.Node, error) {
	return list[structs.Node](s.db, bucketNodes, "", nil)
}

// UpsertEval implements Store.
func (s *BoltStore) UpsertEval(eval *Evaluation) (uint64, error) {
	return s.write(func(tx *bolt.Tx, index uint64) error {
		cp := *eval
		if old, err := get[Evaluation](tx, bucketEvals, eval.ID); err == nil {
			cp.CreateIndex = old.CreateIndex
		} else {
			cp.CreateIndex = index
		}
		cp.ModifyIndex = index
		return put(tx, bucketEvals, cp.ID, &cp)
	})
}

// Eval implements Store.
func (s *BoltStore) Eval(id string) (*Evaluation, error) {
	var out *Evaluation
	err := s.db.View(func(tx *bolt.Tx) error {
		var err error
		out, err = get[Evaluation](tx, bucketEvals, id)
		return err
	})
	return out, err
}

// EvalsByJob implements Store.
func (s *BoltStore) EvalsByJob(jobID string) ([]*Evaluation, error) {
	out, err := list(s.db, bucketEvals, "", func(e *Evaluation) bool { return e.JobID == jobID })
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreateIndex > out[j].CreateIndex })
	return out, nil
}

package state

import (
	"errors"

	bolt "go.etcd.io/bbolt"

	"github.com/meshlet/meshlet/structs"
)

// ApplyPlan implements Store: one bbolt transaction, so a failed write (a
// full disk, a crash) leaves the state as it was before the plan.
func (s *BoltStore) ApplyPlan(p *Plan) (uint64, error) {
	return s.write(func(tx *bolt.Tx, index uint64) error {
		var stored *structs.Job
		if p.Job != nil {
			var err error
			if stored, err = s.putJob(tx, index, p.Job); err != nil {
				return err
			}
		}
		for _, a := range p.Allocs {
			if stored != nil && a.Job != nil && a.Job.ID == stored.ID && a.Job.Version == stored.Version {
				cp := *a
				cp.Job = stored
				a = &cp
			}
			if err := putServerAlloc(tx, index, a); err != nil {
				return err
			}
		}
		for _, e := range p.Evals {
			if stored != nil && e.JobID == stored.ID {
				cp := *e
				cp.JobModifyIndex = stored.JobModifyIndex
				e = &cp
			}
			if err := putEval(tx, index, e); err != nil {
				return err
			}
		}
		return applyDeletes(tx, p)
	})
}

func applyDeletes(tx *bolt.Tx, p *Plan) error {
	if p.PurgeJobID != "" {
		if err := deleteJob(tx, p.PurgeJobID, p.ownEvals()); err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
	}
	for _, id := range p.DeleteAllocs {
		if err := deleteAlloc(tx, id); err != nil {
			return err
		}
	}
	for _, id := range p.DeleteEvals {
		if err := tx.Bucket(bucketEvals).Delete([]byte(id)); err != nil {
			return err
		}
	}
	return nil
}

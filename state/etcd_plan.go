package state

import (
	"errors"

	"github.com/meshlet/meshlet/structs"
)

// ApplyPlan implements Store: one etcd transaction, so the plan is stored
// whole or not at all, with BoltStore.ApplyPlan's semantics. The job is
// stored once for all of the plan's allocations (see EtcdStore).
func (s *EtcdStore) ApplyPlan(p *Plan) (uint64, error) {
	return s.write("apply plan", func(tx *etcdTx) error {
		if err := s.prefetchAllocs(tx, p.Allocs); err != nil {
			return err
		}
		var stored *structs.Job
		if p.Job != nil {
			var err error
			if stored, err = s.putJob(tx, p.Job); err != nil {
				return err
			}
		}
		for _, a := range p.Allocs {
			if stored != nil && a.Job != nil && a.Job.ID == stored.ID && a.Job.Version == stored.Version {
				cp := *a
				cp.Job = stored
				a = &cp
			}
			if err := s.putServerAlloc(tx, a); err != nil {
				return err
			}
		}
		for _, e := range p.Evals {
			if stored != nil && e.JobID == stored.ID {
				cp := *e
				cp.JobModifyIndex = stored.JobModifyIndex
				e = &cp
			}
			if err := s.putEval(tx, e); err != nil {
				return err
			}
		}
		return s.applyDeletes(tx, p)
	})
}

func (s *EtcdStore) applyDeletes(tx *etcdTx, p *Plan) error {
	if p.PurgeJobID != "" {
		if err := s.deleteJob(tx, p.PurgeJobID, p.ownEvals()); err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
	}
	for _, id := range p.DeleteAllocs {
		if err := s.deleteAlloc(tx, id); err != nil {
			return err
		}
	}
	for _, id := range p.DeleteEvals {
		if err := s.deleteEval(tx, id); err != nil {
			return err
		}
	}
	return nil
}

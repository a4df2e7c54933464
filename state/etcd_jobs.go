package state

import (
	"errors"
	"fmt"
	"sort"

	"github.com/meshlet/meshlet/structs"
)

func (s *EtcdStore) jobKey(id string) string { return s.key("jobs", esc(id)) }

func (s *EtcdStore) versionsPrefix(id string) string { return s.key("job_versions", esc(id), "") }

func (s *EtcdStore) evalKey(id string) string { return s.key("evals", esc(id)) }

func (s *EtcdStore) evalJobPrefix(jobID string) string {
	return s.key("idx", "eval_job", esc(jobID), "")
}

// UpsertJob implements Store.
func (s *EtcdStore) UpsertJob(job *structs.Job) (uint64, error) {
	return s.write("upsert job", func(tx *etcdTx) error {
		_, err := s.putJob(tx, job)
		return err
	})
}

// putJob stores a copy of job as its latest version and drops the versions
// beyond the newest s.versions.
func (s *EtcdStore) putJob(tx *etcdTx, job *structs.Job) (*structs.Job, error) {
	cp := *job
	old, err := etcdGet[structs.Job](tx, s.jobKey(job.ID))
	switch {
	case err == nil:
		cp.CreateIndex = old.CreateIndex
	case errors.Is(err, ErrNotFound):
		cp.CreateIndex = tx.index
	default:
		return nil, err
	}
	cp.ModifyIndex = tx.index
	cp.JobModifyIndex = tx.index
	if err := tx.put(s.jobKey(cp.ID), &cp); err != nil {
		return nil, err
	}
	vp := s.versionsPrefix(cp.ID)
	if err := tx.put(vp+fmt.Sprintf("%020d", cp.Version), &cp); err != nil {
		return nil, err
	}
	keys, err := tx.scan(vp, true)
	if err != nil {
		return nil, err
	}
	for len(keys) > s.versions {
		tx.del(keys[0].key)
		keys = keys[1:]
	}
	return &cp, nil
}

// UpdateJobStatus implements Store.
func (s *EtcdStore) UpdateJobStatus(id, status string) (uint64, error) {
	return s.write("update job status", func(tx *etcdTx) error {
		job, err := etcdGet[structs.Job](tx, s.jobKey(id))
		if err != nil {
			return err
		}
		job.Status = status
		job.ModifyIndex = tx.index
		return tx.put(s.jobKey(id), job)
	})
}

// Job implements Store.
func (s *EtcdStore) Job(id string) (*structs.Job, error) {
	return readOne[structs.Job](s, s.jobKey(id))
}

// Jobs implements Store.
func (s *EtcdStore) Jobs() ([]*structs.Job, error) {
	return readAll(s, s.key("jobs", ""), func(j *structs.Job) string { return j.ID })
}

// readOne reads the record at key in one read.
func readOne[T any](s *EtcdStore, key string) (*T, error) {
	var out *T
	err := s.read(func(tx *etcdTx) error {
		var err error
		out, err = etcdGet[T](tx, key)
		return err
	})
	return out, err
}

// readAll reads every record under prefix in one read, sorted by id.
func readAll[T any](s *EtcdStore, prefix string, id func(*T) string) ([]*T, error) {
	var out []*T
	err := s.read(func(tx *etcdTx) error {
		var err error
		out, err = etcdList[T](tx, prefix)
		return err
	})
	sort.Slice(out, func(i, j int) bool { return id(out[i]) < id(out[j]) })
	return out, err
}

// JobVersions implements Store.
func (s *EtcdStore) JobVersions(id string) ([]*structs.Job, error) {
	var out []*structs.Job
	err := s.read(func(tx *etcdTx) error {
		var err error
		out, err = etcdList[structs.Job](tx, s.versionsPrefix(id))
		return err
	})
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
func (s *EtcdStore) DeleteJob(id string) (uint64, error) {
	return s.write("delete job", func(tx *etcdTx) error {
		raw, err := tx.getRaw(s.jobKey(id))
		if err != nil {
			return err
		}
		if raw == nil {
			return ErrNotFound
		}
		return s.deleteJob(tx, id, nil)
	})
}

// deleteJob removes the job, its versions and its evaluations except
// those in keep (the purging plan's own).
func (s *EtcdStore) deleteJob(tx *etcdTx, id string, keep map[string]bool) error {
	tx.del(s.jobKey(id))
	versions, err := tx.scan(s.versionsPrefix(id), true)
	if err != nil {
		return err
	}
	for _, v := range versions {
		tx.del(v.key)
	}
	evals, err := tx.scanIDs(s.evalJobPrefix(id))
	if err != nil {
		return err
	}
	for _, e := range evals {
		if keep[e] {
			continue
		}
		tx.del(s.evalKey(e))
		tx.del(s.evalJobPrefix(id) + esc(e))
	}
	return nil
}

// UpsertNode implements Store.
func (s *EtcdStore) UpsertNode(node *structs.Node) (uint64, error) {
	return s.write("upsert node", func(tx *etcdTx) error {
		key := s.key("nodes", esc(node.ID))
		cp := *node
		old, err := etcdGet[structs.Node](tx, key)
		switch {
		case err == nil:
			cp.CreateIndex = old.CreateIndex
		case errors.Is(err, ErrNotFound):
			cp.CreateIndex = tx.index
		default:
			return err
		}
		cp.ModifyIndex = tx.index
		return tx.put(key, &cp)
	})
}

// Node implements Store.
func (s *EtcdStore) Node(id string) (*structs.Node, error) {
	return readOne[structs.Node](s, s.key("nodes", esc(id)))
}

// DeleteNode implements Store.
func (s *EtcdStore) DeleteNode(id string) (uint64, error) {
	return s.write("delete node", func(tx *etcdTx) error {
		key := s.key("nodes", esc(id))
		raw, err := tx.getRaw(key)
		if err != nil {
			return err
		}
		if raw == nil {
			return ErrNotFound
		}
		tx.del(key)
		return nil
	})
}

// Nodes implements Store.
func (s *EtcdStore) Nodes() ([]*structs.Node, error) {
	return readAll(s, s.key("nodes", ""), func(n *structs.Node) string { return n.ID })
}

// UpsertEval implements Store.
func (s *EtcdStore) UpsertEval(eval *Evaluation) (uint64, error) {
	return s.write("upsert evaluation", func(tx *etcdTx) error { return s.putEval(tx, eval) })
}

func (s *EtcdStore) putEval(tx *etcdTx, eval *Evaluation) error {
	cp := *eval
	old, err := etcdGet[Evaluation](tx, s.evalKey(eval.ID))
	switch {
	case err == nil:
		cp.CreateIndex = old.CreateIndex
		if old.JobID != cp.JobID {
			tx.del(s.evalJobPrefix(old.JobID) + esc(old.ID))
		}
	case errors.Is(err, ErrNotFound):
		cp.CreateIndex = tx.index
	default:
		return err
	}
	cp.ModifyIndex = tx.index
	if err := tx.put(s.evalKey(cp.ID), &cp); err != nil {
		return err
	}
	tx.putRaw(s.evalJobPrefix(cp.JobID)+esc(cp.ID), nil)
	return nil
}

// deleteEval removes an evaluation and its job index entry; unknown IDs
// are ignored.
func (s *EtcdStore) deleteEval(tx *etcdTx, id string) error {
	old, err := etcdGet[Evaluation](tx, s.evalKey(id))
	switch {
	case errors.Is(err, ErrNotFound):
		return nil
	case err != nil:
		return err
	}
	tx.del(s.evalKey(id))
	tx.del(s.evalJobPrefix(old.JobID) + esc(id))
	return nil
}

// Eval implements Store.
func (s *EtcdStore) Eval(id string) (*Evaluation, error) {
	return readOne[Evaluation](s, s.evalKey(id))
}

// EvalsByJob implements Store. It reads only the job's evaluations.
func (s *EtcdStore) EvalsByJob(jobID string) ([]*Evaluation, error) {
	var out []*Evaluation
	err := s.read(func(tx *etcdTx) error {
		ids, err := tx.scanIDs(s.evalJobPrefix(jobID))
		if err != nil {
			return err
		}
		out, err = getByID[Evaluation](tx, ids, s.evalKey, "job index")
		return err
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreateIndex > out[j].CreateIndex })
	return out, nil
}

// Evals implements Store.
func (s *EtcdStore) Evals() ([]*Evaluation, error) {
	return readAll(s, s.key("evals", ""), func(e *Evaluation) string { return e.ID })
}

// getByID decodes the values an index names; an index entry without its
// value is an error.
func getByID[T any](tx *etcdTx, ids []string, key func(string) string, index string) ([]*T, error) {
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = key(id)
	}
	if err := tx.prefetch(keys); err != nil {
		return nil, err
	}
	out := make([]*T, 0, len(ids))
	for i, k := range keys {
		v, err := etcdGet[T](tx, k)
		if err != nil {
			return nil, fmt.Errorf("%s names %s: %w", index, ids[i], err)
		}
		out = append(out, v)
	}
	return out, nil
}

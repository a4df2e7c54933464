package state

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshlet/meshlet/internal/atomicfile"
)

// migrateBatch bounds the allocations of one import write (etcd's default
// --max-txn-ops is 128 and each allocation writes several keys).
const migrateBatch = 20

// MigratedSuffix is appended to a bbolt state file once its content lives
// in etcd.
const MigratedSuffix = ".migrated-to-etcd"

// MigrateBolt moves the state of a server from before etcd (the bbolt file
// at boltPath) into the etcd store opts describes, once: it keeps the
// cluster ID (so the data dir's marker and the clients' records still
// match), starts the etcd index above the file's (so every allocation
// reads as newer than what clients saw), then renames the file with
// MigratedSuffix. No file, nothing to do. The file stays the source of
// truth until the rename: an import cut short is started over at the next
// start. A prefix that already holds another cluster is an error, never
// overwritten.
func MigrateBolt(ctx context.Context, boltPath string, c *clientv3.Client, opts EtcdOptions) error {
	if _, err := os.Stat(boltPath); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	src, err := OpenBoltOptions(boltPath, Options{MarkerPath: opts.MarkerPath, JobVersions: opts.JobVersions})
	if err != nil {
		return fmt.Errorf("failed to open %s to move it into etcd: %w", boltPath, err)
	}
	defer src.Close()
	done, err := claimPrefix(ctx, c, opts, src, boltPath)
	if err != nil {
		return err
	}
	if !done {
		if err := importBolt(ctx, c, opts, src); err != nil {
			return fmt.Errorf("failed to move %s into etcd (it stays in use; the import starts over at the next start): %w", boltPath, err)
		}
		if _, err := c.Delete(ctx, opts.Prefix+"migrating"); err != nil {
			return fmt.Errorf("failed to finish moving %s into etcd: %w", boltPath, err)
		}
	}
	if err := src.Close(); err != nil {
		return err
	}
	if err := os.Rename(boltPath, boltPath+MigratedSuffix); err != nil {
		return fmt.Errorf("moved %s into etcd but failed to rename it: %w", boltPath, err)
	}
	return atomicfile.SyncDir(filepath.Dir(boltPath))
}

// claimPrefix records the file's cluster ID and index under an empty
// prefix, with a "migrating" key that marks the import unfinished. It
// reports done when an earlier run finished the import (and only the
// rename is left); an unfinished one is wiped and started over.
func claimPrefix(ctx context.Context, c *clientv3.Client, opts EtcdOptions, src *BoltStore, boltPath string) (bool, error) {
	p := opts.Prefix
	for range 2 {
		resp, err := c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(p+"cluster_id"), "=", 0)).
			Then(clientv3.OpPut(p+"cluster_id", src.ClusterID()), clientv3.OpPut(p+"format", strconv.Itoa(etcdFormat)),
				clientv3.OpPut(p+"index", strconv.FormatUint(src.Index(), 10)), clientv3.OpPut(p+"migrating", boltPath)).
			Else(clientv3.OpGet(p+"cluster_id"), clientv3.OpGet(p+"migrating")).Commit()
		if err != nil {
			return false, fmt.Errorf("failed to prepare etcd for %s: %w", boltPath, err)
		}
		if resp.Succeeded {
			return false, nil
		}
		id := string(resp.Responses[0].GetResponseRange().Kvs[0].Value)
		unfinished := len(resp.Responses[1].GetResponseRange().Kvs) > 0
		switch {
		case id != src.ClusterID():
			return false, fmt.Errorf("%w: %s holds cluster %s but etcd prefix %q already holds cluster %s: move one of them away",
				ErrStateLost, boltPath, src.ClusterID(), p, id)
		case !unfinished:
			return true, nil
		}
		if _, err := c.Delete(ctx, p, clientv3.WithPrefix()); err != nil {
			return false, fmt.Errorf("failed to clear an unfinished import of %s: %w", boltPath, err)
		}
	}
	return false, fmt.Errorf("failed to prepare etcd for %s: the prefix %q keeps changing", boltPath, p)
}

// importBolt writes every record of src through an EtcdStore on the
// claimed prefix: nodes, job versions (oldest first) and latest jobs,
// evaluations, then allocations with what their clients reported.
func importBolt(ctx context.Context, c *clientv3.Client, opts EtcdOptions, src *BoltStore) error {
	opts.MarkerPath = ""
	dst, err := OpenEtcd(ctx, c, opts)
	if err != nil {
		return err
	}
	defer dst.Close()
	nodes, err := src.Nodes()
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if _, err := dst.UpsertNode(n); err != nil {
			return err
		}
	}
	if err := importJobs(src, dst); err != nil {
		return err
	}
	evals, err := src.Evals()
	if err != nil {
		return err
	}
	for _, e := range evals {
		if _, err := dst.UpsertEval(e); err != nil {
			return err
		}
	}
	allocs, err := src.Allocs()
	if err != nil {
		return err
	}
	for batch := range slices.Chunk(allocs, migrateBatch) {
		if _, err := dst.UpsertAllocs(batch); err != nil {
			return err
		}
		if _, err := dst.UpdateAllocsFromClient(batch); err != nil {
			return err
		}
	}
	return nil
}

func importJobs(src *BoltStore, dst *EtcdStore) error {
	jobs, err := src.Jobs()
	if err != nil {
		return err
	}
	for _, j := range jobs {
		versions, err := src.JobVersions(j.ID)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
		slices.Reverse(versions) // oldest first
		for _, v := range versions {
			if v.Version != j.Version {
				if _, err := dst.UpsertJob(v); err != nil {
					return err
				}
			}
		}
		if _, err := dst.UpsertJob(j); err != nil {
			return err
		}
		if j.Status != "" {
			if _, err := dst.UpdateJobStatus(j.ID, j.Status); err != nil {
				return err
			}
		}
	}
	return nil
}

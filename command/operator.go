package command

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/meshlet/meshlet/internal/atomicfile"
)

func init() {
	register(&command{
		name: "operator snapshot save", args: "[options] FILE", synopsis: "Save a snapshot of the cluster's state",
		help: `Saves a snapshot of the servers' state (jobs and their versions, allocations,
evaluations, nodes) and of the mesh's durable state (intentions, and the CA's
roots with their private keys) to FILE, read at one etcd revision,
gzip-compressed with a SHA-256 checksum. Service registrations are not
included (each node writes its own again). It works with the embedded etcd
member and with an external etcd. FILE is replaced atomically and created
with mode 0600: it holds the CA's keys.`,
		example: "$ meshlet operator snapshot save backup.snap",
		run:     runSnapshotSave,
	}, &command{
		name: "operator snapshot restore", args: "[options] FILE", synopsis: "Restore the cluster's state from a snapshot",
		help: `Replaces the servers' state with the snapshot in FILE, through the leader.
The snapshot is verified first; a damaged one, or one of another cluster,
changes nothing. The state's index moves past both the current and the
snapshot's, so clients reconcile with the restored allocations.

With an external etcd whose limits (--max-txn-ops, --max-request-bytes)
are too small for one transaction, the restore runs in batches and the
cluster refuses writes meanwhile; if it is interrupted, run it again.`,
		example: "$ meshlet operator snapshot restore backup.snap",
		run:     runSnapshotRestore,
	})
}

func runSnapshotSave(e *env, c *command, args []string) int {
	fs := newFlags(c)
	addr := addressFlag(fs)
	if code, ok := e.parse(c, fs, args); !ok {
		return code
	}
	if fs.NArg() != 1 || fs.Arg(0) == "" {
		return e.usageError(c, "expected one argument: the snapshot FILE")
	}
	client, err := nomadClient(addr)
	if err != nil {
		return e.errorf("%v", err)
	}
	snap, err := client.Operator().Snapshot((&nomadapi.QueryOptions{}).WithContext(e.ctx))
	if err != nil {
		return e.errorf("failed to get a snapshot: %s", describe(err, addr.Addr))
	}
	defer snap.Close()
	if err := writeAtomically(fs.Arg(0), snap); err != nil {
		return e.errorf("failed to save the snapshot: %s", describe(err, addr.Addr))
	}
	fmt.Fprintf(e.stdout, "State file written to %s\n", fs.Arg(0))
	return exitOK
}

func runSnapshotRestore(e *env, c *command, args []string) int {
	fs := newFlags(c)
	addr := addressFlag(fs)
	force := fs.Bool("force", false, "Restore a snapshot of another cluster (its data, under this cluster's ID).")
	if code, ok := e.parse(c, fs, args); !ok {
		return code
	}
	if fs.NArg() != 1 || fs.Arg(0) == "" {
		return e.usageError(c, "expected one argument: the snapshot FILE")
	}
	f, err := os.Open(fs.Arg(0))
	if err != nil {
		return e.errorf("failed to open the snapshot: %v", err)
	}
	defer f.Close()
	client, err := nomadClient(addr)
	if err != nil {
		return e.errorf("%v", err)
	}
	q := (&nomadapi.WriteOptions{}).WithContext(e.ctx)
	if *force {
		// Operator().SnapshotRestore takes no parameters.
		_, err = client.Raw().Write("/v1/operator/snapshot?force=true", f, nil, q)
	} else {
		_, err = client.Operator().SnapshotRestore(f, q)
	}
	if err != nil {
		return e.errorf("failed to restore the snapshot: %s", describe(err, addr.Addr))
	}
	fmt.Fprintln(e.stdout, "Snapshot restored")
	return exitOK
}

// writeAtomically copies r to path through a temp file in its directory
// (mode 0600, fsynced, renamed over path), so path is either untouched or
// complete: nomad/api's snapshot reader reports a digest mismatch only at
// the end of the stream.
func writeAtomically(path string, r io.Reader) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return fmt.Errorf("failed to create a temp file next to %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	if err = f.Chmod(0o600); err != nil {
		return fmt.Errorf("failed to chmod %s: %w", f.Name(), err)
	}
	if _, err = io.Copy(f, r); err != nil {
		return fmt.Errorf("failed to receive the snapshot: %w", err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("failed to sync %s: %w", f.Name(), err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("failed to close %s: %w", f.Name(), err)
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("failed to rename %s over %s: %w", f.Name(), path, err)
	}
	return atomicfile.SyncDir(dir)
}

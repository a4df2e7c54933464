package agent

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/meshlet/meshlet/api"
	"github.com/meshlet/meshlet/state"
)

var _ api.SnapshotBackend = (*Backend)(nil)

// errNoEtcdState: snapshots are of the servers' etcd state.
var errNoEtcdState = errors.New("snapshots need a server agent with the etcd state store")

// etcdStore returns the server's etcd state store.
func (b *Backend) etcdStore() (*state.EtcdStore, error) {
	st, ok := b.store.(*state.EtcdStore)
	if b.server == nil || !ok {
		return nil, &apiError{errNoEtcdState, api.ErrInvalid}
	}
	return st, nil
}

// SaveSnapshot implements api.SnapshotBackend: any server can save one
// (it reads the state at one etcd revision).
func (b *Backend) SaveSnapshot(ctx context.Context, w io.Writer) error {
	st, err := b.etcdStore()
	if err != nil {
		return err
	}
	if err := st.Snapshot(ctx, w); err != nil {
		return fmt.Errorf("failed to save a snapshot: %w", err)
	}
	return nil
}

// RestoreSnapshot implements api.SnapshotBackend: only the leader
// restores (the store's leader guard refuses it otherwise too); a damaged
// snapshot, one of another cluster without opts.Force, or a restore on a
// follower is refused as ErrInvalid and changes nothing.
func (b *Backend) RestoreSnapshot(ctx context.Context, r io.Reader, opts api.SnapshotRestoreOptions) error {
	st, err := b.etcdStore()
	if err != nil {
		return err
	}
	if !b.server.IsLeader() {
		return &apiError{b.notLeader(ctx), api.ErrInvalid}
	}
	err = st.Restore(ctx, r, state.RestoreOptions{Force: opts.Force})
	switch {
	case err == nil:
		// The restored state may hold pending evaluations, reschedules
		// and drains: take them up as a new leader does.
		if rerr := b.server.Reload(); rerr != nil {
			return fmt.Errorf("restored the snapshot, but failed to evaluate its pending work: %w", rerr)
		}
		return nil
	case errors.Is(err, state.ErrBadSnapshot), errors.Is(err, state.ErrSnapshotCluster):
		return &apiError{fmt.Errorf("snapshot refused: %w", err), api.ErrInvalid}
	case errors.Is(err, state.ErrNotLeader):
		return &apiError{fmt.Errorf("%w: %w", b.notLeader(ctx), err), api.ErrInvalid}
	}
	return fmt.Errorf("failed to restore the snapshot: %w", err)
}

// notLeader names the leader a restore must be sent to.
func (b *Backend) notLeader(ctx context.Context) error {
	if addr, err := b.Leader(ctx); err == nil && addr != "" {
		return fmt.Errorf("this server is not the leader: restore the snapshot through the leader (RPC address %s)", addr)
	}
	return errors.New("this server is not the leader: restore the snapshot through the leader")
}

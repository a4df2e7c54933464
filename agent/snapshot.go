package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/meshlet/meshlet/api"
	"github.com/meshlet/meshlet/meshstate"
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

// meshSectionName names the mesh state's section in a snapshot.
const meshSectionName = "connect"

// meshSection is the snapshot section of the mesh state's durable keys
// (meshstate.DurableKeys: the intentions, and the CA's roots with their
// private keys), under <prefix>connect/ beside the state's <prefix>state/
// as openServerState lays them out. The catalog registrations are not in
// it: each node's registrar writes its own again within its sync interval
// (anti-entropy), so a restore leaves them as they are. ok is false when
// the state's prefix is not laid out so (no section then).
//
// On restore, Prepare checks the section (meshstate.PrepareRestore: the
// intentions valid, every root with its matching key and no stray key)
// and refuses a CA of another trust domain unless force; info receives
// what it restores.
func meshSection(st *state.EtcdStore, force bool, info *meshstate.SnapshotInfo) (state.SnapshotSection, bool) {
	parent, ok := strings.CutSuffix(st.Prefix(), "state/")
	if !ok {
		return state.SnapshotSection{}, false
	}
	return state.SnapshotSection{Name: meshSectionName, Prefix: parent + "connect/", Ranges: meshstate.DurableKeys(),
		Prepare: func(snap, live map[string][]byte) (map[string][]byte, error) {
			out, i, err := meshstate.PrepareRestore(snap, live, force)
			if errors.Is(err, meshstate.ErrOtherCA) {
				return nil, fmt.Errorf("%w: %w", state.ErrSnapshotCluster, err)
			}
			if info != nil {
				*info = i
			}
			return out, err
		}}, true
}

// snapshotSections are the sections a server's snapshots carry.
func snapshotSections(st *state.EtcdStore, force bool, info *meshstate.SnapshotInfo) []state.SnapshotSection {
	if sec, ok := meshSection(st, force, info); ok {
		return []state.SnapshotSection{sec}
	}
	return nil
}

// SaveSnapshot implements api.SnapshotBackend: any server can save one.
// It reads the scheduler state and the mesh state's durable keys (the
// intentions and the CA, root private keys included: the snapshot is as
// secret as the CA) at one etcd revision.
func (b *Backend) SaveSnapshot(ctx context.Context, w io.Writer) error {
	st, err := b.etcdStore()
	if err != nil {
		return err
	}
	if err := st.SnapshotWith(ctx, w, state.SnapshotOptions{Sections: snapshotSections(st, false, nil)}); err != nil {
		return fmt.Errorf("failed to save a snapshot: %w", err)
	}
	return nil
}

// RestoreSnapshot implements api.SnapshotBackend: only the leader
// restores (the store's leader guard refuses it otherwise too); a damaged
// snapshot, one of another cluster (or whose CA is of another trust
// domain) without opts.Force, or a restore on a follower is refused as
// ErrInvalid and changes nothing.
//
// The scheduler state and the mesh state's intentions and CA are restored
// together (see state.EtcdStore.Restore for the order when etcd's limits
// split it). A snapshot saved before snapshots carried the mesh state
// restores the scheduler state and leaves the mesh state as it is. Every
// server's CA reloads the restored roots through its mesh feed (leaves are
// re-issued when they changed), and every agent's mirror takes up the
// restored intentions. A CA of another trust domain (a forced restore) is
// written, but running servers keep the CA they loaded until restarted:
// the restore then answers an error that says so.
func (b *Backend) RestoreSnapshot(ctx context.Context, r io.Reader, opts api.SnapshotRestoreOptions) error {
	st, err := b.etcdStore()
	if err != nil {
		return err
	}
	if !b.server.IsLeader() {
		return &apiError{b.notLeader(ctx), api.ErrInvalid}
	}
	var info meshstate.SnapshotInfo
	err = st.Restore(ctx, r, state.RestoreOptions{Force: opts.Force, Sections: snapshotSections(st, opts.Force, &info)})
	switch {
	case err == nil:
		// The restored state may hold pending evaluations, reschedules
		// and drains: take them up as a new leader does.
		if rerr := b.server.Reload(); rerr != nil {
			return fmt.Errorf("restored the snapshot, but failed to evaluate its pending work: %w", rerr)
		}
		if info.PreviousClusterID != "" {
			return fmt.Errorf("restored the snapshot, whose CA is of trust domain %s (it was %s.meshlet): restart every server agent to load it; sidecars then get new certificates",
				info.TrustDomain(), info.PreviousClusterID)
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

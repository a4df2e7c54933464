package meshstate

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshlet/meshlet/catalog"
)

// allocKey is the key of one allocation's registrations.
func (s *Store) allocKey(nodeID, allocID string) string {
	return s.prefix + catalogDir + nodeID + "/" + allocID
}

// nodeDir is the prefix of every allocation key of nodeID.
func (s *Store) nodeDir(nodeID string) string { return s.prefix + catalogDir + nodeID + "/" }

// PutAlloc stores the service registrations of allocation allocID running
// on nodeID, replacing what was stored for it. Every instance must carry
// a non-empty ID and the same NodeID and AllocID (ErrInvalid otherwise).
// An empty insts deregisters the allocation (as DeleteAlloc). A value
// byte-identical to the stored one is not written again, so repeating a
// registration (anti-entropy) costs no etcd revision and no feed batch.
func (s *Store) PutAlloc(ctx context.Context, nodeID, allocID string, insts []catalog.ServiceInstance) error {
	if err := checkAllocIDs(nodeID, allocID); err != nil {
		return err
	}
	if len(insts) == 0 {
		return s.DeleteAlloc(ctx, nodeID, allocID)
	}
	key, b, err := s.encodeAlloc(nodeID, allocID, insts)
	if err != nil {
		return err
	}
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	// A Value compare on an absent key fails, so the put runs then too; a
	// transaction that writes nothing does not advance the revision.
	_, err = s.c.Txn(ctx).If(clientv3.Compare(clientv3.Value(key), "=", string(b))).
		Else(clientv3.OpPut(key, string(b))).Commit()
	if err != nil {
		return fmt.Errorf("failed to store registrations of allocation %s on node %s: %w", allocID, nodeID, err)
	}
	return nil
}

// encodeAlloc checks and encodes one allocation's registrations, returning
// the key to store them under.
func (s *Store) encodeAlloc(nodeID, allocID string, insts []catalog.ServiceInstance) (string, []byte, error) {
	if err := s.writable("register services"); err != nil {
		return "", nil, err
	}
	for i, in := range insts {
		switch {
		case in.ID == "":
			return "", nil, fmt.Errorf("%w: instance %d of allocation %s has no ID", ErrInvalid, i, allocID)
		case in.NodeID != nodeID || in.AllocID != allocID:
			return "", nil, fmt.Errorf("%w: instance %s belongs to node %q allocation %q, not node %q allocation %q",
				ErrInvalid, in.ID, in.NodeID, in.AllocID, nodeID, allocID)
		}
	}
	b, err := json.Marshal(insts)
	if err != nil {
		return "", nil, fmt.Errorf("failed to encode registrations of allocation %s: %w", allocID, err)
	}
	return s.allocKey(nodeID, allocID), b, nil
}

// DeleteAlloc removes allocation allocID's registrations; an allocation
// with none stored is not an error.
func (s *Store) DeleteAlloc(ctx context.Context, nodeID, allocID string) error {
	if err := checkAllocIDs(nodeID, allocID); err != nil {
		return err
	}
	if err := s.writable("deregister services"); err != nil {
		return err
	}
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	if _, err := s.c.Delete(ctx, s.allocKey(nodeID, allocID)); err != nil {
		return fmt.Errorf("failed to delete registrations of allocation %s on node %s: %w", allocID, nodeID, err)
	}
	return nil
}

// DeleteNode removes the registrations of every allocation of nodeID (the
// node went down) and returns how many allocations had some.
func (s *Store) DeleteNode(ctx context.Context, nodeID string) (removed int, err error) {
	if err := checkSegment("node ID", nodeID); err != nil {
		return 0, err
	}
	if err := s.writable("deregister a node's services"); err != nil {
		return 0, err
	}
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	resp, err := s.c.Delete(ctx, s.nodeDir(nodeID), clientv3.WithPrefix())
	if err != nil {
		return 0, fmt.Errorf("failed to delete registrations of node %s: %w", nodeID, err)
	}
	return int(resp.Deleted), nil
}

// NodeRegs returns the stored registrations of every allocation of nodeID,
// by allocation ID. An allocation whose stored value cannot be decoded is
// in the map with nil instances (and logged), so a caller repairing the
// node's registrations rewrites or deletes it.
func (s *Store) NodeRegs(ctx context.Context, nodeID string) (map[string][]catalog.ServiceInstance, error) {
	if err := checkSegment("node ID", nodeID); err != nil {
		return nil, err
	}
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	dir := s.nodeDir(nodeID)
	resp, err := s.c.Get(ctx, dir, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("failed to read registrations of node %s: %w", nodeID, err)
	}
	out := make(map[string][]catalog.ServiceInstance, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		allocID := strings.TrimPrefix(string(kv.Key), dir)
		insts, err := decodeInstances(kv.Value)
		if err != nil {
			s.logger.Warn("undecodable registrations", "key", string(kv.Key), "error", err)
		}
		out[allocID] = insts
	}
	return out, nil
}

func checkAllocIDs(nodeID, allocID string) error {
	if err := checkSegment("node ID", nodeID); err != nil {
		return err
	}
	return checkSegment("allocation ID", allocID)
}

// decodeInstances decodes one allocation's value; nil on error.
func decodeInstances(b []byte) ([]catalog.ServiceInstance, error) {
	var insts []catalog.ServiceInstance
	if err := json.Unmarshal(b, &insts); err != nil {
		return nil, fmt.Errorf("failed to decode registrations: %w", err)
	}
	return insts, nil
}

// parseAllocKey splits the part of a catalog key after catalogDir.
func parseAllocKey(rest string) (nodeID, allocID string, ok bool) {
	nodeID, allocID, ok = strings.Cut(rest, "/")
	return nodeID, allocID, ok && nodeID != "" && allocID != "" && !strings.Contains(allocID, "/")
}

// PutExternal stores an instance registered through /v1/catalog/register
// (a service outside the mesh) as the one instance of its allocation
// inst.AllocID on its external node inst.NodeID.
//
// Instance IDs are the catalog's key, across nodes: an ID another external
// node registered is refused (catalog.ErrIDTaken), as is one of the IDs
// meshlet gives the instances of jobs, so a registration cannot replace
// another node's instance or a mesh service's.
func (s *Store) PutExternal(ctx context.Context, inst catalog.ServiceInstance) error {
	if err := checkExternal(inst); err != nil {
		return err
	}
	if err := catalog.CheckExternalID(inst.ID); err != nil {
		return err
	}
	key, b, err := s.encodeAlloc(inst.NodeID, inst.AllocID, []catalog.ServiceInstance{inst})
	if err != nil {
		return err
	}
	// The ID check and the write are one transaction: the write only
	// lands if no external registration changed since the check read them
	// (a registration of the same ID elsewhere in between makes it read
	// again and refuse).
	for attempt := 0; ; attempt++ {
		owner, rev, cur, err := s.externalIDOwner(ctx, inst.ID, key)
		if err != nil {
			return err
		}
		if owner != "" && owner != inst.NodeID {
			return catalog.IDTakenBy(inst.ID, strings.TrimPrefix(owner, catalog.ExternalNodePrefix))
		}
		if bytes.Equal(cur, b) {
			return nil // as stored: no revision, no feed batch (as PutAlloc)
		}
		if s.externalChecked != nil {
			s.externalChecked()
		}
		ok, err := s.putIfExternalsAt(ctx, key, b, rev)
		if err != nil || ok {
			return err
		}
		if attempt+1 == maxWriteTries {
			return fmt.Errorf("failed to register %s: %w after %d tries", inst.ID, ErrConflict, maxWriteTries)
		}
	}
}

// putIfExternalsAt stores b at key when no external registration was
// written after revision rev; false when one was.
func (s *Store) putIfExternalsAt(ctx context.Context, key string, b []byte, rev int64) (bool, error) {
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	dir := s.prefix + catalogDir + catalog.ExternalNodePrefix
	resp, err := s.c.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(dir), "<", rev+1).WithPrefix()).
		Then(clientv3.OpPut(key, string(b))).Commit()
	if err != nil {
		return false, fmt.Errorf("failed to store the external registration %s: %w", key, err)
	}
	return resp.Succeeded, nil
}

// externalIDOwner is the external node holding an instance with ID id, or
// "" when none does, the store revision it was read at, and key's value.
func (s *Store) externalIDOwner(ctx context.Context, id, key string) (owner string, rev int64, cur []byte, err error) {
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	dir := s.prefix + catalogDir + catalog.ExternalNodePrefix
	resp, err := s.c.Get(ctx, dir, clientv3.WithPrefix())
	if err != nil {
		return "", 0, nil, fmt.Errorf("failed to read the external registrations: %w", err)
	}
	for _, kv := range resp.Kvs {
		if string(kv.Key) == key {
			cur = kv.Value
		}
		insts, _ := decodeInstances(kv.Value)
		for _, in := range insts {
			if in.ID == id && owner == "" {
				owner = in.NodeID
			}
		}
	}
	return owner, resp.Header.Revision, cur, nil
}

// DeleteExternal removes what PutExternal stored for inst's allocation;
// none stored is not an error. A non-nil pre judges the instances about
// to be removed (none when the stored value cannot be decoded) in the same
// compare-and-swap as the delete: its error fails the delete, unchanged,
// and nothing is removed. pre is not called when nothing is stored.
func (s *Store) DeleteExternal(ctx context.Context, inst catalog.ServiceInstance, pre func(stored []catalog.ServiceInstance) error) error {
	if err := checkExternal(inst); err != nil {
		return err
	}
	if pre == nil {
		return s.DeleteAlloc(ctx, inst.NodeID, inst.AllocID)
	}
	if err := checkAllocIDs(inst.NodeID, inst.AllocID); err != nil {
		return err
	}
	if err := s.writable("deregister services"); err != nil {
		return err
	}
	key := s.allocKey(inst.NodeID, inst.AllocID)
	for try := 0; try < maxWriteTries; try++ {
		if !retryWait(ctx, try) {
			return fmt.Errorf("failed to deregister %s: %w", inst.ID, ctx.Err())
		}
		ok, err := s.deleteJudged(ctx, key, pre)
		if err != nil || ok {
			return err
		}
	}
	return fmt.Errorf("failed to deregister %s: %w after %d tries", inst.ID, ErrConflict, maxWriteTries)
}

// deleteJudged deletes key if pre allows what it holds and nobody wrote
// it since it was read; false when somebody did.
func (s *Store) deleteJudged(ctx context.Context, key string, pre func([]catalog.ServiceInstance) error) (bool, error) {
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	resp, err := s.c.Get(ctx, key)
	if err != nil {
		return false, fmt.Errorf("failed to read the external registration %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return true, nil
	}
	kv := resp.Kvs[0]
	insts, _ := decodeInstances(kv.Value)
	if err := pre(insts); err != nil {
		return false, err
	}
	t, err := s.c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)).
		Then(clientv3.OpDelete(key)).Commit()
	if err != nil {
		return false, fmt.Errorf("failed to delete the external registration %s: %w", key, err)
	}
	return t.Succeeded, nil
}

func checkExternal(inst catalog.ServiceInstance) error {
	if !strings.HasPrefix(inst.NodeID, catalog.ExternalNodePrefix) || inst.NodeID == catalog.ExternalNodePrefix {
		return fmt.Errorf("%w: node %q is not an external node (%s<name>)", ErrInvalid, inst.NodeID, catalog.ExternalNodePrefix)
	}
	if inst.Kind != "" {
		return fmt.Errorf("%w: an external service cannot be of kind %q", ErrInvalid, inst.Kind)
	}
	return nil
}

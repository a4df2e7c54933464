package meshstate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshlet/meshlet/ca"
)

// CAStorage returns the CA's storage in etcd: the public state at
// ca/roots and each root's private key at ca/keys/<root-id>, written
// together in one transaction guarded by ca/roots' revision.
func (s *Store) CAStorage() ca.Storage { return caStorage{s: s} }

type caStorage struct{ s *Store }

var _ ca.Storage = caStorage{}

// storedRoots is the value of ca/roots: the CA's state without keys.
type storedRoots struct {
	ClusterID string
	Index     uint64
	Roots     []storedRoot
}

type storedRoot struct {
	ca.Root
	RotatedOutAt time.Time `json:",omitempty"`
}

// Load implements ca.Storage: it reads ca/roots and every key in one
// revision. No ca/roots is (nil, nil) unless keys are stored without it
// (ca.ErrStateMissing); an undecodable value or a root without its key is
// ca.ErrStateCorrupt.
func (cs caStorage) Load(ctx context.Context) (*ca.StoredState, error) {
	s := cs.s
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	resp, err := s.c.Get(ctx, s.key(caDir), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("failed to read CA state: %w", err)
	}
	var rootsKV *mvccpb.KeyValue
	keys := map[string]string{}
	for _, kv := range resp.Kvs {
		switch k := string(kv.Key); {
		case k == s.key(caRootsKey):
			rootsKV = kv
		case strings.HasPrefix(k, s.key(caKeysDir)):
			keys[strings.TrimPrefix(k, s.key(caKeysDir))] = string(kv.Value)
		}
	}
	if rootsKV == nil {
		if len(keys) > 0 {
			return nil, fmt.Errorf("%w: etcd key %s is gone but %d root keys are stored under %s", ca.ErrStateMissing,
				s.key(caRootsKey), len(keys), s.key(caKeysDir))
		}
		return nil, nil
	}
	sr, err := s.decodeRoots(rootsKV.Value)
	if err != nil {
		return nil, err
	}
	st, missing := sr.withKeys(keys)
	if missing != "" {
		return nil, fmt.Errorf("%w: etcd key %s (the private key of root %s) is missing", ca.ErrStateCorrupt, s.key(caKeysDir+missing), missing)
	}
	st.Revision = rootsKV.ModRevision
	return st, nil
}

// withKeys is the CA state sr describes with each root's private key
// from keys (by root ID); missing is the ID of the first root without one
// ("" when none is missing: st is complete).
func (sr storedRoots) withKeys(keys map[string]string) (st *ca.StoredState, missing string) {
	st = &ca.StoredState{ClusterID: sr.ClusterID, Index: sr.Index, Roots: make([]ca.StoredRoot, 0, len(sr.Roots))}
	for _, r := range sr.Roots {
		pem, ok := keys[r.ID]
		if !ok || pem == "" {
			return nil, r.ID
		}
		st.Roots = append(st.Roots, ca.StoredRoot{Root: r.Root, PrivateKeyPEM: pem, RotatedOutAt: r.RotatedOutAt})
	}
	return st, ""
}

// Save implements ca.Storage: one transaction puts ca/roots, the keys of
// roots new in next and deletes the keys of roots prev had and next has
// not, if ca/roots is still at prev.Revision (absent when prev is nil).
func (cs caStorage) Save(ctx context.Context, prev, next *ca.StoredState) error {
	s := cs.s
	if err := checkStoredState(next); err != nil {
		return err
	}
	if err := s.writable("save the CA state"); err != nil {
		return err
	}
	sr := storedRoots{ClusterID: next.ClusterID, Index: next.Index, Roots: make([]storedRoot, 0, len(next.Roots))}
	for _, r := range next.Roots {
		sr.Roots = append(sr.Roots, storedRoot{Root: r.Root, RotatedOutAt: r.RotatedOutAt})
	}
	b, err := json.Marshal(sr)
	if err != nil {
		return fmt.Errorf("failed to encode CA state: %w", err)
	}
	rootsKey := s.key(caRootsKey)
	cmp := clientv3.Compare(clientv3.CreateRevision(rootsKey), "=", 0)
	old := map[string]string{}
	if prev != nil {
		cmp = clientv3.Compare(clientv3.ModRevision(rootsKey), "=", prev.Revision)
		for _, r := range prev.Roots {
			old[r.ID] = r.PrivateKeyPEM
		}
	}
	ops := []clientv3.Op{clientv3.OpPut(rootsKey, string(b))}
	for _, r := range next.Roots {
		if pem, ok := old[r.ID]; !ok || pem != r.PrivateKeyPEM {
			ops = append(ops, clientv3.OpPut(s.key(caKeysDir+r.ID), r.PrivateKeyPEM))
		}
		delete(old, r.ID)
	}
	for id := range old {
		ops = append(ops, clientv3.OpDelete(s.key(caKeysDir+id)))
	}
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	resp, err := s.c.Txn(ctx).If(cmp).Then(ops...).Commit()
	if err != nil {
		return fmt.Errorf("failed to store CA state: %w", err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("failed to store CA state: %w (etcd key %s)", ca.ErrStateConflict, rootsKey)
	}
	next.Revision = resp.Header.Revision
	return nil
}

// checkStoredState rejects a state Load could not read back.
func checkStoredState(st *ca.StoredState) error {
	if st == nil {
		return errors.New("failed to store CA state: no state")
	}
	if st.ClusterID == "" {
		return fmt.Errorf("failed to store CA state: %w: empty cluster ID", ErrInvalid)
	}
	seen := map[string]bool{}
	for _, r := range st.Roots {
		if err := checkSegment("root ID", r.ID); err != nil {
			return fmt.Errorf("failed to store CA state: %w", err)
		}
		if seen[r.ID] || r.PrivateKeyPEM == "" {
			return fmt.Errorf("failed to store CA state: %w: root %s is duplicate or has no private key", ErrInvalid, r.ID)
		}
		seen[r.ID] = true
	}
	return nil
}

// decodeRoots decodes ca/roots (decodeStoredRoots); an error wraps
// ca.ErrStateCorrupt and names the key.
func (s *Store) decodeRoots(b []byte) (storedRoots, error) {
	sr, err := decodeStoredRoots(b)
	if err != nil {
		return storedRoots{}, fmt.Errorf("%w: etcd key %s: %w", ca.ErrStateCorrupt, s.key(caRootsKey), err)
	}
	return sr, nil
}

// decodeStoredRoots decodes a ca/roots value, which must have a cluster
// ID. It is the one decoder of the value (etcd reads, snapshots).
func decodeStoredRoots(b []byte) (storedRoots, error) {
	var sr storedRoots
	if b == nil {
		return sr, errors.New("no value")
	}
	if err := json.Unmarshal(b, &sr); err != nil {
		return storedRoots{}, err
	}
	if sr.ClusterID == "" {
		return storedRoots{}, errors.New("no cluster ID")
	}
	return sr, nil
}

// publicRoots are the roots a feed carries: no keys.
func (sr storedRoots) publicRoots() *ca.Roots {
	out := &ca.Roots{TrustDomain: ca.TrustDomainOf(sr.ClusterID), Roots: make([]ca.Root, 0, len(sr.Roots))}
	for _, r := range sr.Roots {
		if r.Active {
			out.ActiveRootID = r.ID
		}
		out.Roots = append(out.Roots, r.Root)
	}
	return out
}

package aclstate

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/google/uuid"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshlet/meshlet/acl"
)

// Bootstrap stores tok as the cluster's first management token if no
// bootstrap was ever made, else fails with acl.ErrBootstrapDone; of two
// servers racing, exactly one succeeds. Empty fields are filled as by
// UpsertToken's create (an accessor ID, a secret, the create time, type
// management); a client type is refused. The returned token carries the
// secret (SecretID) when it is known.
func (s *EtcdStore) Bootstrap(ctx context.Context, tok *acl.Token) (*acl.Token, error) {
	in := acl.Token{}
	if tok != nil {
		in = *tok
	}
	if in.Type == "" {
		in.Type = acl.TypeManagement
	}
	if in.Type != acl.TypeManagement {
		return nil, fmt.Errorf("%w: the bootstrap token must be a management token", acl.ErrInvalid)
	}
	t, err := s.prepareNew(&in)
	if err != nil {
		return nil, err
	}
	rec, _ := json.Marshal(bootstrapRecord{AccessorID: t.AccessorID, Time: t.CreateTime}) // cannot fail
	bk := s.key(bootstrapKey)
	subs := []string{bootstrapKey, tokensDir + t.AccessorID, secretsDir + t.SecretHash}
	rev, err := s.update(ctx, "bootstrap ACLs", subs, nil, func(st state) (txn, error) {
		if st.get(bootstrapKey) != nil {
			return txn{}, fmt.Errorf("failed to bootstrap ACLs: %w", acl.ErrBootstrapDone)
		}
		if err := checkUnused(st, t); err != nil {
			return txn{}, err
		}
		return txn{
			cmps: []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(bk), "=", 0)},
			ops:  append([]clientv3.Op{clientv3.OpPut(bk, string(rec))}, s.createOps(t)...),
		}, nil
	})
	if err != nil {
		return nil, err
	}
	t.CreateIndex, t.ModifyIndex = rev, rev
	s.log.Info("ACL bootstrap done", "accessor_id", t.AccessorID, "index", rev)
	return t, nil
}

// UpsertToken creates a token (CreateIndex 0: it was never stored) or
// updates one.
//
// A create keeps a given accessor ID (Nomad's token upload; it must be
// unused) or fills one, takes its secret from SecretID (or a
// SecretHash alone) or makes one, stamps CreateTime when zero and returns
// the token with its SecretID when the secret is known. An update needs
// the accessor to exist (else acl.ErrNotFound) and keeps its secret hash
// and create time; a SecretID or SecretHash that does not match the
// stored secret is refused. Either way the type must be client (with at
// least one policy, each of which must exist) or management (no
// policies); refusals wrap acl.ErrInvalid.
func (s *EtcdStore) UpsertToken(ctx context.Context, tok *acl.Token) (*acl.Token, error) {
	if tok == nil {
		return nil, fmt.Errorf("%w: no token", acl.ErrInvalid)
	}
	if tok.AccessorID == "" || tok.CreateIndex == 0 {
		return s.createToken(ctx, tok)
	}
	return s.updateToken(ctx, tok)
}

func (s *EtcdStore) createToken(ctx context.Context, tok *acl.Token) (*acl.Token, error) {
	t, err := s.prepareNew(tok)
	if err != nil {
		return nil, err
	}
	tk, sk := tokensDir+t.AccessorID, secretsDir+t.SecretHash
	rev, err := s.update(ctx, "create ACL token "+t.AccessorID, []string{tk, sk}, []string{policiesDir},
		func(st state) (txn, error) {
			if err := checkUnused(st, t); err != nil {
				return txn{}, err
			}
			if err := s.policiesExist(st, t.Policies); err != nil {
				return txn{}, err
			}
			return txn{ops: s.createOps(t)}, nil
		})
	if err != nil {
		return nil, err
	}
	t.CreateIndex, t.ModifyIndex = rev, rev
	s.log.Debug("created ACL token", "accessor_id", t.AccessorID, "type", t.Type, "index", rev)
	return t, nil
}

func (s *EtcdStore) updateToken(ctx context.Context, tok *acl.Token) (*acl.Token, error) {
	if err := checkAccessorID(tok.AccessorID); err != nil {
		return nil, err
	}
	tk := tokensDir + tok.AccessorID
	var out *acl.Token
	rev, err := s.update(ctx, "update ACL token "+tok.AccessorID, []string{tk}, []string{policiesDir},
		func(st state) (txn, error) {
			kv := st.get(tk)
			if kv == nil {
				return txn{}, fmt.Errorf("failed to update ACL token %s: %w", tok.AccessorID, acl.ErrNotFound)
			}
			cur, err := decodeToken(kv, tok.AccessorID)
			if err != nil {
				return txn{}, err
			}
			if out, err = mergeUpdate(cur, tok); err != nil {
				return txn{}, err
			}
			if err := s.policiesExist(st, out.Policies); err != nil {
				return txn{}, err
			}
			return txn{ops: []clientv3.Op{clientv3.OpPut(s.key(tk), encodeToken(out))}}, nil
		})
	if err != nil {
		return nil, err
	}
	out.ModifyIndex = rev
	s.log.Debug("updated ACL token", "accessor_id", out.AccessorID, "type", out.Type, "index", rev)
	return out, nil
}

// mergeUpdate is the token an update of cur with in stores: in's fields
// with cur's secret hash, create time and create index.
func mergeUpdate(cur, in *acl.Token) (*acl.Token, error) {
	if (in.SecretID != "" && acl.HashSecret(in.SecretID) != cur.SecretHash) ||
		(in.SecretHash != "" && in.SecretHash != cur.SecretHash) {
		return nil, fmt.Errorf("%w: the secret of token %s cannot change", acl.ErrInvalid, cur.AccessorID)
	}
	t := *in
	t.SecretID = ""
	t.SecretHash, t.CreateTime, t.CreateIndex = cur.SecretHash, cur.CreateTime, cur.CreateIndex
	t.AllocID, t.TaskName = cur.AllocID, cur.TaskName // a workload binding never moves
	t.Policies = slices.Clone(in.Policies)
	t.ServiceIdentities = slices.Clone(in.ServiceIdentities)
	if err := checkTokenFields(&t); err != nil {
		return nil, err
	}
	return &t, nil
}

// prepareNew is the token a create stores (and hands back): in with its
// empty fields filled and its fields checked.
func (s *EtcdStore) prepareNew(in *acl.Token) (*acl.Token, error) {
	t := *in
	t.Policies = slices.Clone(in.Policies)
	t.ServiceIdentities = slices.Clone(in.ServiceIdentities)
	t.CreateIndex, t.ModifyIndex = 0, 0
	if t.AccessorID == "" {
		t.AccessorID = uuid.NewString()
	}
	if err := checkAccessorID(t.AccessorID); err != nil {
		return nil, err
	}
	switch {
	case t.SecretID != "":
		h := acl.HashSecret(t.SecretID)
		if t.SecretHash != "" && t.SecretHash != h {
			return nil, fmt.Errorf("%w: SecretHash is not the hash of SecretID", acl.ErrInvalid)
		}
		t.SecretHash = h
	case t.SecretHash != "":
		if !validSecretHash(t.SecretHash) {
			return nil, fmt.Errorf("%w: SecretHash must be %d lowercase hex digits", acl.ErrInvalid, secretHashHexLen)
		}
	default:
		t.SecretID = acl.NewSecret()
		t.SecretHash = acl.HashSecret(t.SecretID)
	}
	now := s.opts.Now().UTC()
	if t.CreateTime.IsZero() {
		t.CreateTime = now
	}
	if t.ExpirationTime != nil && !t.ExpirationTime.After(now) {
		return nil, fmt.Errorf("%w: the token would be expired already", acl.ErrInvalid)
	}
	if err := checkTokenFields(&t); err != nil {
		return nil, err
	}
	return &t, nil
}

// checkUnused refuses a new token whose accessor ID or secret is in use
// in st (which holds their keys).
func checkUnused(st state, t *acl.Token) error {
	switch {
	case st.get(tokensDir+t.AccessorID) != nil:
		return fmt.Errorf("%w: accessor ID %s is in use", acl.ErrInvalid, t.AccessorID)
	case st.get(secretsDir+t.SecretHash) != nil:
		return fmt.Errorf("%w: the secret is in use by another token", acl.ErrInvalid)
	}
	return nil
}

// createOps writes a new token and its secrets/ key.
func (s *EtcdStore) createOps(t *acl.Token) []clientv3.Op {
	return []clientv3.Op{
		clientv3.OpPut(s.key(tokensDir+t.AccessorID), encodeToken(t)),
		clientv3.OpPut(s.key(secretsDir+t.SecretHash), t.AccessorID),
	}
}

// policiesExist refuses names that no policy of st has, as Nomad does.
func (s *EtcdStore) policiesExist(st state, names []string) error {
	have := make(map[string]bool, len(st.dirs[policiesDir]))
	for _, kv := range st.dirs[policiesDir] {
		have[s.lastSegment(kv, policiesDir)] = true
	}
	for _, n := range names {
		if !have[n] {
			return fmt.Errorf("%w: policy %q does not exist", acl.ErrInvalid, n)
		}
	}
	return nil
}

// DeleteToken removes a token and its secret; a missing accessor is
// acl.ErrNotFound. A token whose stored value is corrupt is removed too
// (its secrets/ key, which cannot be found, is left and logged).
func (s *EtcdStore) DeleteToken(ctx context.Context, accessorID string) error {
	if checkAccessorID(accessorID) != nil {
		return fmt.Errorf("failed to delete ACL token %.140q: %w", accessorID, acl.ErrNotFound)
	}
	tk := tokensDir + accessorID
	_, err := s.update(ctx, "delete ACL token "+accessorID, []string{tk}, nil, func(st state) (txn, error) {
		kv := st.get(tk)
		if kv == nil {
			return txn{}, fmt.Errorf("failed to delete ACL token %s: %w", accessorID, acl.ErrNotFound)
		}
		ops := []clientv3.Op{clientv3.OpDelete(s.key(tk))}
		cur, err := decodeToken(kv, accessorID)
		if err != nil {
			s.log.Warn("deleting a corrupt ACL token; its secret's key is left", "accessor_id", accessorID, "error", err)
			return txn{ops: ops}, nil
		}
		return txn{ops: append(ops, clientv3.OpDelete(s.key(secretsDir+cur.SecretHash)))}, nil
	})
	if err == nil {
		s.log.Debug("deleted ACL token", "accessor_id", accessorID)
	}
	return err
}

// Token returns the token of an accessor ID (without its secret) or an
// error wrapping acl.ErrNotFound.
func (s *EtcdStore) Token(ctx context.Context, accessorID string) (*acl.Token, error) {
	if checkAccessorID(accessorID) != nil {
		return nil, fmt.Errorf("failed to read ACL token %.140q: %w", accessorID, acl.ErrNotFound)
	}
	kv, err := s.getOne(ctx, tokensDir+accessorID)
	if err != nil {
		return nil, fmt.Errorf("failed to read ACL token %s: %w", accessorID, err)
	}
	if kv == nil {
		return nil, fmt.Errorf("failed to read ACL token %s: %w", accessorID, acl.ErrNotFound)
	}
	return decodeToken(kv, accessorID)
}

// TokenBySecretHash returns the token whose secret hashes to hash; no
// such token, or an expired one, is acl.ErrTokenNotFound. The hash is
// never logged nor put in an error.
func (s *EtcdStore) TokenBySecretHash(ctx context.Context, hash string) (*acl.Token, error) {
	if !validSecretHash(hash) {
		return nil, fmt.Errorf("failed to resolve ACL token: %w", acl.ErrTokenNotFound)
	}
	skv, err := s.getOne(ctx, secretsDir+hash)
	if err != nil {
		return nil, fmt.Errorf("failed to resolve ACL token: %w", err)
	}
	if skv == nil {
		return nil, fmt.Errorf("failed to resolve ACL token: %w", acl.ErrTokenNotFound)
	}
	accessor := string(skv.Value)
	if checkAccessorID(accessor) != nil {
		return nil, fmt.Errorf("%w: a key under %s holds no accessor ID", ErrCorrupt, s.key(secretsDir))
	}
	tkv, err := s.getOne(ctx, tokensDir+accessor)
	if err != nil {
		return nil, fmt.Errorf("failed to resolve ACL token %s: %w", accessor, err)
	}
	if tkv == nil { // deleted since
		return nil, fmt.Errorf("failed to resolve ACL token: %w", acl.ErrTokenNotFound)
	}
	t, err := decodeToken(tkv, accessor)
	if err != nil {
		return nil, err
	}
	switch {
	case t.SecretHash != hash:
		return nil, fmt.Errorf("%w: token %s does not have the secret its secrets key maps to it", ErrCorrupt, accessor)
	case t.Expired(s.opts.Now()):
		return nil, fmt.Errorf("failed to resolve ACL token: %w (token %s expired)", acl.ErrTokenNotFound, accessor)
	}
	return t, nil
}

// ListTokens returns every token (without secrets), by accessor ID, and
// the ACL index.
func (s *EtcdStore) ListTokens(ctx context.Context) ([]*acl.Token, uint64, error) {
	kvs, index, err := s.list(ctx, tokensDir)
	if err != nil {
		return nil, 0, fmt.Errorf("failed to list ACL tokens: %w", err)
	}
	out := make([]*acl.Token, 0, len(kvs))
	for _, kv := range kvs {
		t, err := decodeToken(kv, s.lastSegment(kv, tokensDir))
		if err != nil {
			return nil, 0, err
		}
		out = append(out, t)
	}
	return out, index, nil
}

// getOne reads one key; nil when absent.
func (s *EtcdStore) getOne(ctx context.Context, sub string) (*mvccpb.KeyValue, error) {
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	resp, err := s.c.Get(ctx, s.key(sub))
	if err != nil {
		return nil, err
	}
	if len(resp.Kvs) == 0 {
		return nil, nil
	}
	return resp.Kvs[0], nil
}

package aclstate

import (
	"context"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshlet/meshlet/acl"
)

// policiesPerTxn bounds the reads of one Policies transaction (etcd's
// default limit of operations per transaction is 128).
const policiesPerTxn = 64

// UpsertPolicy creates or replaces the policy p.Name after checking its
// name, description and rules (Options.ValidateRules). It returns the
// stored policy with its indexes.
func (s *EtcdStore) UpsertPolicy(ctx context.Context, p *acl.Policy) (*acl.Policy, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: no policy", acl.ErrInvalid)
	}
	if err := s.checkPolicy(p); err != nil {
		return nil, err
	}
	sub := policiesDir + p.Name
	val := encodePolicy(p)
	var created int64
	rev, err := s.update(ctx, "write ACL policy "+p.Name, []string{sub}, nil, func(st state) (txn, error) {
		created = 0
		if cur := st.get(sub); cur != nil {
			created = cur.CreateRevision
		}
		return txn{ops: []clientv3.Op{clientv3.OpPut(s.key(sub), val)}}, nil
	})
	if err != nil {
		return nil, err
	}
	s.log.Debug("wrote ACL policy", "policy", p.Name, "index", rev)
	out := &acl.Policy{Name: p.Name, Description: p.Description, Rules: p.Rules, CreateIndex: rev, ModifyIndex: rev}
	if created != 0 {
		out.CreateIndex = uint64(created)
	}
	return out, nil
}

// checkPolicy checks a policy before it is written.
func (s *EtcdStore) checkPolicy(p *acl.Policy) error {
	if err := checkPolicyName(p.Name); err != nil {
		return err
	}
	if len(p.Description) > maxDescriptionLen {
		return fmt.Errorf("%w: policy %s: description longer than %d bytes", acl.ErrInvalid, p.Name, maxDescriptionLen)
	}
	if len(p.Rules) > maxRulesBytes {
		return fmt.Errorf("%w: policy %s: rules longer than %d bytes", acl.ErrInvalid, p.Name, maxRulesBytes)
	}
	if s.opts.ValidateRules != nil {
		if err := s.opts.ValidateRules(p.Rules); err != nil {
			return fmt.Errorf("%w: policy %s: %w", acl.ErrInvalid, p.Name, err)
		}
	}
	return nil
}

// DeletePolicy removes the named policy; a missing one is acl.ErrNotFound.
// Tokens that name it keep the name (resolution skips it, as Nomad's).
func (s *EtcdStore) DeletePolicy(ctx context.Context, name string) error {
	if err := checkPolicyName(name); err != nil {
		return err
	}
	sub := policiesDir + name
	_, err := s.update(ctx, "delete ACL policy "+name, []string{sub}, nil, func(st state) (txn, error) {
		if st.get(sub) == nil {
			return txn{}, fmt.Errorf("failed to delete ACL policy %s: %w", name, acl.ErrNotFound)
		}
		return txn{ops: []clientv3.Op{clientv3.OpDelete(s.key(sub))}}, nil
	})
	if err == nil {
		s.log.Debug("deleted ACL policy", "policy", name)
	}
	return err
}

// Policy returns the named policy or an error wrapping acl.ErrNotFound.
func (s *EtcdStore) Policy(ctx context.Context, name string) (*acl.Policy, error) {
	if checkPolicyName(name) != nil {
		return nil, fmt.Errorf("failed to read ACL policy %.140q: %w", name, acl.ErrNotFound)
	}
	kv, err := s.getOne(ctx, policiesDir+name)
	if err != nil {
		return nil, fmt.Errorf("failed to read ACL policy %s: %w", name, err)
	}
	if kv == nil {
		return nil, fmt.Errorf("failed to read ACL policy %s: %w", name, acl.ErrNotFound)
	}
	return decodePolicy(kv, name)
}

// Policies returns the named policies that exist, in the order of names
// (repeats once); missing and malformed names are skipped.
func (s *EtcdStore) Policies(ctx context.Context, names []string) ([]*acl.Policy, error) {
	var valid []string
	for _, n := range dedup(names) {
		if checkPolicyName(n) == nil {
			valid = append(valid, n)
		}
	}
	out := make([]*acl.Policy, 0, len(valid))
	for len(valid) > 0 {
		chunk := valid[:min(len(valid), policiesPerTxn)]
		valid = valid[len(chunk):]
		st, err := s.read(ctx, prefixed(policiesDir, chunk), nil)
		if err != nil {
			return nil, fmt.Errorf("failed to read ACL policies: %w", err)
		}
		for _, n := range chunk {
			kv := st.get(policiesDir + n)
			if kv == nil {
				continue
			}
			p, err := decodePolicy(kv, n)
			if err != nil {
				return nil, err
			}
			out = append(out, p)
		}
	}
	return out, nil
}

// ListPolicies returns every policy, by name, and the ACL index.
func (s *EtcdStore) ListPolicies(ctx context.Context) ([]*acl.Policy, uint64, error) {
	kvs, index, err := s.list(ctx, policiesDir)
	if err != nil {
		return nil, 0, fmt.Errorf("failed to list ACL policies: %w", err)
	}
	out := make([]*acl.Policy, 0, len(kvs))
	for _, kv := range kvs {
		p, err := decodePolicy(kv, s.lastSegment(kv, policiesDir))
		if err != nil {
			return nil, 0, err
		}
		out = append(out, p)
	}
	return out, index, nil
}

// list reads every key under dir and the index key at one revision.
func (s *EtcdStore) list(ctx context.Context, dir string) ([]*mvccpb.KeyValue, uint64, error) {
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	resp, err := s.c.Txn(ctx).Then(
		clientv3.OpGet(s.key(indexKey)),
		clientv3.OpGet(s.key(dir), clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return nil, 0, err
	}
	var index uint64
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		index = uint64(kvs[0].ModRevision)
	}
	return resp.Responses[1].GetResponseRange().Kvs, index, nil
}

// prefixed returns dir+name for each name.
func prefixed(dir string, names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = dir + n
	}
	return out
}

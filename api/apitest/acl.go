package apitest

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/meshlet/meshlet/acl"
)

// ACLStore is an in-memory acl.Store for tests of the HTTP layers: tokens
// by accessor, policies by name, one index bumped by every write. It is
// safe for concurrent use and returns copies.
type ACLStore struct {
	mu           sync.Mutex
	index        uint64
	bootstrapped bool
	tokens       map[string]*acl.Token
	policies     map[string]*acl.Policy
}

var _ acl.Store = (*ACLStore)(nil)

// NewACLStore returns an empty store.
func NewACLStore() *ACLStore {
	return &ACLStore{tokens: map[string]*acl.Token{}, policies: map[string]*acl.Policy{}}
}

// TokenBySecretHash implements acl.Reader.
func (s *ACLStore) TokenBySecretHash(_ context.Context, hash string) (*acl.Token, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.tokens {
		if t.SecretHash == hash {
			return copyToken(t), nil
		}
	}
	return nil, acl.ErrTokenNotFound
}

// Policies implements acl.Reader: missing names are skipped.
func (s *ACLStore) Policies(_ context.Context, names []string) ([]*acl.Policy, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*acl.Policy
	for _, n := range names {
		if p, ok := s.policies[n]; ok {
			cp := *p
			out = append(out, &cp)
		}
	}
	return out, nil
}

// Bootstrap stores tok once; later calls fail with acl.ErrBootstrapDone.
func (s *ACLStore) Bootstrap(ctx context.Context, tok *acl.Token) (*acl.Token, error) {
	s.mu.Lock()
	done := s.bootstrapped
	s.bootstrapped = true
	s.mu.Unlock()
	if done {
		return nil, acl.ErrBootstrapDone
	}
	out, err := s.UpsertToken(ctx, tok)
	if err != nil {
		s.mu.Lock()
		s.bootstrapped = false
		s.mu.Unlock()
	}
	return out, err
}

// UpsertPolicy stores p, keeping an existing policy's CreateIndex.
func (s *ACLStore) UpsertPolicy(_ context.Context, p *acl.Policy) (*acl.Policy, error) {
	if p.Name == "" {
		return nil, fmt.Errorf("%w: empty policy name", acl.ErrInvalid)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.index++
	cp := *p
	cp.CreateIndex, cp.ModifyIndex = s.index, s.index
	if old, ok := s.policies[p.Name]; ok {
		cp.CreateIndex = old.CreateIndex
	}
	s.policies[p.Name] = &cp
	out := cp
	return &out, nil
}

// DeletePolicy removes a policy (acl.ErrNotFound when absent).
func (s *ACLStore) DeletePolicy(_ context.Context, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.policies[name]; !ok {
		return fmt.Errorf("policy %q: %w", name, acl.ErrNotFound)
	}
	delete(s.policies, name)
	s.index++
	return nil
}

// Policy returns a policy by name.
func (s *ACLStore) Policy(_ context.Context, name string) (*acl.Policy, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.policies[name]
	if !ok {
		return nil, fmt.Errorf("policy %q: %w", name, acl.ErrNotFound)
	}
	cp := *p
	return &cp, nil
}

// ListPolicies returns the policies sorted by name, and the index.
func (s *ACLStore) ListPolicies(context.Context) ([]*acl.Policy, uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*acl.Policy, 0, len(s.policies))
	for _, p := range s.policies {
		cp := *p
		out = append(out, &cp)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, s.index, nil
}

// UpsertToken stores t without its SecretID; the answer is the stored copy.
func (s *ACLStore) UpsertToken(_ context.Context, t *acl.Token) (*acl.Token, error) {
	if t.AccessorID == "" || t.SecretHash == "" {
		return nil, fmt.Errorf("%w: token needs an AccessorID and a SecretHash", acl.ErrInvalid)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.index++
	cp := copyToken(t)
	cp.SecretID = ""
	cp.CreateIndex, cp.ModifyIndex = s.index, s.index
	if old, ok := s.tokens[t.AccessorID]; ok {
		cp.CreateIndex = old.CreateIndex
	}
	s.tokens[t.AccessorID] = cp
	return copyToken(cp), nil
}

// DeleteToken removes a token (acl.ErrNotFound when absent).
func (s *ACLStore) DeleteToken(_ context.Context, accessorID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.tokens[accessorID]; !ok {
		return fmt.Errorf("token %q: %w", accessorID, acl.ErrNotFound)
	}
	delete(s.tokens, accessorID)
	s.index++
	return nil
}

// Token returns a token by accessor.
func (s *ACLStore) Token(_ context.Context, accessorID string) (*acl.Token, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tokens[accessorID]
	if !ok {
		return nil, fmt.Errorf("token %q: %w", accessorID, acl.ErrNotFound)
	}
	return copyToken(t), nil
}

// ListTokens returns the tokens sorted by accessor, and the index.
func (s *ACLStore) ListTokens(context.Context) ([]*acl.Token, uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*acl.Token, 0, len(s.tokens))
	for _, t := range s.tokens {
		out = append(out, copyToken(t))
	}
	sort.Slice(out, func(i, j int) bool { return strings.Compare(out[i].AccessorID, out[j].AccessorID) < 0 })
	return out, s.index, nil
}

// Index returns the ACL index.
func (s *ACLStore) Index(context.Context) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.index, nil
}

func copyToken(t *acl.Token) *acl.Token {
	cp := *t
	cp.Policies = slices.Clone(t.Policies)
	if t.ExpirationTime != nil {
		exp := *t.ExpirationTime
		cp.ExpirationTime = &exp
	}
	return &cp
}

// ACLResolver resolves secrets against a Reader as the agents do, but
// without compiling policies: a management token gets acl.ManagementACL,
// any other token and the anonymous one an ACL that allows nothing. Tests
// that need finer permissions grant them through the servers' authorizer
// seam.
type ACLResolver struct {
	Reader acl.Reader
}

// Resolve implements api.ACLResolver and consulapi.ACLResolver.
func (r ACLResolver) Resolve(ctx context.Context, secret string) (*acl.ACL, *acl.Token, error) {
	if secret == "" {
		return &acl.ACL{}, nil, nil
	}
	t, err := r.Reader.TokenBySecretHash(ctx, acl.HashSecret(secret))
	if err != nil {
		return nil, nil, fmt.Errorf("failed to resolve token: %w", err)
	}
	if t.Expired(time.Now()) {
		return nil, nil, acl.ErrTokenNotFound
	}
	if t.Type == acl.TypeManagement {
		return acl.ManagementACL(), t, nil
	}
	return &acl.ACL{}, t, nil
}

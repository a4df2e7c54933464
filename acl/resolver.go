package acl

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sync/singleflight"
)

// Resolver defaults.
const (
	// DefaultTokenTTL is how long a Resolver caches tokens and policies:
	// Nomad's client token TTL (acl.token_ttl, 30s).
	DefaultTokenTTL = 30 * time.Second
	// DefaultLookupTimeout bounds one shared Reader call.
	DefaultLookupTimeout = 10 * time.Second
)

// AnonymousAccessorID is the AccessorID of the pseudo-token Resolve
// returns for requests without a secret.
const AnonymousAccessorID = "anonymous"

// sweepEvery is how many cache insertions go between sweeps of the
// expired entries.
const sweepEvery = 256

// ResolverOptions configures a Resolver; the zero value is usable.
type ResolverOptions struct {
	// TTL is how long a token lookup and a policy stay cached
	// (DefaultTokenTTL when zero).
	TTL time.Duration
	// LookupTimeout bounds one Reader call (DefaultLookupTimeout when
	// zero). A call is shared by every caller waiting on the same key,
	// so it runs apart from the cancellation of the caller that started
	// it; each caller still returns when its own context ends.
	LookupTimeout time.Duration
	// Now is the clock (time.Now when nil); tests set it.
	Now func() time.Time
	// Logger gets debug lines naming accessor IDs, never secrets (a null
	// logger when nil).
	Logger hclog.Logger
}

// Resolver turns a request's secret into its ACL. It caches token
// lookups and policies for a TTL (client agents read them through RPC)
// and compiled ACLs by policy set; Invalidate drops every cache.
// Concurrent misses for the same key share one Reader call. A Resolver
// is safe for concurrent use: mu guards the caches and gen, and is never
// held across a Reader call or a compile.
type Resolver struct {
	reader  Reader
	ttl     time.Duration
	timeout time.Duration
	now     func() time.Time
	logger  hclog.Logger
	group   singleflight.Group

	mu       sync.Mutex
	gen      uint64                  // moves on Invalidate; results of older lookups are dropped
	inserts  int                     // insertions since the last sweep
	tokens   map[string]cachedToken  // by secret hash
	policies map[string]cachedPolicy // by name; a nil policy caches its absence
	acls     map[string]cachedACL    // by policySetKey
}

type cachedToken struct {
	tok     *Token
	expires time.Time
}

type cachedPolicy struct {
	p       *Policy
	expires time.Time
}

type cachedACL struct {
	acl     *ACL
	expires time.Time
}

// NewResolver returns a Resolver reading tokens and policies from r.
func NewResolver(r Reader, opts ResolverOptions) *Resolver {
	res := &Resolver{
		reader:  r,
		ttl:     opts.TTL,
		timeout: opts.LookupTimeout,
		now:     opts.Now,
		logger:  opts.Logger,
	}
	if res.ttl <= 0 {
		res.ttl = DefaultTokenTTL
	}
	if res.timeout <= 0 {
		res.timeout = DefaultLookupTimeout
	}
	if res.now == nil {
		res.now = time.Now
	}
	if res.logger == nil {
		res.logger = hclog.NewNullLogger()
	}
	res.resetLocked()
	return res
}

// Invalidate drops every cache: servers call it when the ACL index
// moves. Lookups under way when it is called do not fill the new caches.
func (r *Resolver) Invalidate() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gen++
	r.resetLocked()
}

func (r *Resolver) resetLocked() {
	r.tokens = map[string]cachedToken{}
	r.policies = map[string]cachedPolicy{}
	r.acls = map[string]cachedACL{}
	r.inserts = 0
}

// Resolve returns the ACL and token of secret. An empty secret is the
// anonymous token: the policy named AnonymousPolicy if it exists, else
// nothing allowed, with a pseudo-token whose AccessorID is
// AnonymousAccessorID. A secret naming no token, or an expired one,
// fails with an error wrapping ErrTokenNotFound. The token returned is
// the caller's copy.
func (r *Resolver) Resolve(ctx context.Context, secret string) (*ACL, *Token, error) {
	if secret == "" {
		tok := &Token{
			AccessorID: AnonymousAccessorID,
			Name:       "Anonymous Token",
			Type:       TypeClient,
			Policies:   []string{AnonymousPolicy},
		}
		a, err := r.compile(ctx, tok)
		if err != nil {
			return nil, nil, err
		}
		return a, tok, nil
	}
	cached, err := r.token(ctx, HashSecret(secret))
	if err != nil {
		return nil, nil, err
	}
	tok := *cached
	tok.Policies = slices.Clone(cached.Policies)
	tok.ServiceIdentities = slices.Clone(cached.ServiceIdentities)
	if tok.Expired(r.now()) {
		r.logger.Debug("ACL token expired", "accessor_id", tok.AccessorID)
		return nil, nil, fmt.Errorf("ACL token %s expired: %w", tok.AccessorID, ErrTokenNotFound)
	}
	if tok.Type == TypeManagement {
		return ManagementACL(), &tok, nil
	}
	a, err := r.compile(ctx, &tok)
	if err != nil {
		return nil, nil, err
	}
	return a, &tok, nil
}

// token returns the token whose secret hashes to hash, from the cache or
// the Reader. Absence is not cached: a token created after a miss is
// found at once.
func (r *Resolver) token(ctx context.Context, hash string) (*Token, error) {
	r.mu.Lock()
	gen := r.gen
	tok := r.cachedTokenLocked(hash)
	r.mu.Unlock()
	if tok != nil {
		return tok, nil
	}
	v, err := r.shared(ctx, "token/"+strconv.FormatUint(gen, 10)+"/"+hash, func(ctx context.Context) (any, error) {
		r.mu.Lock()
		tok := r.cachedTokenLocked(hash) // a flight that just ended may have filled it
		r.mu.Unlock()
		if tok != nil {
			return tok, nil
		}
		tok, err := r.reader.TokenBySecretHash(ctx, hash)
		if err != nil {
			return nil, err
		}
		if tok == nil {
			return nil, ErrTokenNotFound
		}
		r.logger.Debug("fetched ACL token", "accessor_id", tok.AccessorID)
		r.store(gen, func(now time.Time) { r.tokens[hash] = cachedToken{tok: tok, expires: now.Add(r.ttl)} })
		return tok, nil
	})
	if err != nil {
		return nil, fmt.Errorf("failed to resolve ACL token: %w", err)
	}
	return v.(*Token), nil
}

func (r *Resolver) cachedTokenLocked(hash string) *Token {
	if e, ok := r.tokens[hash]; ok && r.now().Before(e.expires) {
		return e.tok
	}
	return nil
}

// compile returns the ACL of tok's policies, sharing one compiled ACL
// among tokens with the same policy set (names and ModifyIndexes).
func (r *Resolver) compile(ctx context.Context, tok *Token) (*ACL, error) {
	policies, err := r.fetchPolicies(ctx, tok.AccessorID, tok.Policies)
	if err != nil {
		return nil, fmt.Errorf("failed to read policies of ACL token %s: %w", tok.AccessorID, err)
	}
	policies = append(policies, serviceIdentityPolicies(tok)...)
	key := policySetKey(policies)
	r.mu.Lock()
	gen := r.gen
	a := r.cachedACLLocked(key)
	r.mu.Unlock()
	if a != nil {
		return a, nil
	}
	v, err := r.shared(ctx, "acl/"+strconv.FormatUint(gen, 10)+"/"+key, func(context.Context) (any, error) {
		r.mu.Lock()
		a := r.cachedACLLocked(key)
		r.mu.Unlock()
		if a != nil {
			return a, nil
		}
		a, err := NewACL(false, policies)
		if err != nil {
			return nil, err
		}
		r.store(gen, func(now time.Time) { r.acls[key] = cachedACL{acl: a, expires: now.Add(r.ttl)} })
		return a, nil
	})
	if err != nil {
		return nil, fmt.Errorf("failed to compile policies of ACL token %s: %w", tok.AccessorID, err)
	}
	return v.(*ACL), nil
}

// cachedACLLocked returns a cached ACL and keeps it another TTL: its key
// names policy versions, so it cannot go stale, and the TTL only bounds
// how long an unused one is kept.
func (r *Resolver) cachedACLLocked(key string) *ACL {
	e, ok := r.acls[key]
	if !ok {
		return nil
	}
	e.expires = r.now().Add(r.ttl)
	r.acls[key] = e
	return e.acl
}

// policySetKey names a set of policy versions: sorted name@ModifyIndex.
func policySetKey(policies []*Policy) string {
	parts := make([]string, 0, len(policies))
	for _, p := range policies {
		parts = append(parts, p.Name+"@"+strconv.FormatUint(p.ModifyIndex, 10))
	}
	slices.Sort(parts)
	return strings.Join(parts, "\x00")
}

// fetchPolicies returns the named policies that exist, sorted by name,
// reading only the names not cached (absent ones are cached too).
// accessor names the token in logs.
func (r *Resolver) fetchPolicies(ctx context.Context, accessor string, names []string) ([]*Policy, error) {
	names = slices.Compact(slices.Sorted(slices.Values(names)))
	r.mu.Lock()
	gen := r.gen
	found, missing := r.cachedPoliciesLocked(names)
	r.mu.Unlock()
	if len(missing) == 0 {
		return found, nil
	}
	key := "policies/" + strconv.FormatUint(gen, 10) + "/" + strings.Join(missing, "\x00")
	v, err := r.shared(ctx, key, func(ctx context.Context) (any, error) {
		// A flight that just ended may have cached some of them.
		r.mu.Lock()
		got, still := r.cachedPoliciesLocked(missing)
		r.mu.Unlock()
		if len(still) > 0 {
			read, err := r.reader.Policies(ctx, still)
			if err != nil {
				return nil, err
			}
			got = append(got, r.storePolicies(gen, accessor, still, read)...)
		}
		return got, nil
	})
	if err != nil {
		return nil, err
	}
	found = append(found, v.([]*Policy)...)
	slices.SortFunc(found, func(a, b *Policy) int { return strings.Compare(a.Name, b.Name) })
	return found, nil
}

// storePolicies caches the policies read for names, and the absence of
// the names read lacks; it returns the read policies named in names.
func (r *Resolver) storePolicies(gen uint64, accessor string, names []string, read []*Policy) []*Policy {
	byName := make(map[string]*Policy, len(read))
	for _, p := range read {
		if p != nil && slices.Contains(names, p.Name) {
			byName[p.Name] = p
		}
	}
	r.store(gen, func(now time.Time) {
		for _, n := range names {
			r.policies[n] = cachedPolicy{p: byName[n], expires: now.Add(r.ttl)}
		}
	})
	var absent []string
	out := make([]*Policy, 0, len(byName))
	for _, n := range names {
		if p, ok := byName[n]; ok {
			out = append(out, p)
		} else {
			absent = append(absent, n)
		}
	}
	if len(absent) > 0 {
		r.logger.Debug("ACL token names policies that do not exist", "accessor_id", accessor, "policies", absent)
	}
	return out
}

// cachedPoliciesLocked splits names into the cached policies that exist
// and the names not cached (or expired).
func (r *Resolver) cachedPoliciesLocked(names []string) (found []*Policy, missing []string) {
	now := r.now()
	for _, n := range names {
		e, ok := r.policies[n]
		switch {
		case !ok || !now.Before(e.expires):
			missing = append(missing, n)
		case e.p != nil:
			found = append(found, e.p)
		}
	}
	return found, missing
}

// store runs fill under the lock unless Invalidate ran since gen was
// read, and now and then sweeps expired entries.
func (r *Resolver) store(gen uint64, fill func(now time.Time)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gen != gen {
		return
	}
	now := r.now()
	fill(now)
	if r.inserts++; r.inserts < sweepEvery {
		return
	}
	r.inserts = 0
	for k, e := range r.tokens {
		if !now.Before(e.expires) {
			delete(r.tokens, k)
		}
	}
	for k, e := range r.policies {
		if !now.Before(e.expires) {
			delete(r.policies, k)
		}
	}
	for k, e := range r.acls {
		if !now.Before(e.expires) {
			delete(r.acls, k)
		}
	}
}

// shared runs fn once for all concurrent callers with the same key. fn
// gets a context detached from the caller's cancellation and bounded by
// the lookup timeout; the caller returns early if its own ctx ends.
func (r *Resolver) shared(ctx context.Context, key string, fn func(context.Context) (any, error)) (any, error) {
	ch := r.group.DoChan(key, func() (any, error) {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.timeout)
		defer cancel()
		return fn(fctx)
	})
	select {
	case res := <-ch:
		return res.Val, res.Err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

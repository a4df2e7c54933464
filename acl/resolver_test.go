package acl

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// fakeReader is an in-memory Reader counting its calls. When gate is
// set, every call waits for it to close.
type fakeReader struct {
	mu       sync.Mutex
	tokens   map[string]*Token // by secret hash
	policies map[string]*Policy
	err      error // returned by every call when set

	gate         chan struct{}
	tokenCalls   atomic.Int32
	policyCalls  atomic.Int32
	policyLookup [][]string // names asked, per Policies call
}

func newFakeReader() *fakeReader {
	return &fakeReader{tokens: map[string]*Token{}, policies: map[string]*Policy{}}
}

func (f *fakeReader) TokenBySecretHash(ctx context.Context, hash string) (*Token, error) {
	f.tokenCalls.Add(1)
	if f.gate != nil {
		select {
		case <-f.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	tok, ok := f.tokens[hash]
	if !ok {
		return nil, fmt.Errorf("no token with that secret: %w", ErrTokenNotFound)
	}
	return tok, nil
}

func (f *fakeReader) Policies(ctx context.Context, names []string) ([]*Policy, error) {
	f.policyCalls.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.policyLookup = append(f.policyLookup, names)
	if f.err != nil {
		return nil, f.err
	}
	var out []*Policy
	for _, n := range names {
		if p, ok := f.policies[n]; ok {
			out = append(out, p)
		}
	}
	return out, nil
}

// addToken stores a client token with policies and returns its secret.
func (f *fakeReader) addToken(accessor, typ string, policies ...string) string {
	secret := NewSecret()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tokens[HashSecret(secret)] = &Token{
		AccessorID: accessor, SecretHash: HashSecret(secret), Type: typ, Policies: policies,
	}
	return secret
}

func (f *fakeReader) setPolicy(name, rules string, index uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.policies[name] = &Policy{Name: name, Rules: rules, ModifyIndex: index}
}

// fakeClock is a settable clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func newTestResolver(r Reader) (*Resolver, *fakeClock) {
	clock := &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	return NewResolver(r, ResolverOptions{Now: clock.Now}), clock
}

func TestResolveAnonymous(t *testing.T) {
	f := newFakeReader()
	res, _ := newTestResolver(f)
	a, tok, err := res.Resolve(context.Background(), "")
	if err != nil {
		t.Fatalf("Resolve(anonymous): %v", err)
	}
	if tok == nil || tok.AccessorID != AnonymousAccessorID {
		t.Errorf("anonymous token = %+v, want AccessorID %q", tok, AnonymousAccessorID)
	}
	if a == nil || a.IsManagement() || a.AllowNodeRead() || a.AllowServiceRead("web") {
		t.Error("anonymous without a policy is allowed something")
	}
	if f.tokenCalls.Load() != 0 {
		t.Error("anonymous resolve looked up a token")
	}

	f.setPolicy(AnonymousPolicy, `service_prefix "" { policy = "read" }`, 7)
	res.Invalidate()
	a, _, err = res.Resolve(context.Background(), "")
	if err != nil {
		t.Fatalf("Resolve(anonymous): %v", err)
	}
	if !a.AllowServiceRead("web") || a.AllowServiceWrite("web") {
		t.Error("anonymous does not get the anonymous policy")
	}
}

func TestResolveUnknownSecret(t *testing.T) {
	f := newFakeReader()
	res, _ := newTestResolver(f)
	for i := range 2 {
		_, _, err := res.Resolve(context.Background(), NewSecret())
		if !errors.Is(err, ErrTokenNotFound) {
			t.Fatalf("Resolve(unknown) error = %v, want ErrTokenNotFound", err)
		}
		if got := f.tokenCalls.Load(); got != int32(i+1) {
			t.Errorf("after %d misses the Reader was asked %d times (absence must not be cached)", i+1, got)
		}
	}
}

func TestResolveExpired(t *testing.T) {
	f := newFakeReader()
	res, clock := newTestResolver(f)
	f.setPolicy("p", `node { policy = "read" }`, 1)
	secret := f.addToken("acc-1", TypeClient, "p")
	exp := clock.Now().Add(10 * time.Second)
	f.tokens[HashSecret(secret)].ExpirationTime = &exp

	if _, _, err := res.Resolve(context.Background(), secret); err != nil {
		t.Fatalf("Resolve before expiry: %v", err)
	}
	clock.Advance(10 * time.Second) // within the cache TTL, at the expiry
	if _, _, err := res.Resolve(context.Background(), secret); !errors.Is(err, ErrTokenNotFound) {
		t.Errorf("Resolve of an expired (cached) token: error = %v, want ErrTokenNotFound", err)
	}

	past := clock.Now().Add(-time.Hour)
	old := f.addToken("acc-2", TypeManagement)
	f.tokens[HashSecret(old)].ExpirationTime = &past
	if _, _, err := res.Resolve(context.Background(), old); !errors.Is(err, ErrTokenNotFound) {
		t.Errorf("Resolve of an expired token: error = %v, want ErrTokenNotFound", err)
	}
}

func TestResolveManagement(t *testing.T) {
	f := newFakeReader()
	res, _ := newTestResolver(f)
	secret := f.addToken("root", TypeManagement)
	a, tok, err := res.Resolve(context.Background(), secret)
	if err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	if !a.IsManagement() || tok.AccessorID != "root" {
		t.Errorf("management token resolved to management=%v accessor=%q", a.IsManagement(), tok.AccessorID)
	}
	if f.policyCalls.Load() != 0 {
		t.Error("a management token's policies were read")
	}
}

func TestResolveCaches(t *testing.T) {
	f := newFakeReader()
	res, _ := newTestResolver(f)
	f.setPolicy("web", `service "web" { policy = "write" }`, 3)
	f.setPolicy("nodes", `node { policy = "read" }`, 4)
	s1 := f.addToken("acc-1", TypeClient, "web", "nodes", "gone")
	s2 := f.addToken("acc-2", TypeClient, "nodes", "web")

	a1, tok, err := res.Resolve(context.Background(), s1)
	if err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	if !a1.AllowServiceWrite("web") || !a1.AllowNodeRead() || a1.AllowNodeWrite() {
		t.Error("client token does not get its policies")
	}
	tok.Policies[0] = "mutated" // the caller's copy
	a1again, tok, err := res.Resolve(context.Background(), s1)
	if err != nil || a1again != a1 || tok.Policies[0] != "web" {
		t.Errorf("second Resolve = %p %v %v, want the cached ACL %p and an untouched token", a1again, tok, err, a1)
	}
	a2, _, err := res.Resolve(context.Background(), s2)
	if err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	if a2 != a1 {
		t.Error("two tokens with the same policy set got different compiled ACLs")
	}
	if got := f.tokenCalls.Load(); got != 2 {
		t.Errorf("TokenBySecretHash calls = %d, want 2 (one per token)", got)
	}
	if got := f.policyCalls.Load(); got != 1 {
		t.Errorf("Policies calls = %d, want 1 (the missing policy is cached too): %v", got, f.policyLookup)
	}
}

func TestResolveTTL(t *testing.T) {
	f := newFakeReader()
	res, clock := newTestResolver(f)
	f.setPolicy("p", `agent { policy = "read" }`, 1)
	secret := f.addToken("acc", TypeClient, "p")
	resolve := func() *ACL {
		t.Helper()
		a, _, err := res.Resolve(context.Background(), secret)
		if err != nil {
			t.Fatalf("Resolve: %v", err)
		}
		return a
	}
	resolve()
	clock.Advance(DefaultTokenTTL - time.Second)
	resolve()
	if tc, pc := f.tokenCalls.Load(), f.policyCalls.Load(); tc != 1 || pc != 1 {
		t.Fatalf("within the TTL: %d token and %d policy reads, want 1 and 1", tc, pc)
	}
	f.setPolicy("p", `agent { policy = "write" }`, 2)
	clock.Advance(time.Second)
	if !resolve().AllowAgentWrite() {
		t.Error("after the TTL the changed policy is not seen")
	}
	if tc, pc := f.tokenCalls.Load(), f.policyCalls.Load(); tc != 2 || pc != 2 {
		t.Errorf("after the TTL: %d token and %d policy reads, want 2 and 2", tc, pc)
	}
}

func TestResolveInvalidate(t *testing.T) {
	f := newFakeReader()
	res, _ := newTestResolver(f)
	f.setPolicy("p", `agent { policy = "read" }`, 1)
	secret := f.addToken("acc", TypeClient, "p")
	if _, _, err := res.Resolve(context.Background(), secret); err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	f.setPolicy("p", `agent { policy = "write" }`, 2)
	res.Invalidate()
	a, _, err := res.Resolve(context.Background(), secret)
	if err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	if !a.AllowAgentWrite() {
		t.Error("after Invalidate the changed policy is not seen")
	}
	if tc, pc := f.tokenCalls.Load(), f.policyCalls.Load(); tc != 2 || pc != 2 {
		t.Errorf("%d token and %d policy reads, want 2 and 2", tc, pc)
	}

	// A deleted token is gone at once after Invalidate.
	f.mu.Lock()
	delete(f.tokens, HashSecret(secret))
	f.mu.Unlock()
	res.Invalidate()
	if _, _, err := res.Resolve(context.Background(), secret); !errors.Is(err, ErrTokenNotFound) {
		t.Errorf("deleted token: error = %v, want ErrTokenNotFound", err)
	}
}

func TestResolveReaderError(t *testing.T) {
	f := newFakeReader()
	res, _ := newTestResolver(f)
	secret := f.addToken("acc", TypeClient)
	boom := errors.New("rpc: connection refused")
	f.err = boom
	_, _, err := res.Resolve(context.Background(), secret)
	if !errors.Is(err, boom) || errors.Is(err, ErrTokenNotFound) {
		t.Fatalf("error = %v, want the Reader's error", err)
	}
	f.mu.Lock()
	f.err = nil
	f.mu.Unlock()
	if _, _, err := res.Resolve(context.Background(), secret); err != nil {
		t.Errorf("after the Reader recovered: %v (errors must not be cached)", err)
	}
}

func TestResolveBadStoredPolicy(t *testing.T) {
	f := newFakeReader()
	res, _ := newTestResolver(f)
	f.setPolicy("bad", `node { policy = "rw" }`, 1)
	secret := f.addToken("acc", TypeClient, "bad")
	if _, _, err := res.Resolve(context.Background(), secret); !errors.Is(err, ErrInvalid) {
		t.Errorf("error = %v, want ErrInvalid", err)
	}
}

func TestResolveConcurrent(t *testing.T) {
	f := newFakeReader()
	f.gate = make(chan struct{})
	res, _ := newTestResolver(f)
	f.setPolicy("p", `namespace "*" { policy = "read" }`, 1)
	secret := f.addToken("acc", TypeClient, "p")

	const n = 64
	acls := make([]*ACL, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { acls[i], _, errs[i] = res.Resolve(context.Background(), secret) })
	}
	for f.tokenCalls.Load() == 0 { // the first lookup is under way
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // let the others pile up behind it
	close(f.gate)
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("Resolve %d: %v", i, errs[i])
		}
		if acls[i] != acls[0] {
			t.Errorf("Resolve %d got another ACL", i)
		}
	}
	if tc, pc := f.tokenCalls.Load(), f.policyCalls.Load(); tc != 1 || pc != 1 {
		t.Errorf("%d concurrent resolves made %d token and %d policy reads, want 1 and 1", n, tc, pc)
	}
}

func TestResolveContextCanceled(t *testing.T) {
	f := newFakeReader()
	f.gate = make(chan struct{})
	defer close(f.gate)
	res, _ := newTestResolver(f)
	secret := f.addToken("acc", TypeClient)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, _, err := res.Resolve(ctx, secret); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error = %v, want context.DeadlineExceeded", err)
	}
}

func TestResolveLogsNoSecrets(t *testing.T) {
	f := newFakeReader()
	var buf bytes.Buffer
	logger := hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Trace})
	clock := &fakeClock{t: time.Now()}
	res := NewResolver(f, ResolverOptions{Now: clock.Now, Logger: logger})
	secret := f.addToken("acc-visible", TypeClient, "missing-policy")
	if _, _, err := res.Resolve(context.Background(), secret); err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	exp := clock.Now()
	f.tokens[HashSecret(secret)].ExpirationTime = &exp
	_, _, err := res.Resolve(context.Background(), secret)
	if !errors.Is(err, ErrTokenNotFound) {
		t.Fatalf("error = %v, want ErrTokenNotFound", err)
	}
	out := buf.String() + err.Error()
	if !bytes.Contains([]byte(out), []byte("acc-visible")) {
		t.Errorf("logs do not name the accessor: %s", out)
	}
	for _, s := range []string{secret, HashSecret(secret)} {
		if bytes.Contains([]byte(out), []byte(s)) {
			t.Errorf("logs or error contain the secret or its hash: %s", out)
		}
	}
}

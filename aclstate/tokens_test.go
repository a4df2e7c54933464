package aclstate

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshlet/meshlet/acl"
)

// rawValue is the stored value of sub, "" when absent.
func rawValue(t *testing.T, s *EtcdStore, sub string) string {
	t.Helper()
	kv, err := s.getOne(ctxT(t, 5*time.Second), sub)
	if err != nil {
		t.Fatal(err)
	}
	if kv == nil {
		return ""
	}
	return string(kv.Value)
}

// countKeys counts the keys under the store's prefix + sub.
func countKeys(t *testing.T, s *EtcdStore, sub string) int64 {
	t.Helper()
	resp, err := s.c.Get(ctxT(t, 5*time.Second), s.key(sub), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count
}

// The one bootstrap stores a management token with its secret hashed,
// hands the secret back once and refuses a second bootstrap.
func TestBootstrapOnce(t *testing.T) {
	s := newStore(t)
	ctx := ctxT(t, 10*time.Second)
	_, err := s.Bootstrap(ctx, &acl.Token{Type: acl.TypeClient, Policies: []string{"x"}})
	wantErr(t, "client bootstrap token", err, acl.ErrInvalid)
	tok, err := s.Bootstrap(ctx, &acl.Token{Name: "Bootstrap Token"})
	if err != nil {
		t.Fatal(err)
	}
	if tok.SecretID == "" || tok.SecretHash != acl.HashSecret(tok.SecretID) || tok.Type != acl.TypeManagement ||
		tok.AccessorID == "" || !tok.CreateTime.Equal(testNow) || tok.CreateIndex == 0 || tok.ModifyIndex != tok.CreateIndex {
		t.Fatalf("bootstrap token %+v", tok)
	}
	raw := rawValue(t, s, tokensDir+tok.AccessorID)
	if raw == "" || strings.Contains(raw, tok.SecretID) || strings.Contains(raw, "SecretID") {
		t.Fatalf("stored token %s must hold the hash only", raw)
	}
	got, err := s.TokenBySecretHash(ctx, acl.HashSecret(tok.SecretID))
	if err != nil || got.AccessorID != tok.AccessorID || got.SecretID != "" || got.CreateIndex != tok.CreateIndex {
		t.Fatalf("TokenBySecretHash = %+v, %v", got, err)
	}
	_, err = s.Bootstrap(ctx, nil)
	wantErr(t, "second bootstrap", err, acl.ErrBootstrapDone)
	// Deleting the bootstrap token does not allow another bootstrap.
	if err := s.DeleteToken(ctx, tok.AccessorID); err != nil {
		t.Fatal(err)
	}
	_, err = s.Bootstrap(ctx, nil)
	wantErr(t, "bootstrap after deleting the token", err, acl.ErrBootstrapDone)
}

// Servers racing the bootstrap (each with its own client) make exactly
// one token.
func TestBootstrapRace(t *testing.T) {
	prefix := testPrefix(t)
	const n = 8
	stores := make([]*EtcdStore, n)
	for i := range stores {
		stores[i] = openTest(t, newClient(t), prefix, Options{})
	}
	ctx := ctxT(t, 30*time.Second)
	var wg sync.WaitGroup
	errs := make([]error, n)
	start := make(chan struct{})
	for i, s := range stores {
		wg.Go(func() {
			<-start
			_, errs[i] = s.Bootstrap(ctx, nil)
		})
	}
	close(start)
	wg.Wait()
	won := 0
	for i, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, acl.ErrBootstrapDone):
			t.Errorf("bootstrap %d: %v", i, err)
		}
	}
	toks, _, err := stores[0].ListTokens(ctx)
	if won != 1 || err != nil || len(toks) != 1 || countKeys(t, stores[0], secretsDir) != 1 {
		t.Fatalf("%d bootstraps succeeded, %d tokens stored (%v); want exactly 1", won, len(toks), err)
	}
}

// A client token is created, updated (keeping its secret and create
// time) and deleted with its secret's key.
func TestTokenLifecycle(t *testing.T) {
	s := newStore(t)
	ctx := ctxT(t, 10*time.Second)
	mustPolicy(t, s, "read", "")
	mustPolicy(t, s, "write", "")
	tok, err := s.UpsertToken(ctx, &acl.Token{Name: "ci", Type: acl.TypeClient, Policies: []string{"read"}})
	if err != nil {
		t.Fatal(err)
	}
	if tok.SecretID == "" || tok.AccessorID == "" || tok.CreateIndex == 0 || tok.ModifyIndex != tok.CreateIndex {
		t.Fatalf("created token %+v", tok)
	}
	hash := acl.HashSecret(tok.SecretID)
	if got := rawValue(t, s, secretsDir+hash); got != tok.AccessorID {
		t.Fatalf("secrets key holds %q, want the accessor", got)
	}
	upd, err := s.UpsertToken(ctx, &acl.Token{AccessorID: tok.AccessorID, CreateIndex: tok.CreateIndex, Name: "ci-2", Type: acl.TypeClient,
		Policies: []string{"read", "write"}, CreateTime: testNow.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if upd.SecretID != "" || upd.SecretHash != hash || !upd.CreateTime.Equal(testNow) || upd.CreateIndex != tok.CreateIndex ||
		upd.ModifyIndex <= tok.ModifyIndex || upd.Name != "ci-2" || len(upd.Policies) != 2 {
		t.Fatalf("updated token %+v (created %+v)", upd, tok)
	}
	got, err := s.Token(ctx, tok.AccessorID)
	if err != nil || got.Name != "ci-2" || got.SecretHash != hash || got.ModifyIndex != upd.ModifyIndex || got.SecretID != "" {
		t.Fatalf("Token = %+v, %v", got, err)
	}
	_, err = s.UpsertToken(ctx, &acl.Token{AccessorID: tok.AccessorID, CreateIndex: tok.CreateIndex, SecretID: "other", Type: acl.TypeManagement})
	wantErr(t, "secret change", err, acl.ErrInvalid)
	_, err = s.UpsertToken(ctx, &acl.Token{AccessorID: "f00", CreateIndex: 1, Type: acl.TypeManagement})
	wantErr(t, "update of an unknown accessor", err, acl.ErrNotFound)
	// A create with a chosen accessor (Nomad's upload) needs it unused.
	_, err = s.UpsertToken(ctx, &acl.Token{AccessorID: tok.AccessorID, Type: acl.TypeManagement})
	wantErr(t, "create with an accessor in use", err, acl.ErrInvalid)
	if err := s.DeleteToken(ctx, tok.AccessorID); err != nil {
		t.Fatal(err)
	}
	_, err = s.Token(ctx, tok.AccessorID)
	wantErr(t, "Token after delete", err, acl.ErrNotFound)
	_, err = s.TokenBySecretHash(ctx, hash)
	wantErr(t, "TokenBySecretHash after delete", err, acl.ErrTokenNotFound)
	if n := countKeys(t, s, secretsDir); n != 0 {
		t.Fatalf("%d secrets keys left after the delete", n)
	}
	wantErr(t, "second delete", s.DeleteToken(ctx, tok.AccessorID), acl.ErrNotFound)
}

// Token writes that break the rules are ErrInvalid and write nothing.
func TestTokenValidation(t *testing.T) {
	s := newStore(t)
	ctx := ctxT(t, 10*time.Second)
	mustPolicy(t, s, "read", "")
	before, _ := s.Index(ctx)
	past, soon := testNow.Add(-time.Minute), testNow.Add(time.Minute)
	for name, tok := range map[string]*acl.Token{
		"nil":                      nil,
		"no type":                  {Policies: []string{"read"}},
		"unknown type":             {Type: "root"},
		"client without policy":    {Type: acl.TypeClient},
		"management with policy":   {Type: acl.TypeManagement, Policies: []string{"read"}},
		"invalid policy name":      {Type: acl.TypeClient, Policies: []string{"a/b"}},
		"long name":                {Type: acl.TypeManagement, Name: strings.Repeat("n", 257)},
		"expired at birth":         {Type: acl.TypeManagement, ExpirationTime: &past},
		"hash mismatch":            {Type: acl.TypeManagement, SecretID: "s", SecretHash: acl.HashSecret("t")},
		"malformed hash":           {Type: acl.TypeManagement, SecretHash: "abc"},
		"invalid accessor":         {AccessorID: "a/b", Type: acl.TypeManagement},
		"expiry before creation":   {Type: acl.TypeManagement, CreateTime: soon.Add(time.Hour), ExpirationTime: &soon},
		"management with identity": {Type: acl.TypeManagement, ServiceIdentities: []*acl.ServiceIdentity{{ServiceName: "web"}}},
		"uppercase identity":       {Type: acl.TypeClient, ServiceIdentities: []*acl.ServiceIdentity{{ServiceName: "Web"}}},
		"identity ending in dash":  {Type: acl.TypeClient, ServiceIdentities: []*acl.ServiceIdentity{{ServiceName: "web-"}}},
		"nil identity":             {Type: acl.TypeClient, ServiceIdentities: []*acl.ServiceIdentity{nil}},
		"task without allocation":  {Type: acl.TypeClient, Policies: []string{"read"}, TaskName: "t"},
		"allocation without task":  {Type: acl.TypeClient, Policies: []string{"read"}, AllocID: "a1"},
		"allocation with a slash":  {Type: acl.TypeClient, Policies: []string{"read"}, AllocID: "a/1", TaskName: "t"},
	} {
		_, err := s.UpsertToken(ctx, tok)
		wantErr(t, name, err, acl.ErrInvalid)
	}
	_, err := s.UpsertToken(ctx, &acl.Token{Type: acl.TypeClient, Policies: []string{"read", "nope"}})
	wantErr(t, "missing policy", err, acl.ErrInvalid)
	if !strings.Contains(err.Error(), `policy "nope" does not exist`) {
		t.Fatalf("missing policy error %q does not name it", err)
	}
	if idx, _ := s.Index(ctx); idx != before {
		t.Fatalf("refused writes moved the index from %d to %d", before, idx)
	}
	// A secret given by the caller, or only its hash, is kept; a secret
	// in use is refused.
	tok, err := s.UpsertToken(ctx, &acl.Token{Type: acl.TypeManagement, SecretID: "given"})
	if err != nil || tok.SecretID != "given" || tok.SecretHash != acl.HashSecret("given") {
		t.Fatalf("token with a given secret = %+v, %v", tok, err)
	}
	_, err = s.UpsertToken(ctx, &acl.Token{Type: acl.TypeManagement, SecretHash: acl.HashSecret("given")})
	wantErr(t, "secret in use", err, acl.ErrInvalid)
	tok, err = s.UpsertToken(ctx, &acl.Token{Type: acl.TypeManagement, SecretHash: acl.HashSecret("replicated")})
	if err != nil || tok.SecretID != "" {
		t.Fatalf("token with a given hash = %+v, %v", tok, err)
	}
}

// A token of service identities only is a client token; its identities
// and allocation binding are stored, and an update cannot move the
// binding to another allocation.
func TestWorkloadToken(t *testing.T) {
	s := newStore(t)
	ctx := ctxT(t, 10*time.Second)
	tok, err := s.UpsertToken(ctx, &acl.Token{Type: acl.TypeClient, AllocID: "a1", TaskName: "connect-proxy-web",
		ServiceIdentities: []*acl.ServiceIdentity{{ServiceName: "web", Datacenters: []string{"dc1"}}}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.TokenBySecretHash(ctx, acl.HashSecret(tok.SecretID))
	if err != nil || got.AllocID != "a1" || got.TaskName != "connect-proxy-web" || len(got.ServiceIdentities) != 1 ||
		got.ServiceIdentities[0].ServiceName != "web" || got.ServiceIdentities[0].Datacenters[0] != "dc1" {
		t.Fatalf("stored workload token = %+v, %v", got, err)
	}
	up := *got
	up.AllocID, up.TaskName, up.Name = "a2", "other", "renamed"
	upd, err := s.UpsertToken(ctx, &up)
	if err != nil || upd.AllocID != "a1" || upd.TaskName != "connect-proxy-web" || upd.Name != "renamed" {
		t.Fatalf("updated workload token = %+v, %v; want the binding kept", upd, err)
	}
}

// A policy that tokens name may be deleted; the tokens keep the name and
// resolution skips it.
func TestDeleteReferencedPolicy(t *testing.T) {
	s := newStore(t)
	ctx := ctxT(t, 10*time.Second)
	mustPolicy(t, s, "read", "")
	tok, err := s.UpsertToken(ctx, &acl.Token{Type: acl.TypeClient, Policies: []string{"read"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeletePolicy(ctx, "read"); err != nil {
		t.Fatal(err)
	}
	got, err := s.TokenBySecretHash(ctx, tok.SecretHash)
	if err != nil || len(got.Policies) != 1 || got.Policies[0] != "read" {
		t.Fatalf("token after its policy's delete = %+v, %v", got, err)
	}
	if ps, err := s.Policies(ctx, got.Policies); err != nil || len(ps) != 0 {
		t.Fatalf("Policies of the deleted name = %v, %v", ps, err)
	}
}

// Lookups by secret hash: malformed and unknown hashes and expired
// tokens are ErrTokenNotFound.
func TestTokenBySecretHash(t *testing.T) {
	prefix, c := testPrefix(t), newClient(t)
	s := openTest(t, c, prefix, Options{})
	ctx := ctxT(t, 10*time.Second)
	exp := testNow.Add(time.Hour)
	tok, err := s.UpsertToken(ctx, &acl.Token{Type: acl.TypeManagement, ExpirationTime: &exp})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"", "short", strings.Repeat("A", 64), acl.HashSecret("unknown")} {
		_, err := s.TokenBySecretHash(ctx, h)
		wantErr(t, "hash "+h, err, acl.ErrTokenNotFound)
	}
	if _, err := s.TokenBySecretHash(ctx, tok.SecretHash); err != nil {
		t.Fatalf("unexpired token: %v", err)
	}
	later := openTest(t, c, prefix, Options{Now: func() time.Time { return exp }})
	_, err = later.TokenBySecretHash(ctx, tok.SecretHash)
	wantErr(t, "expired token", err, acl.ErrTokenNotFound)
	if got, err := later.Token(ctx, tok.AccessorID); err != nil || !got.Expired(exp) {
		t.Fatalf("Token of an expired token = %+v, %v; the accessor read still shows it", got, err)
	}
}

// Corrupt token values are errors of every read; a corrupt token can
// still be deleted.
func TestTokenCorrupt(t *testing.T) {
	s := newStore(t)
	ctx := ctxT(t, 10*time.Second)
	tok, err := s.UpsertToken(ctx, &acl.Token{Type: acl.TypeManagement})
	if err != nil {
		t.Fatal(err)
	}
	good := rawValue(t, s, tokensDir+tok.AccessorID)
	for _, c := range []struct {
		val     string
		listToo bool // ListTokens sees it too (not only the secrets key's mismatch)
	}{
		{"garbage", true},
		{`{"AccessorID":"other","SecretHash":"` + tok.SecretHash + `","Type":"management"}`, true},
		{`{"AccessorID":"` + tok.AccessorID + `","SecretHash":"` + tok.SecretHash + `","Type":"root"}`, true},
		{`{"AccessorID":"` + tok.AccessorID + `","SecretHash":"` + acl.HashSecret("x") + `","Type":"management"}`, false},
	} {
		put(t, s, tokensDir+tok.AccessorID, c.val)
		_, err := s.TokenBySecretHash(ctx, tok.SecretHash)
		wantErr(t, "TokenBySecretHash "+c.val, err, ErrCorrupt)
		if _, _, err = s.ListTokens(ctx); c.listToo {
			wantErr(t, "ListTokens "+c.val, err, ErrCorrupt)
		}
	}
	put(t, s, tokensDir+tok.AccessorID, good)
	put(t, s, secretsDir+tok.SecretHash, "not/an/accessor")
	_, err = s.TokenBySecretHash(ctx, tok.SecretHash)
	wantErr(t, "corrupt secrets key", err, ErrCorrupt)
	put(t, s, tokensDir+tok.AccessorID, "garbage")
	_, err = s.Token(ctx, tok.AccessorID)
	wantErr(t, "Token", err, ErrCorrupt)
	_, err = s.UpsertToken(ctx, &acl.Token{AccessorID: tok.AccessorID, CreateIndex: tok.CreateIndex, Type: acl.TypeManagement})
	wantErr(t, "update of a corrupt token", err, ErrCorrupt)
	if err := s.DeleteToken(ctx, tok.AccessorID); err != nil {
		t.Fatalf("DeleteToken of a corrupt token: %v", err)
	}
	if toks, _, err := s.ListTokens(ctx); err != nil || len(toks) != 0 {
		t.Fatalf("ListTokens after the delete = %v, %v", toks, err)
	}
}

// OnCommit runs once per committed write, before the write returns (the
// agent drops its resolver's caches there), and not for a refused one.
func TestOnCommit(t *testing.T) {
	var mu sync.Mutex
	commits := 0
	s := openTest(t, newClient(t), testPrefix(t), Options{OnCommit: func() {
		mu.Lock()
		defer mu.Unlock()
		commits++
	}})
	n := func() int {
		mu.Lock()
		defer mu.Unlock()
		return commits
	}
	ctx := ctxT(t, 10*time.Second)
	if _, err := s.Bootstrap(ctx, &acl.Token{Name: "Bootstrap Token"}); err != nil {
		t.Fatal(err)
	}
	tok, err := s.UpsertToken(ctx, &acl.Token{Name: "m", Type: acl.TypeManagement})
	if err != nil {
		t.Fatal(err)
	}
	if got := n(); got != 2 {
		t.Fatalf("after bootstrap and a token: %d commits, want 2", got)
	}
	if err := s.DeleteToken(ctx, tok.AccessorID); err != nil {
		t.Fatal(err)
	}
	if got := n(); got != 3 {
		t.Fatalf("after the delete returned: %d commits, want 3", got)
	}
	if _, err := s.Bootstrap(ctx, &acl.Token{Name: "again"}); !errors.Is(err, acl.ErrBootstrapDone) {
		t.Fatalf("second bootstrap: %v", err)
	}
	if err := s.DeleteToken(ctx, tok.AccessorID); err == nil {
		t.Fatal("second delete succeeded")
	}
	if got := n(); got != 3 {
		t.Fatalf("refused writes committed: %d commits, want 3", got)
	}
}

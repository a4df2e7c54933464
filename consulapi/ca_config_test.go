package consulapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	consul "github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/ca"
	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/internal/testutil"
)

// caConfigServer serves d (CA: a real in-memory ca.Manager when nil) to
// the official consul/api client; the agent's log goes to the returned
// buffer.
func caConfigServer(t *testing.T, d Deps) (*consul.Client, *ca.Manager, *testutil.SyncBuffer, string) {
	t.Helper()
	m, err := ca.New(ca.Config{LeafTTL: 2 * time.Hour}, hclog.NewNullLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	if d.CA == nil {
		d.CA = m
	}
	d.Catalog = catalog.New()
	logs := &testutil.SyncBuffer{}
	srv := NewServer(d, hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Info}))
	hs := httptest.NewServer(srv.Handler()) // 127.0.0.1:0
	t.Cleanup(hs.Close)
	client, err := consul.NewClient(&consul.Config{Address: hs.Listener.Addr().String(), Scheme: "http"})
	if err != nil {
		t.Fatal(err)
	}
	return client, m, logs, hs.URL
}

func activeRoot(rs ca.Roots) ca.Root {
	for _, r := range rs.Roots {
		if r.Active {
			return r
		}
	}
	return ca.Root{}
}

// CAGetConfig reads Consul's shape; CASetConfig rotates the root (a new
// root cross-signed by the old one), and a blocking get-config returns
// at the rotation.
func TestCAConfigGetSetRotates(t *testing.T) {
	client, m, logs, _ := caConfigServer(t, Deps{})
	conn := client.Connect()
	cfg, meta, err := conn.CAGetConfig(nil)
	if err != nil {
		t.Fatalf("CAGetConfig: %v", err)
	}
	before := activeRoot(m.Roots())
	if cfg.Provider != "consul" || cfg.State != nil || cfg.CreateIndex != before.CreateIndex ||
		cfg.ModifyIndex != before.CreateIndex || meta.LastIndex != before.CreateIndex {
		t.Fatalf("CAGetConfig = %+v (index %d), want provider consul, no State, indexes %d", cfg, meta.LastIndex, before.CreateIndex)
	}
	parsed, err := consul.ParseConsulCAConfig(cfg.Config)
	if err != nil || parsed.LeafCertTTL != 2*time.Hour || cfg.Config["LeafCertTTL"] != "2h0m0s" {
		t.Fatalf("Config = %v (parsed %+v, %v), want LeafCertTTL 2h0m0s", cfg.Config, parsed, err)
	}

	blocked := make(chan *consul.CAConfig, 1)
	go func() {
		c, _, err := conn.CAGetConfig(&consul.QueryOptions{WaitIndex: cfg.ModifyIndex, WaitTime: time.Minute})
		if err != nil {
			c = nil
		}
		blocked <- c
	}()
	time.Sleep(50 * time.Millisecond)
	select {
	case c := <-blocked:
		t.Fatalf("blocking CAGetConfig returned before any rotation: %+v", c)
	default:
	}

	// get-config's output fed back unchanged, as `set-config` would.
	if _, err := conn.CASetConfig(cfg, nil); err != nil {
		t.Fatalf("CASetConfig: %v", err)
	}
	after := m.Roots()
	next := activeRoot(after)
	if len(after.Roots) != 2 || next.ID == before.ID || len(next.IntermediateCertsPEM) != 1 {
		t.Fatalf("after CASetConfig: %d roots, active %s (was %s), %d cross-signed certs; want 2 roots, a new active root cross-signed by the old",
			len(after.Roots), next.ID, before.ID, len(next.IntermediateCertsPEM))
	}
	select {
	case c := <-blocked:
		if c == nil || c.ModifyIndex != next.CreateIndex || c.ModifyIndex <= cfg.ModifyIndex {
			t.Fatalf("blocking CAGetConfig after rotation = %+v, want ModifyIndex %d", c, next.CreateIndex)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("blocking CAGetConfig did not return after the rotation")
	}
	if l := logs.String(); !strings.Contains(l, "rotated the CA root through the connect API") || strings.Contains(l, "not applied") {
		t.Errorf("log after an unchanged set-config: %s", l)
	}

	// The same values in other spellings are the same configuration.
	same := map[string]any{"LeafCertTTL": "120m", "PrivateKeyType": "ec", "PrivateKeyBits": 256, "PrivateKey": "", "RootCert": ""}
	if _, err := conn.CASetConfig(&consul.CAConfig{Provider: "consul", Config: same}, nil); err != nil {
		t.Fatalf("CASetConfig(%v): %v", same, err)
	}
	if n := len(m.Roots().Roots); n != 3 {
		t.Fatalf("%d roots after the second set-config, want 3", n)
	}
}

// A configuration meshlet cannot apply is refused with 400 and rotates
// nothing; the message names the supported provider.
func TestCASetConfigRefused(t *testing.T) {
	client, m, _, url := caConfigServer(t, Deps{})
	before := m.Roots()
	for _, tc := range []struct {
		cfg  *consul.CAConfig
		want string
	}{
		{&consul.CAConfig{Provider: "vault", Config: map[string]any{"Address": "http://127.0.0.1:8200"}}, `"vault" is not supported: meshlet's built-in CA is provider "consul"`},
		{&consul.CAConfig{}, `CA provider "" is not supported`},
		{&consul.CAConfig{Provider: "consul", State: map[string]string{"k": "v"}}, "State is read-only"},
		{&consul.CAConfig{Provider: "consul", Config: map[string]any{"PrivateKey": "-----BEGIN EC PRIVATE KEY-----"}}, "Config.PrivateKey is not supported"},
		{&consul.CAConfig{Provider: "consul", Config: map[string]any{"RootCert": "-----BEGIN CERTIFICATE-----"}}, "Config.RootCert is not supported"},
		{&consul.CAConfig{Provider: "consul", Config: map[string]any{"LeafCertTTL": "soon"}}, `Config.LeafCertTTL: invalid duration "soon"`},
		{&consul.CAConfig{Provider: "consul", Config: map[string]any{"LeafCertTTL": true}}, "Config.LeafCertTTL: want a duration"},
		{&consul.CAConfig{Provider: "consul", Config: map[string]any{"RootCertTTL": "-1h"}}, "Config.RootCertTTL: negative duration"},
		{&consul.CAConfig{Provider: "consul", Config: map[string]any{"PrivateKeyType": "rsa", "PrivateKeyBits": 2048}},
			`Config.PrivateKeyBits 2048 is not supported: meshlet's CA supports only PrivateKeyType "ec" with PrivateKeyBits 256 (ECDSA P-256)`},
		{&consul.CAConfig{Provider: "consul", Config: map[string]any{"PrivateKeyType": "rsa"}},
			`Config.PrivateKeyType rsa is not supported: meshlet's CA supports only PrivateKeyType "ec"`},
		{&consul.CAConfig{Provider: "consul", Config: map[string]any{"LeafCertTTL": "24h"}},
			"Config.LeafCertTTL 24h0m0s cannot be set through the API: leaves are signed for the servers' connect.leaf_ttl (2h0m0s); change it there"},
		{&consul.CAConfig{Provider: "consul", Config: map[string]any{"LeafCertTTL": "2h", "RotationPeriod": "2160h"}},
			"Config.RotationPeriod is not supported: meshlet's CA takes only LeafCertTTL, PrivateKeyType and PrivateKeyBits"},
		{&consul.CAConfig{Provider: "consul", Config: map[string]any{"CSRMaxPerSecond": 50}}, "Config.CSRMaxPerSecond is not supported"},
	} {
		_, err := client.Connect().CASetConfig(tc.cfg, nil)
		var se consul.StatusError
		if !errors.As(err, &se) || se.Code != http.StatusBadRequest || !strings.Contains(se.Body, tc.want) || strings.Contains(strings.TrimSpace(se.Body), "\n") {
			t.Errorf("CASetConfig(%+v) = %v, want 400 with %q", tc.cfg, err, tc.want)
		}
	}
	for _, body := range []string{"{not json", `{"Provider":"consul"} {}`} {
		if code, resp := do(t, "PUT", url+"/v1/connect/ca/configuration", body); code != http.StatusBadRequest {
			t.Errorf("PUT %q = %d %q, want 400", body, code, resp)
		}
	}
	if code, _ := do(t, "POST", url+"/v1/connect/ca/configuration", `{"Provider":"consul"}`); code != http.StatusMethodNotAllowed {
		t.Errorf("POST = %d, want 405", code)
	}
	if after := m.Roots(); after.ActiveRootID != before.ActiveRootID || len(after.Roots) != 1 {
		t.Fatalf("refused configurations rotated the root: %+v", after)
	}
}

// rootsOnly is a CA without a Rotate method.
type rootsOnly struct{ CA }

// Deps.RotateCA is what a PUT calls (a client agent's goes through a
// server): a lost race with another server's change is retried, a
// persistent one is 409, another failure 500, and no rotator 501.
func TestCASetConfigRotateCA(t *testing.T) {
	var mu sync.Mutex
	var calls int
	var results []error
	rotate := func(context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if len(results) == 0 {
			return nil
		}
		err := results[0]
		results = results[1:]
		return err
	}
	client, m, _, _ := caConfigServer(t, Deps{RotateCA: rotate})
	conflict := fmt.Errorf("failed to rotate CA root: %w", ca.ErrStateConflict)
	for _, tc := range []struct {
		results   []error
		wantCalls int
		wantCode  int
	}{
		{nil, 1, 200},
		{[]error{conflict, conflict}, 3, 200},
		{[]error{conflict, conflict, conflict}, 3, http.StatusConflict},
		{[]error{errors.New("no RPC server could serve the call")}, 1, http.StatusInternalServerError},
	} {
		mu.Lock()
		calls, results = 0, tc.results
		mu.Unlock()
		_, err := client.Connect().CASetConfig(&consul.CAConfig{Provider: "consul"}, nil)
		code := 200
		if err != nil {
			code = statusCode(err)
		}
		mu.Lock()
		got := calls
		mu.Unlock()
		if code != tc.wantCode || got != tc.wantCalls {
			t.Errorf("rotations answering %v: status %d after %d calls (%v), want %d after %d", tc.results, code, got, err, tc.wantCode, tc.wantCalls)
		}
	}
	if n := len(m.Roots().Roots); n != 1 {
		t.Fatalf("the CA's own Rotate ran although Deps.RotateCA is set: %d roots", n)
	}

	none, _, _, _ := caConfigServer(t, Deps{CA: rootsOnly{m}})
	if _, err := none.Connect().CASetConfig(&consul.CAConfig{Provider: "consul"}, nil); statusCode(err) != http.StatusNotImplemented {
		t.Fatalf("CASetConfig without a rotator = %v, want 501", err)
	}
}

// A client agent's CA signs nothing itself: its leaves carry the servers'
// TTL, which GET reports once a leaf was issued, not the local
// connect.leaf_ttl the agent was configured with (its CA's LeafTTL).
func TestCAGetConfigLeafTTLFromServers(t *testing.T) {
	servers, err := ca.New(ca.Config{LeafTTL: 5 * time.Hour}, hclog.NewNullLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = servers.Close() })
	remote, err := ca.New(ca.Config{Signer: servers, LeafTTL: 2 * time.Hour}, hclog.NewNullLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = remote.Close() })
	if err := remote.SetRoots(servers.Roots()); err != nil {
		t.Fatal(err)
	}
	client, _, _, _ := caConfigServer(t, Deps{CA: remote})
	ttl := func() string {
		t.Helper()
		cfg, _, err := client.Connect().CAGetConfig(nil)
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(cfg.Config["LeafCertTTL"])
	}
	if got := ttl(); got != "2h0m0s" {
		t.Fatalf("LeafCertTTL before any leaf = %s, want the configured 2h0m0s", got)
	}
	// The agent's control plane fetches a leaf (as xDS does, not through
	// this API): its lifetime is the servers' TTL.
	if _, err := remote.Leaf(context.Background(), "web"); err != nil {
		t.Fatal(err)
	}
	if got := ttl(); got != "5h0m0s" {
		t.Fatalf("LeafCertTTL after a leaf signed by the servers = %s, want their 5h0m0s", got)
	}
}

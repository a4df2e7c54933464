package agent

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	consul "github.com/hashicorp/consul/api"
	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/meshlet/meshlet/acl"
)

func nomadClient(t *testing.T, a *Agent, token string) *nomadapi.Client {
	t.Helper()
	c, err := nomadapi.NewClient(&nomadapi.Config{Address: "http://" + a.HTTPAddr(), SecretID: token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func consulClient(t *testing.T, a *Agent, token string) *consul.Client {
	t.Helper()
	c, err := consul.NewClient(&consul.Config{Address: a.ControlPlane().HTTPAddr(), Token: token})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func want403(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("%s: %v, want a 403", what, err)
	}
}

// getStatus is the status of a GET on a's Nomad API with token ("": none).
func getStatus(t *testing.T, a *Agent, path, token string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+a.HTTPAddr()+path, nil)
	if token != "" {
		req.Header.Set("X-Nomad-Token", token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// A server agent and a client-only agent with ACLs: the server keeps the
// tokens (in etcd, across a restart), the client agent resolves them
// through the server for what it answers itself (its Consul-shaped API,
// task logs) and forwards the rest with the caller's token; a deleted
// token stops working on the server at once.
func TestACLServerAndClientAgents(t *testing.T) {
	srvDir := t.TempDir()
	aclOn := func(cfg *Config) { cfg.ACL.Enabled = true }
	srv := startAgentWith(t, srvDir, aclOn)
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = srv.Shutdown()
		}
	})
	if _, _, err := nomadClient(t, srv, "").Jobs().List(nil); err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("job list without a token before the bootstrap: %v, want 403", err)
	}
	boot, _, err := nomadClient(t, srv, "").ACLTokens().Bootstrap(nil)
	if err != nil || boot.SecretID == "" || boot.Type != acl.TypeManagement {
		t.Fatalf("bootstrap = %+v, %v", boot, err)
	}
	mgmt := nomadClient(t, srv, boot.SecretID)
	if _, err := mgmt.ACLPolicies().Upsert(&nomadapi.ACLPolicy{Name: "web", Rules: `service "web" { policy = "write" }`}, nil); err != nil {
		t.Fatal(err)
	}
	webTok, _, err := mgmt.ACLTokens().Create(&nomadapi.ACLToken{Name: "web", Type: acl.TypeClient, Policies: []string{"web"}}, nil)
	if err != nil || webTok.SecretID == "" {
		t.Fatalf("token create = %+v, %v", webTok, err)
	}

	cl := startAgentWith(t, t.TempDir(), func(cfg *Config) {
		aclOn(cfg)
		cfg.Cluster = ClusterConfig{Client: true, Servers: []string{srv.RPCAddr()}}
		cfg.NodeName = "test-client"
	})
	t.Cleanup(func() { _ = cl.Shutdown() })
	// Forwarded to the server, with the caller's token.
	want403(t, "job list on the client agent without a token", errOf(nomadClient(t, cl, "").Jobs().List(nil)))
	if _, _, err := nomadClient(t, cl, boot.SecretID).Jobs().List(nil); err != nil {
		t.Errorf("job list on the client agent with the management token: %v", err)
	}
	// Answered by the client agent itself: task logs (read-logs).
	if code := getStatus(t, cl, "/v1/client/fs/logs/nope?task=t&type=stdout", ""); code != http.StatusForbidden {
		t.Errorf("logs on the client agent without a token: %d, want 403", code)
	}
	if code := getStatus(t, cl, "/v1/client/fs/logs/nope?task=t&type=stdout", boot.SecretID); code == http.StatusForbidden {
		t.Errorf("logs on the client agent with the management token: %d, want past the ACL check", code)
	}
	// The client agent's Consul-shaped API resolves tokens through the
	// server: service write on web writes web's config entry only.
	entry := func(name string) *consul.ServiceConfigEntry {
		return &consul.ServiceConfigEntry{Kind: consul.ServiceDefaults, Name: name, Protocol: "http"}
	}
	if ok, _, err := consulClient(t, cl, webTok.SecretID).ConfigEntries().Set(entry("web"), nil); err != nil || !ok {
		t.Errorf("web's service-defaults with web's token through the client agent: %v, %v", ok, err)
	}
	_, _, err = consulClient(t, cl, webTok.SecretID).ConfigEntries().Set(entry("db"), nil)
	want403(t, "db's service-defaults with web's token", err)
	_, _, err = consulClient(t, cl, "").ConfigEntries().Set(entry("web"), nil)
	want403(t, "web's service-defaults without a token", err)
	// Intention writes too: the server judges them again with the token
	// the client agent forwards (the node's credentials alone write none).
	ixn := &consul.Intention{SourceName: "web", DestinationName: "db", Action: consul.IntentionActionAllow}
	if _, err := consulClient(t, cl, boot.SecretID).Connect().IntentionUpsert(ixn, nil); err != nil {
		t.Errorf("intention web->db with the management token through the client agent: %v", err)
	}
	_, err = consulClient(t, cl, webTok.SecretID).Connect().IntentionDeleteExact("web", "db", nil)
	want403(t, "deleting web->db with web's token", err)

	// A deleted token is refused by the server at once.
	if _, err := mgmt.ACLTokens().Delete(webTok.AccessorID, nil); err != nil {
		t.Fatal(err)
	}
	_, _, err = nomadClient(t, srv, webTok.SecretID).ACLTokens().Self(nil)
	want403(t, "the deleted token on the server", err)

	// The state survives the server's restart: the bootstrap token works,
	// a second bootstrap is refused.
	_ = cl.Shutdown()
	if err := srv.Shutdown(); err != nil {
		t.Fatal(err)
	}
	stopped = true
	srv = startAgentWith(t, srvDir, aclOn)
	t.Cleanup(func() { _ = srv.Shutdown() })
	if self, _, err := nomadClient(t, srv, boot.SecretID).ACLTokens().Self(nil); err != nil || self.AccessorID != boot.AccessorID {
		t.Errorf("the bootstrap token after a restart: %+v, %v", self, err)
	}
	if _, _, err := nomadClient(t, srv, "").ACLTokens().Bootstrap(nil); err == nil || !strings.Contains(err.Error(), acl.ErrBootstrapDone.Error()) {
		t.Errorf("a second bootstrap after a restart: %v, want %q", err, acl.ErrBootstrapDone)
	}
}

// errOf keeps the error of a (value, meta, error) call.
func errOf[V, M any](_ V, _ M, err error) error { return err }

// Without acl { enabled = true } nothing is enforced and the ACL routes
// say so, as Nomad's do.
func TestACLDisabled(t *testing.T) {
	a := startAgent(t, t.TempDir())
	t.Cleanup(func() { _ = a.Shutdown() })
	if _, _, err := nomadClient(t, a, "").Jobs().List(nil); err != nil {
		t.Errorf("job list without ACLs: %v", err)
	}
	_, _, err := nomadClient(t, a, "").ACLTokens().Bootstrap(nil)
	if err == nil || !strings.Contains(err.Error(), "ACL support disabled") {
		t.Errorf("bootstrap without ACLs: %v, want ACL support disabled", err)
	}
	if a.acl != nil || errors.Is(err, acl.ErrBootstrapDone) {
		t.Errorf("an ACL system was opened without acl.enabled")
	}
}

package acl

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	nomadapi "github.com/hashicorp/nomad/api"
	"google.golang.org/grpc/codes"

	"github.com/meshlet/meshlet/e2e/framework"
	"github.com/meshlet/meshlet/xds"
)

// Every injected sidecar gets a service identity token from the servers
// (secrets/si_token): it is its own service's identity and no more — its
// leaf on the leaf endpoint and over xDS on TCP, not another service's,
// no job registration — and the servers revoke it once the allocation
// has ended (the leader's sweep, here at the restarted agent's
// leadership).
func TestSidecarServiceIdentityToken(t *testing.T) {
	a := framework.NewAgent(t, framework.Options{})
	jobID := a.RunJob("input/mesh.hcl")
	allocs := a.RunningAllocs(jobID, 2)
	api := a.AllocByGroup(allocs, "api")
	apiProxy, dashProxy := proxyID(t, a, "count-api"), proxyID(t, a, "count-dashboard")
	files, _ := filepath.Glob(filepath.Join(a.DataDir, "*", "alloc", api.ID, "connect-proxy-count-api", "secrets", "si_token"))
	if len(files) != 1 {
		t.Fatalf("the api sidecar's si_token: found %v", files)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	si := strings.TrimSpace(string(b))

	nc, err := nomadapi.NewClient(&nomadapi.Config{Address: a.HTTPAddr, SecretID: si})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	self, _, err := nc.ACLTokens().Self(nil)
	if err != nil || self.Name != "_nomad_si [default] ["+api.ID+"] [connect-proxy-count-api]" || self.Type != "client" {
		t.Fatalf("acl token self with the sidecar's token = %+v, %v", self, err)
	}
	if r := a.CLIAs(si, "job", "run", "input/api-only.hcl"); !denied(r) {
		t.Errorf("the sidecar's token registered a job: exit %d: %s%s", r.Code, r.Stdout, r.Stderr)
	}

	cc, err := consulapi.NewClient(&consulapi.Config{Address: strings.TrimPrefix(a.ConnectAddr, "http://"), Token: si})
	if err != nil {
		t.Fatal(err)
	}
	if leaf, _, err := cc.Agent().ConnectCALeaf("count-api", nil); err != nil || leaf.PrivateKeyPEM == "" {
		t.Errorf("count-api's leaf with its sidecar's token: %v", err)
	}
	if _, _, err := cc.Agent().ConnectCALeaf("count-dashboard", nil); err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("count-dashboard's leaf with count-api's sidecar token: %v, want 403", err)
	}
	own, other := xds.LeafSecretName("count-api"), xds.LeafSecretName("count-dashboard")
	if n, code := sdsAsk(t, a, si, apiProxy, own); code != codes.OK || n != 1 {
		t.Errorf("xDS on TCP with the sidecar's token, its own leaf: %d secrets, %v", n, code)
	}
	if _, code := sdsAsk(t, a, si, dashProxy, other); code != codes.PermissionDenied {
		t.Errorf("xDS on TCP with count-api's sidecar token as count-dashboard's proxy: %v, want PermissionDenied", code)
	}

	a.MustCLI("job", "stop", jobID)
	a.Eventually(60*time.Second, "the allocations ended", func() bool {
		al, _, err := a.Nomad().Allocations().Info(api.ID, nil)
		return err == nil && al.ClientStatus == "complete"
	})
	a.Interrupt()
	a.Restart()
	a.Eventually(60*time.Second, "the ended allocation's token revoked", func() bool {
		_, _, err := nc.ACLTokens().Self(nil)
		return err != nil && strings.Contains(err.Error(), "ACL token not found")
	})
}

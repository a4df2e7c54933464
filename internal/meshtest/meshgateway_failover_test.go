package meshtest

import (
	"testing"

	consul "github.com/hashicorp/consul/api"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/configentry"
	"github.com/meshlet/meshlet/internal/echotest"
	"github.com/meshlet/meshlet/internal/testutil"
)

// A service-resolver failover to another datacenter follows the
// upstream's mesh gateway mode (Consul's behaviour): api has no instance
// in dc1, so web's calls fail over to dc2's api, through dc1's gateway
// then dc2's (mode local) or dc2's alone (remote), each time with dc2's
// SNI (the gateways route by it) and the mTLS end to end.
func TestMeshGatewayFailoverBuiltinProxy(t *testing.T) {
	t.Parallel()
	d := newTwoDCs(t)
	d.entries.Replace(configentry.NewSet(&consul.ServiceResolverConfigEntry{
		Kind: consul.ServiceResolver, Name: "api",
		Failover: map[string]consul.ServiceResolverFailover{"*": {Datacenters: []string{"dc2"}}},
	}), 1)
	app := echotest.Start(t, "api-dc2")
	d.service("dc2", "api", app.Port())
	gw2 := d.gateway("dc2")
	gw1 := d.gateway("dc1")
	upstream := func(mode string) catalog.Upstream {
		return catalog.Upstream{DestinationName: "api", LocalBindAddress: "127.0.0.1", LocalBindPort: freePort(t), MeshGatewayMode: mode}
	}
	local, remote := upstream("local"), upstream("remote")
	d.service("dc1", "web", freePort(t), local)
	d.service("dc1", "web-remote", freePort(t), remote)

	const viaDC2, toAPI = "tcp.mesh_gateway_remote.dc2.downstream_cx_total", "tcp.mesh_gateway_local.api.downstream_cx_total"
	greet := func(up catalog.Upstream) (string, error) {
		c, err := dialLine(loopback(up.LocalBindPort))
		if err != nil {
			return "", err
		}
		defer c.Close()
		return c.readLine()
	}
	testutil.WaitFor(t, waitTimeout, "web failing over to dc2's api through both gateways", func() bool {
		id, err := greet(local)
		return err == nil && id == "api-dc2"
	})
	if stat(t, gw1, viaDC2) < 1 || stat(t, gw2, toAPI) < 1 {
		t.Fatalf("mode local: dc1 gateway %s = %d, dc2 gateway %s = %d", viaDC2, stat(t, gw1, viaDC2), toAPI, stat(t, gw2, toAPI))
	}
	testutil.WaitFor(t, waitTimeout, "web-remote failing over to dc2's api", func() bool {
		id, err := greet(remote)
		return err == nil && id == "api-dc2"
	})
	b1, b2 := stat(t, gw1, viaDC2), stat(t, gw2, toAPI)
	if id, err := greet(remote); err != nil || id != "api-dc2" {
		t.Fatalf("web-remote -> api: %q, %v", id, err)
	}
	if a1, a2 := stat(t, gw1, viaDC2), stat(t, gw2, toAPI); a1 != b1 || a2 != b2+1 {
		t.Errorf("mode remote: dc1 gateway %d -> %d (want unchanged), dc2 gateway %d -> %d (want +1)", b1, a1, b2, a2)
	}
}

package meshtest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/ca"
	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/configentry"
	"github.com/meshlet/meshlet/connect"
	"github.com/meshlet/meshlet/controlplane"
	"github.com/meshlet/meshlet/intention"
	"github.com/meshlet/meshlet/internal/echotest"
	"github.com/meshlet/meshlet/internal/testutil"
	"github.com/meshlet/meshlet/sidecar"
)

// twoDCs is two datacenters as meshlet runs them: one catalog and one set
// of intentions (the cluster's), one control plane per datacenter's node
// serving that datacenter's proxies. dc1's holds the CA; dc2's is a CA in
// remote mode whose CSRs dc1's signs (as the servers sign a client's).
type twoDCs struct {
	t     *testing.T
	cat   *catalog.Catalog
	ix    *intention.Store
	plane map[string]*controlplane.ControlPlane
	// entries are the cluster's config entries, shared by both planes.
	entries *configentry.Registry
}

func newTwoDCs(t *testing.T) *twoDCs {
	t.Helper()
	ix, err := intention.New("", true, testLogger("ix"))
	if err != nil {
		t.Fatal(err)
	}
	d := &twoDCs{t: t, cat: catalog.New(), ix: ix, plane: map[string]*controlplane.ControlPlane{}, entries: configentry.NewRegistry()}
	d.start("dc1", nil)
	ca2, err := ca.New(ca.Config{Datacenter: "dc2", Signer: d.plane["dc1"].CA}, testLogger("ca2"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ca2.SetRoots(d.plane["dc1"].CA.Roots()); err != nil {
		t.Fatal(err)
	}
	d.start("dc2", ca2)
	return d
}

func (d *twoDCs) start(dc string, caMgr *ca.Manager) {
	d.t.Helper()
	cfg := controlplane.Config{
		Datacenter: dc, DefaultAllow: true, GRPCAddr: loopback(freePort(d.t)), HTTPAddr: "127.0.0.1:0",
		Logger: testLogger("cp-" + dc), CA: caMgr, Intentions: d.ix,
		LocalProxy:    func(inst catalog.ServiceInstance) bool { return inst.Datacenter == dc },
		ConfigEntries: d.entries,
	}
	if caMgr == nil {
		cfg.DataDir = d.t.TempDir()
	}
	cp, err := controlplane.New(cfg, d.cat)
	if err != nil {
		d.t.Fatal(err)
	}
	if err := cp.Start(); err != nil {
		d.t.Fatal(err)
	}
	d.t.Cleanup(func() { _ = cp.Stop() })
	d.plane[dc] = cp
}

// proxy starts the built-in proxy id on dc's control plane.
func (d *twoDCs) proxy(dc, id, cluster string) *sidecar.Proxy {
	d.t.Helper()
	p, err := sidecar.New(sidecar.Config{ProxyID: id, Cluster: cluster, XDSAddr: d.plane[dc].GRPCAddr(), AdminBind: "127.0.0.1:0",
		Delta: true, DrainTimeout: time.Second, Logger: testLogger(id)})
	if err != nil {
		d.t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		d.t.Fatal(err)
	}
	d.t.Cleanup(func() { _ = p.Close() })
	testutil.WaitFor(d.t, waitTimeout, id+" ready", p.Ready)
	return p
}

// gateway registers and starts dc's mesh gateway on 127.0.0.1:port.
func (d *twoDCs) gateway(dc string) *sidecar.Proxy {
	d.t.Helper()
	port := freePort(d.t)
	alloc := "mgw-" + dc
	id := connect.ServiceID(alloc, "gateway", "mesh-gateway", connect.MeshTaskName("mesh-gateway"))
	addr := catalog.TaggedAddress{Address: "127.0.0.1", Port: port}
	d.cat.Register(catalog.ServiceInstance{ID: id, Name: "mesh-gateway", Kind: catalog.KindMeshGateway, Address: "127.0.0.1", Port: port,
		AllocID: alloc, Datacenter: dc, Healthy: true, Proxy: &catalog.Proxy{DestinationServiceName: "mesh-gateway"},
		TaggedAddresses: map[string]catalog.TaggedAddress{catalog.TaggedLAN: addr, catalog.TaggedWAN: addr}})
	return d.proxy(dc, id, "mesh-gateway")
}

// service registers a connect service in dc (app and sidecar instances,
// as connect.Registrations shapes them) and starts its sidecar.
func (d *twoDCs) service(dc, name string, appPort int, ups ...catalog.Upstream) *sidecar.Proxy {
	d.t.Helper()
	in := &instance{name: name, service: name, appPort: appPort, publicPort: freePort(d.t), upstreams: ups}
	in.fill()
	for _, si := range in.registrations() {
		si.Datacenter = dc
		d.cat.Register(si)
	}
	return d.proxy(dc, in.proxyID, name)
}

// The built-in proxy as mesh gateways between two datacenters: web in dc1
// reaches api in dc2 through dc1's gateway then dc2's (mode local), or
// dc2's alone (remote); the gateways never terminate the mTLS (api's
// sidecar presents its dc2 leaf, which web's verifies), and a deny
// intention judged at api's sidecar refuses web's dc1 identity.
func TestMeshGatewaysBuiltinProxy(t *testing.T) {
	t.Parallel()
	d := newTwoDCs(t)
	app := echotest.Start(t, "api-0")
	api := d.service("dc2", "api", app.Port())
	// A gateway with nothing to route has no listener yet: start each once
	// it has a chain (dc2's: api; dc1's: dc2's gateway).
	gw2 := d.gateway("dc2")
	gw1 := d.gateway("dc1")
	upstream := func(mode string) catalog.Upstream {
		return catalog.Upstream{DestinationName: "api", Datacenter: "dc2", LocalBindAddress: "127.0.0.1", LocalBindPort: freePort(t), MeshGatewayMode: mode}
	}
	local, remote := upstream("local"), upstream("remote")
	web := d.service("dc1", "web", freePort(t), local)
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
	testutil.WaitFor(t, waitTimeout, "web reaching api through both gateways", func() bool {
		id, err := greet(local)
		return err == nil && id == "api-0"
	})
	if stat(t, gw1, viaDC2) < 1 || stat(t, gw2, toAPI) < 1 {
		t.Fatalf("mode local: dc1 gateway %s = %d, dc2 gateway %s = %d", viaDC2, stat(t, gw1, viaDC2), toAPI, stat(t, gw2, toAPI))
	}
	testutil.WaitFor(t, waitTimeout, "web-remote reaching api", func() bool {
		id, err := greet(remote)
		return err == nil && id == "api-0"
	})
	b1, b2 := stat(t, gw1, viaDC2), stat(t, gw2, toAPI)
	if id, err := greet(remote); err != nil || id != "api-0" {
		t.Fatalf("web-remote -> api: %q, %v", id, err)
	}
	if a1, a2 := stat(t, gw1, viaDC2), stat(t, gw2, toAPI); a1 != b1 || a2 != b2+1 {
		t.Errorf("mode remote: dc1 gateway %d -> %d (want unchanged), dc2 gateway %d -> %d (want +1)", b1, a1, b2, a2)
	}

	// Identities: each sidecar presents its datacenter's leaf (web's
	// verifies api's dc2 one: the connections above passed that check).
	for p, want := range map[*sidecar.Proxy]string{web: "/dc/dc1/svc/web", api: "/dc/dc2/svc/api"} {
		svc := want[strings.LastIndex(want, "/")+1:]
		if leaf := servedLeaf(t, p, svc); len(leaf.URIs) != 1 || !strings.HasSuffix(leaf.URIs[0].String(), want) {
			t.Errorf("%s's sidecar presents %v, want …%s", svc, leaf.URIs, want)
		}
	}
	if _, err := d.ix.Upsert(intention.Intention{SourceName: "web", DestinationName: "api", Action: "deny"}, false); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, waitTimeout, "the deny refusing web across datacenters", func() bool {
		_, err := greet(local)
		return err != nil
	})
	if id, err := greet(remote); err != nil || id != "api-0" {
		t.Errorf("web-remote (allowed) refused too: %q, %v", id, err)
	}
	if n := stat(t, api, "ext_authz.connect_authz.denied"); n < 1 {
		t.Errorf("api's sidecar denied nothing (%d): the deny must be judged at the destination", n)
	}
}

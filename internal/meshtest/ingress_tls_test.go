package meshtest

import (
	"strings"
	"testing"

	consul "github.com/hashicorp/consul/api"

	"github.com/meshlet/meshlet/configentry"
	"github.com/meshlet/meshlet/internal/testutil"
)

// The built-in proxy cannot fetch a certificate from an external SDS
// server: an ingress listener whose tls block names one is refused with a
// clear NACK over the real xDS stream, and the gateway keeps serving its
// last good configuration.
func TestIngressExternalSDSRefusedByBuiltinProxy(t *testing.T) {
	t.Parallel()
	m := newMesh(t, 1)
	tcpPort := freePort(t)
	entry := &consul.IngressGatewayConfigEntry{Kind: configentry.IngressGateway, Name: "ingress-sds", Listeners: []consul.IngressListener{
		{Port: tcpPort, Protocol: "tcp", Services: []consul.IngressService{{Name: "db"}}},
	}}
	gw := m.startGateway(entry)
	reachesDB := func() bool {
		c, err := dialLine(loopback(tcpPort))
		if err != nil {
			return false
		}
		defer c.Close()
		line, err := c.readLine()
		return err == nil && line == "db-0"
	}
	testutil.WaitFor(t, waitTimeout, "db through the plaintext tcp listener", reachesDB)

	withSDS := *entry
	withSDS.TLS = consul.GatewayTLSConfig{SDS: &consul.GatewayTLSSDSConfig{ClusterName: "sds-cluster", CertResource: "db-cert"}}
	set, idx := m.entries.Current()
	if err := set.Check(&withSDS); err != nil {
		t.Fatal(err)
	}
	m.entries.Replace(set.With(&withSDS), idx+1)
	var detail string
	testutil.WaitFor(t, waitTimeout, "the gateway's NACK of the external SDS listener", func() bool {
		for _, d := range m.cp.XDS.ProxyStatus(gw.id).Rejected {
			detail = d
			if strings.Contains(d, "external SDS server (api_config_source) is not supported by the built-in proxy") {
				return true
			}
		}
		return false
	})
	if !reachesDB() {
		t.Fatalf("the gateway dropped its last good listener after the NACK (%s)", detail)
	}
}

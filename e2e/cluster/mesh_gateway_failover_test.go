package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// checkFailoverThroughGateways: web-failover's upstream is api in dc1,
// which has no instance; a service-resolver fails api over to dc2, and
// that failover target follows the upstream's mode (local): the call
// passes dc1's gateway then dc2's, with dc2's SNI.
func checkFailoverThroughGateways(t *testing.T, e *meshGatewayEnv) {
	t.Helper()
	const remoteDC2, localAPI = "tcp.mesh_gateway_remote.dc2.downstream_cx_total", "tcp.mesh_gateway_local.api.downstream_cx_total"
	path := filepath.Join(e.c.certDir, "api-resolver.hcl")
	body := "Kind = \"service-resolver\"\nName = \"api\"\nFailover = {\n  \"*\" = {\n    Datacenters = [\"dc2\"]\n  }\n}\n"
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := e.c.CLIOnHost(e.s1, "config", "write", path); err != nil {
		t.Fatalf("config write api resolver: %v\n%s", err, out)
	}
	var b1, b2, a1, a2 int
	poll(t, 60*time.Second, "web-failover reaching dc2's api through both gateways", func() (bool, string) {
		b1, b2 = e.proxyCounter(t, e.gw1, remoteDC2), e.proxyCounter(t, e.gw2, localAPI)
		ok, out := e.call(e.webFailover, "web", 9194, "failover")
		a1, a2 = e.proxyCounter(t, e.gw1, remoteDC2), e.proxyCounter(t, e.gw2, localAPI)
		return ok && a1 == b1+1 && a2 == b2+1, fmt.Sprintf("%s; dc1 gateway %d -> %d, dc2 gateway %d -> %d", out, b1, a1, b2, a2)
	})
}

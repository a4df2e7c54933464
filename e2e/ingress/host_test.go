package ingress

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	consul "github.com/hashicorp/consul/api"

	"github.com/meshlet/meshlet/e2e/framework"
	"github.com/meshlet/meshlet/internal/testutil"
)

// TestIngressHostNetwork: an ingress gateway in host network mode binds
// its listeners in the host's namespace on 127.0.0.1 only (no default
// bind, one named bind address), reachable without any port mapping.
func TestIngressHostNetwork(t *testing.T) {
	a := framework.NewAgent(t, framework.Options{})
	tcpPort, httpPort := testutil.FreePort(t), testutil.FreePort(t)
	src := strings.NewReplacer("TCP_PORT", strconv.Itoa(tcpPort), "HTTP_PORT", strconv.Itoa(httpPort))
	job := a.RunJob(writeJob(t, "input/ingress-host.hcl", src))
	allocs := a.RunningAllocs(job, 2)
	gw := a.AllocByGroup(allocs, "gateway")
	tcpAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(tcpPort))
	httpAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(httpPort))

	a.Eventually(60*time.Second, "echo through the host-mode gateway's tcp listener", func() bool { ok, _ := echoTCP(tcpAddr); return ok })
	a.Eventually(30*time.Second, "hostweb through the host-mode gateway", func() bool {
		code, body, err := getHost(httpAddr, "hostweb.ingress.consul")
		return err == nil && code == http.StatusOK && body == "hostweb"
	})
	// Bound on 127.0.0.1 only: another loopback address is refused.
	for _, port := range []int{tcpPort, httpPort} {
		if c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.3", strconv.Itoa(port)), time.Second); err == nil {
			c.Close()
			t.Fatalf("the gateway answers on 127.0.0.3:%d: it bound more than 127.0.0.1", port)
		}
	}
	out := a.MustCLI("alloc", "status", gw.ID)
	if !strings.Contains(out, `Task "connect-ingress-ingress-host"`) {
		t.Errorf("alloc status lacks the gateway task:\n%s", out)
	}
	entries, _, err := a.Consul().Health().Service("ingress-host", "", false, nil)
	if err != nil || len(entries) != 1 || entries[0].Service.Kind != consul.ServiceKindIngressGateway || entries[0].Service.Port != tcpPort {
		t.Fatalf("health/service/ingress-host = %+v, %v (want its first listener's port)", entries, err)
	}
	// Its admin listener is on 127.0.0.2 and a dynamic port of its own.
	alloc, _, err := a.Nomad().Allocations().Info(gw.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	admin := 0
	for _, p := range alloc.AllocatedResources.Shared.Ports {
		if p.Label == "connect-admin-ingress-host" {
			admin = p.Value
		}
	}
	if admin == 0 {
		t.Fatalf("no connect-admin-ingress-host port in %+v", alloc.AllocatedResources.Shared.Ports)
	}
	if c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.2", strconv.Itoa(admin)), time.Second); err != nil {
		t.Errorf("admin listener 127.0.0.2:%d: %v", admin, err)
	} else {
		c.Close()
	}
}

// writeJob writes the jobspec at path with r's replacements applied.
func writeJob(t *testing.T, path string, r *strings.Replacer) string {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), filepath.Base(path))
	if err := os.WriteFile(out, []byte(r.Replace(string(src))), 0o600); err != nil {
		t.Fatal(err)
	}
	return out
}

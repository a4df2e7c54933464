package command

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	consul "github.com/hashicorp/consul/api"

	"github.com/meshlet/meshlet/configentry"
)

// `config write` takes an ingress-gateway entry in Consul's HCL.
func TestConfigWriteIngressGateway(t *testing.T) {
	reg := newConfigAPI(t)
	path := filepath.Join(t.TempDir(), "ingress.hcl")
	src := `Kind = "ingress-gateway"
Name = "ingress"
Listeners = [
  {
    Port     = 8080
    Protocol = "http"
    Services = [{ Name = "web", Hosts = ["web.example.com"] }]
  }
]
`
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := runCLI(t, "", "config", "write", path); r.code != 0 || r.stdout != "Config entry written: ingress-gateway/ingress\n" {
		t.Fatalf("config write: %d %q %q", r.code, r.stdout, r.stderr)
	}
	set, _ := reg.Current()
	e, ok := set.Get(configentry.IngressGateway, "ingress").(*consul.IngressGatewayConfigEntry)
	if !ok || len(e.Listeners) != 1 || e.Listeners[0].Services[0].Hosts[0] != "web.example.com" {
		t.Fatalf("stored entry = %+v", set.Get(configentry.IngressGateway, "ingress"))
	}
	if r := runCLI(t, "", "config", "list", "-kind", "ingress-gateway"); r.code != 0 || strings.TrimSpace(r.stdout) != "ingress" {
		t.Fatalf("config list: %d %q %q", r.code, r.stdout, r.stderr)
	}
}

package command

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	consul "github.com/hashicorp/consul/api"

	"github.com/meshlet/meshlet/configentry"
)

// `config write` takes a terminating-gateway entry in Consul's HCL.
func TestConfigWriteTerminatingGateway(t *testing.T) {
	reg := newConfigAPI(t)
	path := filepath.Join(t.TempDir(), "tgw.hcl")
	src := `Kind = "terminating-gateway"
Name = "tgw"
Services = [
  { Name = "db" },
  { Name = "api", CAFile = "/etc/ssl/ca.pem", SNI = "api.example.com" }
]
`
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := runCLI(t, "", "config", "write", path); r.code != 0 || r.stdout != "Config entry written: terminating-gateway/tgw\n" {
		t.Fatalf("config write: %d %q %q", r.code, r.stdout, r.stderr)
	}
	set, _ := reg.Current()
	e, ok := set.Get(configentry.TerminatingGateway, "tgw").(*consul.TerminatingGatewayConfigEntry)
	if !ok || len(e.Services) != 2 || e.Services[1].SNI != "api.example.com" || e.Services[1].CAFile != "/etc/ssl/ca.pem" {
		t.Fatalf("stored entry = %+v", set.Get(configentry.TerminatingGateway, "tgw"))
	}
	if r := runCLI(t, "", "config", "list", "-kind", "terminating-gateway"); r.code != 0 || strings.TrimSpace(r.stdout) != "tgw" {
		t.Fatalf("config list: %d %q %q", r.code, r.stdout, r.stderr)
	}
}

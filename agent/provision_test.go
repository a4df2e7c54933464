package agent

import (
	"os/exec"
	"testing"
)

// The cluster members scripts/provision.sh configures (the Vagrant
// cluster) parse as agent configurations and run with ACLs, and with TLS
// on the RPC port and both HTTP APIs.
func TestProvisionedConfigs(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash is not installed")
	}
	for _, m := range []struct{ role, name, ip string }{
		{"server", "s1", "192.168.56.11"}, {"server", "s2", "192.168.56.12"},
		{"client", "c1", "192.168.56.21"}, {"both", "s1", "192.168.56.11"},
	} {
		t.Run(m.role+"_"+m.name, func(t *testing.T) {
			out, err := exec.Command("bash", "-c", `source ../scripts/provision.sh && agent_config "$@"`, "provision",
				m.role, m.name, m.ip, "192.168.56.11,192.168.56.12").CombinedOutput()
			if err != nil {
				t.Fatalf("agent_config: %v\n%s", err, out)
			}
			cfg, err := ParseConfig(m.name+".hcl", out)
			if err != nil {
				t.Fatalf("the provisioned configuration does not parse: %v\n%s", err, out)
			}
			if !cfg.ACL.Enabled || !cfg.TLS.RPC || !cfg.TLS.HTTP || !cfg.TLS.VerifyServerHostname {
				t.Errorf("acl %+v, tls %+v: want ACLs and TLS for RPC and HTTP", cfg.ACL, cfg.TLS)
			}
			if cfg.BindAddr != m.ip || cfg.NodeName != m.name {
				t.Errorf("bind_addr %q node_name %q", cfg.BindAddr, cfg.NodeName)
			}
		})
	}
}

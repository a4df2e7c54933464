package command

import (
	"net"
	"strings"
	"testing"
)

// TestNomadAndConsulAddrEnv: without MESHLET_ADDR the CLI finds the agent
// through Nomad's NOMAD_ADDR (and the connect API through Consul's
// CONSUL_HTTP_ADDR), as it already takes NOMAD_TOKEN and NOMAD_CACERT
// (CONSUL_HTTP_TOKEN, CONSUL_CACERT) meant for that address; MESHLET_
// variables and the flags still win.
func TestNomadAndConsulAddrEnv(t *testing.T) {
	clearTLSEnv(t)
	for _, v := range []string{"MESHLET_TOKEN", "NOMAD_TOKEN", "CONSUL_HTTP_TOKEN"} {
		t.Setenv(v, "")
	}
	newAgent(t)
	newConnectAPI(t)
	t.Setenv("NOMAD_ADDR", envOr("", "MESHLET_ADDR"))
	t.Setenv("CONSUL_HTTP_ADDR", envOr("", "MESHLET_CONNECT_ADDR"))
	t.Setenv("MESHLET_ADDR", "")
	t.Setenv("MESHLET_CONNECT_ADDR", "")
	if r := runCLI(t, "", "job", "status"); r.code != 0 || !strings.Contains(r.stdout, "No running jobs") {
		t.Errorf("job status with NOMAD_ADDR: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r := runCLI(t, "", "intention", "list"); r.code != 0 {
		t.Errorf("intention list with CONSUL_HTTP_ADDR: exit %d %q %q", r.code, r.stdout, r.stderr)
	}

	// A closed port: MESHLET_ADDR (and -address) are preferred to NOMAD_ADDR.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	if r := runCLI(t, "", "job", "status", "-address", dead); r.code != 1 || !strings.Contains(r.stderr, ln.Addr().String()) {
		t.Errorf("-address did not win over NOMAD_ADDR: exit %d %q", r.code, r.stderr)
	}
	t.Setenv("MESHLET_ADDR", dead)
	if r := runCLI(t, "", "job", "status"); r.code != 1 || !strings.Contains(r.stderr, ln.Addr().String()) {
		t.Errorf("MESHLET_ADDR did not win over NOMAD_ADDR: exit %d %q", r.code, r.stderr)
	}
	t.Setenv("MESHLET_CONNECT_ADDR", dead)
	if r := runCLI(t, "", "intention", "list"); r.code != 1 || !strings.Contains(r.stderr, ln.Addr().String()) {
		t.Errorf("MESHLET_CONNECT_ADDR did not win over CONSUL_HTTP_ADDR: exit %d %q", r.code, r.stderr)
	}
}

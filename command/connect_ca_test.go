package command

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	consul "github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/ca"
	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/consulapi"
)

// newCAConnectAPI serves the real Consul-shaped API over a real in-memory
// CA (it rotates itself) and points MESHLET_CONNECT_ADDR at it.
func newCAConnectAPI(t *testing.T) *ca.Manager {
	t.Helper()
	m, err := ca.New(ca.Config{LeafTTL: 3 * time.Hour}, hclog.NewNullLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	srv := consulapi.NewServer(consulapi.Deps{Catalog: catalog.New(), CA: m}, hclog.NewNullLogger())
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	t.Setenv("MESHLET_CONNECT_ADDR", hs.URL)
	return m
}

// get-config prints Consul's CAConfig; its output fed to set-config
// rotates the root.
func TestConnectCAGetSetConfig(t *testing.T) {
	m := newCAConnectAPI(t)
	r := runCLI(t, "", "connect", "ca", "get-config")
	if r.code != 0 {
		t.Fatalf("get-config: exit %d stderr %q", r.code, r.stderr)
	}
	var cfg consul.CAConfig
	if err := json.Unmarshal([]byte(r.stdout), &cfg); err != nil {
		t.Fatalf("get-config output is not a CAConfig: %v\n%s", err, r.stdout)
	}
	if cfg.Provider != "consul" || cfg.Config["LeafCertTTL"] != "3h0m0s" || cfg.ModifyIndex == 0 || !strings.Contains(r.stdout, "\n\t\"Provider\": \"consul\"") {
		t.Fatalf("get-config = %+v\n%s", cfg, r.stdout)
	}
	before := m.Roots().ActiveRootID

	path := writeFile(t, "ca.json", r.stdout)
	r = runCLI(t, "", "connect", "ca", "set-config", "-config-file", path)
	if r.code != 0 || r.stdout != "Configuration updated!\n" {
		t.Fatalf("set-config: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	if rs := m.Roots(); len(rs.Roots) != 2 || rs.ActiveRootID == before {
		t.Fatalf("after set-config: %d roots, active %s (was %s); want a rotation", len(rs.Roots), rs.ActiveRootID, before)
	}
	r = runCLI(t, "", "connect", "ca", "get-config")
	var again consul.CAConfig
	if err := json.Unmarshal([]byte(r.stdout), &again); err != nil || again.ModifyIndex <= cfg.ModifyIndex {
		t.Fatalf("get-config after the rotation: %+v (%v), want ModifyIndex above %d", again, err, cfg.ModifyIndex)
	}
}

// Refusals: another provider (the API names the supported one), a missing
// or bad file, no flag, an unreachable agent. None rotates.
func TestConnectCASetConfigErrors(t *testing.T) {
	m := newCAConnectAPI(t)
	vault := writeFile(t, "vault.json", `{"Provider": "vault", "Config": {"Address": "http://127.0.0.1:8200"}}`)
	bad := writeFile(t, "bad.json", `{"Provider": `)
	for _, tc := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"-config-file", vault}, `Error: failed to set the CA configuration: bad request: CA provider "vault" is not supported: meshlet's built-in CA is provider "consul" (HTTP 400)`},
		{[]string{"-config-file", bad}, "Error: failed to parse the config file"},
		{[]string{"-config-file", vault + ".missing"}, "Error: failed to read the config file"},
		{nil, "Error: the -config-file flag is required\nUsage: meshlet connect ca set-config -config-file FILE [options]"},
		{[]string{"-config-file", vault, "extra"}, "Error: connect ca set-config takes no arguments"},
		{[]string{"-connect-address", "http://127.0.0.1:1", "-config-file", writeFile(t, "ok.json", `{"Provider":"consul"}`)},
			"cannot reach the connect API at http://127.0.0.1:1"},
	} {
		r := runCLI(t, "", append([]string{"connect", "ca", "set-config"}, tc.args...)...)
		if r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, tc.stderr) {
			t.Errorf("set-config %v: exit %d stdout %q stderr %q; want 1 and %q", tc.args, r.code, r.stdout, r.stderr, tc.stderr)
		}
	}
	if n := len(m.Roots().Roots); n != 1 {
		t.Fatalf("refused set-configs rotated the root: %d roots", n)
	}
	r := runCLI(t, "", "connect", "ca", "get-config", "-connect-address", "127.0.0.1:1")
	if r.code != 1 || !strings.Contains(r.stderr, "cannot reach the connect API at 127.0.0.1:1") {
		t.Errorf("get-config unreachable: exit %d stderr %q", r.code, r.stderr)
	}
}

// `connect ca` lists its subcommands; each has help; `connect -h` shows them.
func TestConnectCAHelp(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{[]string{"connect", "ca", "-h"}, 0, "get-config  Display the mesh CA configuration", ""},
		{[]string{"connect", "ca"}, 1, "", "set-config  Rotate the mesh CA root"},
		{[]string{"connect", "ca", "rotate"}, 1, "", "Error: unknown command \"connect ca rotate\""},
		{[]string{"connect", "ca", "set-config", "-h"}, 0, "Every accepted set-config ROTATES the cluster's CA root", ""},
		{[]string{"connect", "ca", "get-config", "-h"}, 0, "-connect-address URL", ""},
		{[]string{"connect", "-h"}, 0, "ca set-config", ""},
	} {
		r := runCLI(t, "", tc.args...)
		if r.code != tc.code || !strings.Contains(r.stdout, tc.stdout) || !strings.Contains(r.stderr, tc.stderr) {
			t.Errorf("%v: exit %d stdout %q stderr %q", tc.args, r.code, r.stdout, r.stderr)
		}
	}
}

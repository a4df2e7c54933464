package controlplane

import (
	"strings"
	"testing"

	consulapi "github.com/hashicorp/consul/api"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/configentry"
	"github.com/meshlet/meshlet/intention"
)

// An entry written through the Consul-shaped API lands in the registry
// the control plane was given (the one xDS compiles), and authz takes
// destinations' protocols from it: an L7 intention admits a connection
// exactly when the registry says the destination speaks HTTP.
func TestConfigEntriesReachRegistryAndAuthz(t *testing.T) {
	reg := configentry.NewRegistry()
	cp, err := New(Config{DataDir: t.TempDir(), DefaultAllow: false, GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		ConfigEntries: reg}, catalog.New())
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Stop() })
	if _, err := cp.Intentions.Upsert(intention.Intention{SourceName: "web", DestinationName: "api", Permissions: []*intention.Permission{
		{Action: "allow", HTTP: &intention.HTTPPermission{PathPrefix: "/"}},
	}}, true); err != nil {
		t.Fatal(err)
	}
	src := cp.CA.SpiffeID("web")
	if d, err := cp.Authz.Authorize(src, "api"); err != nil || d.Allowed {
		t.Fatalf("Authorize before any entry = %+v, %v; want refused (tcp)", d, err)
	}

	client, err := consulapi.NewClient(&consulapi.Config{Address: cp.HTTPAddr()})
	if err != nil {
		t.Fatal(err)
	}
	ok, _, err := client.ConfigEntries().Set(&consulapi.ServiceConfigEntry{Kind: consulapi.ServiceDefaults, Name: "api", Protocol: "http"}, nil)
	if err != nil || !ok {
		t.Fatalf("Set = %v, %v", ok, err)
	}
	set, index := reg.Current()
	if set.Get(configentry.ServiceDefaults, "api") == nil || index == 0 {
		t.Fatalf("registry after the write = %v at %d", set.List(""), index)
	}
	d, err := cp.Authz.Authorize(src, "api")
	httpDest := set.Protocol("api") == "http"
	if err != nil || d.Allowed != httpDest || (httpDest && !strings.Contains(d.Reason, "per-request")) {
		t.Fatalf("Authorize with protocol %q = %+v, %v", set.Protocol("api"), d, err)
	}
}

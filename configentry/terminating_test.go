package configentry

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	consul "github.com/hashicorp/consul/api"
)

func TestTerminatingGatewayParse(t *testing.T) {
	src := `Kind = "terminating-gateway"
Name = "tgw"
Services = [
  { Name = "db" },
  {
    name = "api"
    ca_file = "/etc/ssl/ca.pem"
    CertFile = "/etc/ssl/cert.pem"
    KeyFile = "/etc/ssl/key.pem"
    SNI = "api.example.com"
  },
]
`
	e, err := Parse("tgw.hcl", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(e); err != nil {
		t.Fatal(err)
	}
	want := &consul.TerminatingGatewayConfigEntry{Kind: TerminatingGateway, Name: "tgw", Services: []consul.LinkedService{
		{Name: "db"},
		{Name: "api", CAFile: "/etc/ssl/ca.pem", CertFile: "/etc/ssl/cert.pem", KeyFile: "/etc/ssl/key.pem", SNI: "api.example.com"},
	}}
	if !reflect.DeepEqual(e, want) {
		t.Errorf("entry:\n got %+v\nwant %+v", e, want)
	}
	set := NewSet()
	if err := set.Check(e); err != nil {
		t.Errorf("Check: %v", err)
	}
}

func TestTerminatingGatewayLinks(t *testing.T) {
	set := NewSet(
		&consul.TerminatingGatewayConfigEntry{Kind: TerminatingGateway, Name: "b", Services: []consul.LinkedService{{Name: "db"}}},
		&consul.TerminatingGatewayConfigEntry{Kind: TerminatingGateway, Name: "a", Services: []consul.LinkedService{{Name: "db"}, {Name: "api", CAFile: "ca"}}},
	)
	want := map[string][]string{"db": {"a", "b"}, "api": {"a"}}
	if got := set.LinkedGateways(); !reflect.DeepEqual(got, want) {
		t.Errorf("LinkedGateways = %v, want %v", got, want)
	}
	if ls, ok := set.LinkedService("a", "api"); !ok || ls.CAFile != "ca" {
		t.Errorf("LinkedService(a, api) = %+v, %v", ls, ok)
	}
	if _, ok := set.LinkedService("b", "api"); ok {
		t.Error("api is not linked to b")
	}
}

func TestTerminatingGatewayValidate(t *testing.T) {
	tests := []struct {
		name string
		svcs []consul.LinkedService
		want string
	}{
		{"blank", []consul.LinkedService{{}}, "Services[0].Name: service name cannot be blank"},
		{"wildcard", []consul.LinkedService{{Name: "*"}}, `Services[0]: the wildcard service "*" is not supported by meshlet yet`},
		{"twice", []consul.LinkedService{{Name: "a"}, {Name: "a"}}, `Services[1].Name: service "a" was specified more than once`},
		{"cert without ca", []consul.LinkedService{{Name: "a", CertFile: "c", KeyFile: "k"}}, `service "a" must have a CertFile, CAFile, and KeyFile specified for TLS origination`},
		{"key without cert", []consul.LinkedService{{Name: "a", CAFile: "ca", KeyFile: "k"}}, `service "a" must have a CertFile, CAFile, and KeyFile specified for TLS origination`},
		{"sni without ca", []consul.LinkedService{{Name: "a", SNI: "a.example"}}, `service "a": SNI was specified, but CAFile was not`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate(&consul.TerminatingGatewayConfigEntry{Kind: TerminatingGateway, Name: "g", Services: tc.svcs})
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v\nwant %q", err, tc.want)
			}
		})
	}
}

func TestTerminatingGatewayACL(t *testing.T) {
	if Allowed(ingressACL{serviceRead: true}, TerminatingGateway, "g", true) {
		t.Error("service write allowed writing a terminating-gateway entry")
	}
	if !Allowed(ingressACL{meshWrite: true}, TerminatingGateway, "g", true) || !Allowed(ingressACL{serviceRead: true}, TerminatingGateway, "g", false) {
		t.Error("mesh write may write, service read may read")
	}
}

// readOnly may write service entries on any name and read only "web".
type readOnly struct{ ingressACL }

func (readOnly) AllowServiceRead(name string) bool { return name == "web" }

// A discovery-chain entry also needs service read on every other service
// it sends traffic to (Consul's canWriteDiscoveryChain).
func TestWriteAllowedDiscoveryChain(t *testing.T) {
	a := readOnly{}
	for _, c := range []struct {
		e    consul.ConfigEntry
		want bool
	}{
		{&consul.ServiceRouterConfigEntry{Kind: consul.ServiceRouter, Name: "web", Routes: []consul.ServiceRoute{
			{Destination: &consul.ServiceRouteDestination{Service: "web"}}}}, true},
		{&consul.ServiceRouterConfigEntry{Kind: consul.ServiceRouter, Name: "web", Routes: []consul.ServiceRoute{
			{Destination: &consul.ServiceRouteDestination{Service: "db"}}}}, false},
		{&consul.ServiceSplitterConfigEntry{Kind: consul.ServiceSplitter, Name: "web", Splits: []consul.ServiceSplit{
			{Weight: 50}, {Weight: 50, Service: "db"}}}, false},
		{&consul.ServiceResolverConfigEntry{Kind: consul.ServiceResolver, Name: "web", Redirect: &consul.ServiceResolverRedirect{Service: "db"}}, false},
		{&consul.ServiceResolverConfigEntry{Kind: consul.ServiceResolver, Name: "web", Failover: map[string]consul.ServiceResolverFailover{
			"*": {Targets: []consul.ServiceResolverFailoverTarget{{Service: "db"}}}}}, false},
		{&consul.ServiceResolverConfigEntry{Kind: consul.ServiceResolver, Name: "web", Failover: map[string]consul.ServiceResolverFailover{
			"*": {Datacenters: []string{"dc2"}}}}, true},
	} {
		if got := WriteAllowed(a, c.e); got != c.want {
			t.Errorf("WriteAllowed(%s %s → %v) = %v, want %v", c.e.GetKind(), c.e.GetName(), relatedServices(c.e), got, c.want)
		}
	}
}

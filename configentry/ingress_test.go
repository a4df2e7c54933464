package configentry

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	consul "github.com/hashicorp/consul/api"
)

func TestIngressGatewayParse(t *testing.T) {
	src := `Kind = "ingress-gateway"
Name = "ingress"
Listeners = [
  {
    Port = 8080
    Services = [{ Name = "api" }]
  },
  {
    port = 8081
    protocol = "HTTP"
    services = [
      { name = "web", hosts = ["web.example.com"] },
      { Name = "dash" },
    ]
  },
]
`
	e, err := Parse("ingress.hcl", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(e); err != nil {
		t.Fatal(err)
	}
	want := &consul.IngressGatewayConfigEntry{Kind: IngressGateway, Name: "ingress", Listeners: []consul.IngressListener{
		{Port: 8080, Protocol: "tcp", Services: []consul.IngressService{{Name: "api"}}},
		{Port: 8081, Protocol: "http", Services: []consul.IngressService{{Name: "web", Hosts: []string{"web.example.com"}}, {Name: "dash"}}},
	}}
	if !reflect.DeepEqual(e, want) {
		t.Errorf("entry:\n got %+v\nwant %+v", e, want)
	}
	if err := NewSet().Check(e); err != nil {
		t.Errorf("Check: %v", err)
	}
}

func TestIngressGatewayValidate(t *testing.T) {
	l := func(port int, prot string, svcs ...consul.IngressService) consul.IngressListener {
		return consul.IngressListener{Port: port, Protocol: prot, Services: svcs}
	}
	svc := func(name string, hosts ...string) consul.IngressService {
		return consul.IngressService{Name: name, Hosts: hosts}
	}
	tests := []struct {
		name string
		e    *consul.IngressGatewayConfigEntry
		want string
	}{
		{"tls version", &consul.IngressGatewayConfigEntry{Name: "g", TLS: consul.GatewayTLSConfig{Enabled: true, TLSMinVersion: "TLSv1_4"}}, `ingress-gateway/g: TLS.TLSMinVersion "TLSv1_4" is not one of`},
		{"tls min above max", &consul.IngressGatewayConfigEntry{Name: "g", TLS: consul.GatewayTLSConfig{Enabled: true, TLSMinVersion: "TLSv1_3", TLSMaxVersion: "TLSv1_2"}}, "TLS: TLSMinVersion TLSv1_3 is above TLSMaxVersion TLSv1_2"},
		{"tls ciphers 1.3", &consul.IngressGatewayConfigEntry{Name: "g", TLS: consul.GatewayTLSConfig{Enabled: true, TLSMinVersion: "TLSv1_3", CipherSuites: []string{"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"}}}, "only applicable to connections negotiated with TLS 1.2 or earlier"},
		{"tls cipher", &consul.IngressGatewayConfigEntry{Name: "g", TLS: consul.GatewayTLSConfig{Enabled: true, CipherSuites: []string{"TLS_RSA_WITH_RC4_128_SHA"}}}, `TLS.CipherSuites: "TLS_RSA_WITH_RC4_128_SHA" is not a supported cipher suite`},
		{"listener tls", &consul.IngressGatewayConfigEntry{Name: "g", Listeners: []consul.IngressListener{{Port: 1, Protocol: "tcp", Services: []consul.IngressService{svc("a")}, TLS: &consul.GatewayTLSConfig{TLSMaxVersion: "SSLv3"}}}}, `Listeners[0].TLS.TLSMaxVersion "SSLv3"`},
		{"sds half", &consul.IngressGatewayConfigEntry{Name: "g", TLS: consul.GatewayTLSConfig{SDS: &consul.GatewayTLSSDSConfig{ClusterName: "sds"}}, Listeners: []consul.IngressListener{l(1, "tcp", svc("a"))}}, "Listeners[0].TLS.SDS: both ClusterName and CertResource are required"},
		{"service sds tcp", &consul.IngressGatewayConfigEntry{Name: "g", Listeners: []consul.IngressListener{{Port: 1, Protocol: "tcp", Services: []consul.IngressService{{Name: "a", TLS: &consul.GatewayServiceTLSConfig{SDS: &consul.GatewayTLSSDSConfig{ClusterName: "c", CertResource: "r"}}}}}}}, `Listeners[0].Services[0].TLS: a service's own TLS is only valid on http, http2 and grpc listeners`},
		{"service sds no hosts", &consul.IngressGatewayConfigEntry{Name: "g", Listeners: []consul.IngressListener{{Port: 1, Protocol: "http", Services: []consul.IngressService{{Name: "a", TLS: &consul.GatewayServiceTLSConfig{SDS: &consul.GatewayTLSSDSConfig{ClusterName: "c", CertResource: "r"}}}}}}}, `Listeners[0].Services[0].TLS.SDS: a service's certificate from SDS needs a CertResource and hosts`},
		{"service sds no cluster", &consul.IngressGatewayConfigEntry{Name: "g", Listeners: []consul.IngressListener{{Port: 1, Protocol: "http", Services: []consul.IngressService{{Name: "a", Hosts: []string{"a.com"}, TLS: &consul.GatewayServiceTLSConfig{SDS: &consul.GatewayTLSSDSConfig{CertResource: "r"}}}}}}}, `Listeners[0].Services[0].TLS.SDS: no ClusterName, and none on the listener or the gateway to default to`},
		{"tls star host", &consul.IngressGatewayConfigEntry{Name: "g", TLS: consul.GatewayTLSConfig{Enabled: true}, Listeners: []consul.IngressListener{l(1, "http", svc("a", "*"))}}, `Listeners[0].Services[0].Hosts: "*" is not allowed when TLS is enabled`},
		{"port", &consul.IngressGatewayConfigEntry{Name: "g", Listeners: []consul.IngressListener{l(0, "tcp", svc("a"))}}, "Listeners[0].Port 0 is out of range 1-65535"},
		{"duplicate port", &consul.IngressGatewayConfigEntry{Name: "g", Listeners: []consul.IngressListener{l(1, "tcp", svc("a")), l(1, "tcp", svc("b"))}}, "Listeners[1].Port 1: listeners must have unique ports"},
		{"protocol", &consul.IngressGatewayConfigEntry{Name: "g", Listeners: []consul.IngressListener{l(1, "udp", svc("a"))}}, `Listeners[0].Protocol "udp" is not one of tcp, http, http2, grpc`},
		{"no service", &consul.IngressGatewayConfigEntry{Name: "g", Listeners: []consul.IngressListener{l(1, "tcp")}}, "Listeners[0]: no service; a listener needs at least one"},
		{"tcp two services", &consul.IngressGatewayConfigEntry{Name: "g", Listeners: []consul.IngressListener{l(1, "", svc("a"), svc("b"))}}, `Listeners[0]: multiple services per listener are only supported for protocol = "http"`},
		{"tcp hosts", &consul.IngressGatewayConfigEntry{Name: "g", Listeners: []consul.IngressListener{l(1, "tcp", svc("a", "a.com"))}}, "Listeners[0].Services[0].Hosts: associating hosts to a service is not supported for the tcp protocol"},
		{"bad host", &consul.IngressGatewayConfigEntry{Name: "g", Listeners: []consul.IngressListener{l(1, "http", svc("a", "a.*.com"))}}, `Listeners[0].Services[0].Hosts: "a.*.com" is not a valid DNS name (a wildcard must be the whole leftmost label)`},
		{"duplicate host", &consul.IngressGatewayConfigEntry{Name: "g", Listeners: []consul.IngressListener{l(1, "http", svc("a", "x.com"), svc("b", "X.com"))}}, `Listeners[0].Services[1].Hosts: "X.com": hosts must be unique within a listener`},
		{"host and host:port of two services", &consul.IngressGatewayConfigEntry{Name: "g", Listeners: []consul.IngressListener{l(8080, "http", svc("a", "x.com"), svc("b", "x.com:8080"))}}, `Listeners[0].Services[1].Hosts: "x.com:8080" routes Host "x.com:8080", which service "a" routes on this listener already`},
		{"wildcard tcp", &consul.IngressGatewayConfigEntry{Name: "g", Listeners: []consul.IngressListener{l(1, "tcp", svc("*"))}}, `Listeners[0].Services[0]: the wildcard service "*" is only valid for protocol = "http" (listener on port 1)`},
		{"wildcard hosts", &consul.IngressGatewayConfigEntry{Name: "g", Listeners: []consul.IngressListener{l(1, "http", svc("*", "a.com"))}}, `Listeners[0].Services[0].Hosts: associating hosts to a wildcard service is not supported`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.e.Kind = IngressGateway
			err := Validate(tc.e)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v\nwant %q", err, tc.want)
			}
		})
	}
}

type ingressACL struct{ meshWrite, serviceRead bool }

func (a ingressACL) IsManagement() bool              { return false }
func (a ingressACL) AllowMeshRead() bool             { return false }
func (a ingressACL) AllowMeshWrite() bool            { return a.meshWrite }
func (a ingressACL) AllowServiceRead(string) bool    { return a.serviceRead }
func (a ingressACL) AllowServiceWrite(string) bool   { return true }
func (a ingressACL) AllowIntentionRead(string) bool  { return false }
func (a ingressACL) AllowIntentionWrite(string) bool { return false }

func TestIngressGatewayACL(t *testing.T) {
	if Allowed(ingressACL{serviceRead: true}, IngressGateway, "g", true) {
		t.Error("service write allowed writing an ingress-gateway entry")
	}
	if !Allowed(ingressACL{meshWrite: true}, IngressGateway, "g", true) || !Allowed(ingressACL{serviceRead: true}, IngressGateway, "g", false) {
		t.Error("mesh write may write, service read may read")
	}
}

func TestIngressGatewayProtocolConflict(t *testing.T) {
	gw := &consul.IngressGatewayConfigEntry{Kind: IngressGateway, Name: "g", Listeners: []consul.IngressListener{
		{Port: 1, Protocol: "tcp", Services: []consul.IngressService{{Name: "web"}}},
		{Port: 2, Protocol: "http", Services: []consul.IngressService{{Name: "web"}, {Name: "db"}}},
	}}
	web := &consul.ServiceConfigEntry{Kind: ServiceDefaults, Name: "web", Protocol: "http"}
	if err := NewSet(web).Check(gw); !errors.Is(err, ErrConflict) ||
		!strings.Contains(err.Error(), `ingress-gateway/g Listeners[0]: service "web" has protocol "http", which does not match the listener's protocol "tcp"`) {
		t.Errorf("Check = %v", err)
	}
	if err := NewSet(gw).Check(web); !errors.Is(err, ErrConflict) {
		t.Errorf("making a tcp listener's service http: %v", err)
	}
	gw.Listeners = gw.Listeners[1:]
	if err := NewSet(web).Check(gw); err != nil {
		t.Errorf("an http listener in front of http and tcp services: %v", err)
	}
}

func TestResolveIngressTLS(t *testing.T) {
	gw := consul.GatewayTLSConfig{Enabled: true, TLSMinVersion: "TLSv1_2", CipherSuites: []string{"a"}}
	got := ResolveIngressTLS(gw, &consul.GatewayTLSConfig{TLSMaxVersion: "TLSv1_2", SDS: &consul.GatewayTLSSDSConfig{ClusterName: "c", CertResource: "r"}})
	if got == nil || !got.Enabled || got.TLSMinVersion != "TLSv1_2" || got.TLSMaxVersion != "TLSv1_2" || got.SDS.CertResource != "r" || len(got.CipherSuites) != 1 {
		t.Fatalf("merged = %+v", got)
	}
	if got := ResolveIngressTLS(consul.GatewayTLSConfig{}, nil); got != nil {
		t.Fatalf("no TLS = %+v", got)
	}
	if got := ResolveIngressTLS(consul.GatewayTLSConfig{}, &consul.GatewayTLSConfig{Enabled: true}); got == nil || !got.Enabled {
		t.Fatalf("listener-only TLS = %+v", got)
	}
	valid := &consul.IngressGatewayConfigEntry{Kind: IngressGateway, Name: "g",
		TLS:       consul.GatewayTLSConfig{Enabled: true, TLSMinVersion: "TLSv1_2", CipherSuites: []string{"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"}},
		Listeners: []consul.IngressListener{{Port: 8443, Protocol: "http", Services: []consul.IngressService{{Name: "web", Hosts: []string{"web.example.com"}}}}}}
	if err := Validate(valid); err != nil {
		t.Fatalf("valid TLS entry: %v", err)
	}
}

// As in Consul, a listener's SDS block is merged field by field over the
// gateway's: the SDS cluster named once on the gateway, the certificate
// per listener.
func TestResolveIngressTLSMergesSDSFields(t *testing.T) {
	e := &consul.IngressGatewayConfigEntry{Kind: IngressGateway, Name: "g",
		TLS: consul.GatewayTLSConfig{SDS: &consul.GatewayTLSSDSConfig{ClusterName: "sds-cluster"}},
		Listeners: []consul.IngressListener{{Port: 8443, Protocol: "http",
			TLS:      &consul.GatewayTLSConfig{SDS: &consul.GatewayTLSSDSConfig{CertResource: "listener-cert"}},
			Services: []consul.IngressService{{Name: "web"}}}}}
	if err := Validate(e); err != nil {
		t.Fatalf("gateway cluster + listener certificate: %v", err)
	}
	got := ResolveIngressTLS(e.TLS, e.Listeners[0].TLS)
	if got == nil || got.SDS == nil || got.SDS.ClusterName != "sds-cluster" || got.SDS.CertResource != "listener-cert" {
		t.Fatalf("merged SDS = %+v", got)
	}
	if e.TLS.SDS.CertResource != "" {
		t.Errorf("the gateway's SDS block was modified: %+v", e.TLS.SDS)
	}
}

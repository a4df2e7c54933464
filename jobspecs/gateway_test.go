package jobspecs

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/meshlet/meshlet/connect"
	"github.com/meshlet/meshlet/structs"
)

// ingressGroup is a bridge-mode group body whose only service is an
// ingress gateway with the given listener blocks (its ingress block is on
// line 16, the listeners start on line 17).
func ingressGroup(listeners string) string {
	return `network {
  mode = "bridge"
  port "in" {
    static = 8080
    to = 8080
  }
}
service {
  name = "ingress"
  port = "8080"
  connect {
    gateway {
      proxy { connect_timeout = "3s" }
      ingress {
` + listeners + `
      }
    }
  }
}`
}

func TestIngressDecode(t *testing.T) {
	src := "job \"j\" {\n  group \"g\" {\n" + ingressGroup(`tls { enabled = false }
listener {
  port = 8080
  service { name = "api" }
}
listener {
  port = 8081
  protocol = "http"
  service {
    name = "web"
    hosts = ["web.example.com", "*.web.example.com:8081"]
  }
  service { name = "dash" }
}`) + "\n  }\n}\n"
	job, diags := Parse("t.hcl", []byte(src), nil)
	if diags.HasErrors() || len(diags.Warnings()) > 0 {
		t.Fatalf("diagnostics: %v", diags)
	}
	Canonicalize(job)
	g := job.TaskGroups[0].Services[0].Connect.Gateway
	if g.Kind != "ingress" || g.Proxy == nil || *g.Proxy.ConnectTimeout != 3*time.Second {
		t.Fatalf("gateway = %+v", g)
	}
	want := &structs.ConsulIngressConfigEntry{
		TLS: &structs.ConsulGatewayTLSConfig{},
		Listeners: []*structs.ConsulIngressListener{
			{Port: 8080, Protocol: "tcp", Services: []*structs.ConsulIngressService{{Name: "api"}}},
			{Port: 8081, Protocol: "http", Services: []*structs.ConsulIngressService{
				{Name: "web", Hosts: []string{"web.example.com", "*.web.example.com:8081"}}, {Name: "dash"}}},
		},
	}
	if !reflect.DeepEqual(g.Ingress, want) {
		t.Errorf("ingress:\n got %+v\nwant %+v", g.Ingress, want)
	}
	if _, err := Validate(job); err != nil {
		t.Errorf("canonical job does not validate: %v", err)
	}
}

func TestIngressValidation(t *testing.T) {
	tests := []struct {
		name, listeners string
		want            []string
	}{
		{"tls", "tls {\n  enabled = true\n  tls_min_version = \"TLSv1_3\"\n  tls_max_version = \"TLSv1_9\"\n  cipher_suites = [\"RC4\"]\n  sds { cluster_name = \"c\" }\n}\nlistener {\n  port = 1\n  protocol = \"http\"\n  service {\n    name = \"a\"\n    hosts = [\"*\"]\n  }\n}\n", []string{
			`t.hcl:20:21: error: Invalid TLS version; TLS version "TLSv1_9" is not known; use one of TLS_AUTO, TLSv1_0, TLSv1_1, TLSv1_2, TLSv1_3.`,
			`t.hcl:21:19: error: Invalid cipher suites; Configuring cipher_suites is only applicable to connections negotiated with TLS 1.2 or earlier; tls_min_version is TLSv1_3.`,
			`t.hcl:21:19: error: Invalid cipher suite; Cipher suite "RC4" is not supported.`,
			`t.hcl:22:3: error: Incomplete TLS SDS configuration; An sds block needs both cluster_name and cert_resource.`,
		}},
		{"tls star host", "tls { enabled = true }\nlistener {\n  port = 1\n  protocol = \"http\"\n  service {\n    name = \"a\"\n    hosts = [\"*\"]\n  }\n}\n", []string{
			`t.hcl:23:13: error: Invalid ingress host; Host "*" is not allowed when TLS is enabled: every host must be a valid DNS name to add as a DNS SAN of the gateway's certificate.`,
		}},
		{"no listener", ``, []string{
			`t.hcl:16:7: error: Missing ingress listener; Consul Ingress Gateway requires at least one listener.`}},
		{"port and protocol", "listener {\n  protocol = \"udp\"\n  service { name = \"a\" }\n}\nlistener {\n  port = 70000\n  protocol = \"grpc\"\n  service { name = \"a\" }\n}", []string{
			`t.hcl:17:1: error: Invalid ingress listener port; Consul Ingress Listener requires valid Port (1-65535), got 0.`,
			`t.hcl:18:14: error: Invalid ingress listener protocol; Consul Ingress Listener requires protocol of tcp, http, http2, grpc, got "udp".`,
			`t.hcl:22:10: error: Invalid ingress listener port; Consul Ingress Listener requires valid Port (1-65535), got 70000.`,
		}},
		{"tcp rules", "listener {\n  port = 8080\n  service {\n    name = \"a\"\n    hosts = [\"a.com\"]\n  }\n  service { name = \"b\" }\n}\nlistener {\n  port = 8080\n}", []string{
			`t.hcl:21:13: error: Invalid ingress hosts; Consul Ingress Service doesn't support associating hosts to a service for the tcp protocol.`,
			`t.hcl:23:3: error: Too many ingress services; A tcp listener routes to exactly one service; listener on port 8080 has 2. Use protocol "http" to route by Host header.`,
			`t.hcl:25:1: error: Missing ingress service; Consul Ingress Listener requires one or more services.`,
			`t.hcl:26:10: error: Duplicate ingress listener port; Port 8080 is already used by listener #1; each listener needs its own port.`,
		}},
		{"http hosts", "listener {\n  port = 8080\n  protocol = \"http\"\n  service {\n    name = \"a\"\n    hosts = [\"a.*.com\", \"x.com\"]\n  }\n  service {\n    name = \"a\"\n    hosts = [\"X.com\", \"*\"]\n  }\n  service { name = \"*\" }\n}", []string{
			`t.hcl:22:13: error: Invalid ingress host; Service "a": host "a.*.com" is not a valid DNS name; a wildcard is only allowed as the whole leftmost label ("*.example.com").`,
			`t.hcl:25:12: error: Duplicate ingress service; Service "a" is already routed by the listener on port 8080.`,
			`t.hcl:26:13: error: Duplicate ingress host; Hosts must be unique within a listener: "X.com" is used twice on the listener on port 8080.`,
			`t.hcl:26:13: error: Invalid ingress host; Service "a": host "*" matches every host and cannot be listed with others.`,
		}},
		{"wildcard", "listener {\n  port = 8080\n  service { name = \"*\" }\n}\nlistener {\n  port = 8081\n  protocol = \"http\"\n  service {\n    name = \"*\"\n    hosts = [\"a.com\"]\n  }\n}\nlistener {\n  port = 8082\n  protocol = \"http\"\n  service { name = \"*\" }\n  service { name = \"web\" }\n}", []string{
			`t.hcl:19:20: error: Invalid ingress service name; Wildcard service name is only valid for protocol = "http" (listener on port 8080).`,
			`t.hcl:26:13: error: Invalid ingress hosts; Associating hosts to a wildcard service is not supported.`,
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assertDiags(t, parseGroup(t, ingressGroup(tc.listeners)), tc.want)
		})
	}
}

func TestGatewayRules(t *testing.T) {
	tests := []struct {
		name, body string
		want       []string
	}{
		{"empty gateway", "service {\n  name = \"gw\"\n  connect {\n    gateway {}\n  }\n}", []string{
			`t.hcl:2:3: error: Missing task; Group "g" has no task; every group needs at least one task block.`,
			`t.hcl:6:5: error: Missing gateway configuration; One Consul Gateway Configuration must be set: ingress, terminating or mesh.`,
		}},
		{"two kinds and a sidecar", "service {\n  name = \"gw\"\n  connect {\n    sidecar_service {}\n    gateway {\n      ingress {}\n      mesh {}\n    }\n  }\n}\n" + okTask, []string{
			`t.hcl:5:3: error: Connect requires bridge networking; Service "gw" has a connect sidecar, so group "g" needs exactly one network block with mode "bridge" or "cni/<name>"; found no network block.`,
			`t.hcl:7:5: error: Invalid connect gateway; Consul Connect must be exclusively native, make use of a sidecar, or represent a Gateway.`,
			`t.hcl:7:5: error: Invalid gateway configuration; Only one Consul Gateway Configuration may be set: ingress, terminating or mesh.`,
		}},
		{"ingress in host mode (no network block)", "service {\n  name = \"gw\"\n  connect {\n    gateway {\n      proxy {\n        connect_timeout = \"soon\"\n      }\n      ingress {\n        listener {\n          port = 8080\n          service { name = \"a\" }\n        }\n      }\n    }\n  }\n}", []string{
			`t.hcl:8:27: error: Invalid duration; Inappropriate value for attribute "connect_timeout": time: invalid duration "soon"; use a Go duration such as "30s", "5m" or "1h".`,
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assertDiags(t, parseGroup(t, tc.body), tc.want)
		})
	}
}

func TestIngressValidateWithoutPositions(t *testing.T) {
	job := &structs.Job{ID: "j", Name: "j", Type: "service", Datacenters: []string{"dc1"}, TaskGroups: []*structs.TaskGroup{{
		Name: "g", Count: 1,
		Services: []*structs.Service{{Name: "gw", Connect: &structs.ConsulConnect{Gateway: &structs.ConsulGateway{
			Ingress: &structs.ConsulIngressConfigEntry{Listeners: []*structs.ConsulIngressListener{{Port: 1}}},
		}}}},
	}}}
	Canonicalize(job)
	_, err := Validate(job)
	want := `group "g": service "gw": connect: gateway: ingress: listener[0]: Missing ingress service; Consul Ingress Listener requires one or more services.`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("errors = %v\nwant %s", err, want)
	}
}

// A gateway survives the Nomad API's JSON (no Kind, no Config): the CLI and
// Nomad clients submit jobs in that shape.
func TestGatewayThroughNomadAPI(t *testing.T) {
	src := "job \"j\" {\n  group \"g\" {\n" + ingressGroup("listener {\n  port = 8080\n  service { name = \"api\" }\n}") +
		"\nservice {\n  name = \"t\"\n  connect {\n    gateway {\n      terminating {\n        service {\n          name = \"x\"\n          ca_file = \"/ca.pem\"\n          sni = \"x.example\"\n        }\n      }\n    }\n  }\n}\n  }\n}\n"
	job, diags := Parse("t.hcl", []byte(src), nil)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	raw, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	var nj nomadapi.Job
	if err := json.Unmarshal(raw, &nj); err != nil {
		t.Fatal(err)
	}
	if raw, err = json.Marshal(&nj); err != nil {
		t.Fatal(err)
	}
	var back structs.Job
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	Canonicalize(&back)
	warnings, err := Validate(&back)
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) > 0 {
		t.Errorf("warnings = %q", warnings)
	}
	g := back.TaskGroups[0].Services[0].Connect.Gateway
	if g.Ingress == nil || g.Ingress.Listeners[0].Services[0].Name != "api" || *g.Proxy.ConnectTimeout != 3*time.Second {
		t.Errorf("gateway after the round trip = %+v", g)
	}
	tg := back.TaskGroups[0].Services[1].Connect.Gateway.Terminating
	if want := []*structs.ConsulLinkedService{{Name: "x", CAFile: "/ca.pem", SNI: "x.example"}}; tg == nil || !reflect.DeepEqual(tg.Services, want) {
		t.Errorf("terminating gateway after the round trip = %+v", tg)
	}
}

// An empty mesh {} block survives the Nomad API's JSON too (a pointer to an
// empty struct, as in Nomad's api, where an empty map would be dropped).
func TestMeshGatewayThroughNomadAPI(t *testing.T) {
	src := "job \"j\" {\n  group \"g\" {\n    network {\n      mode = \"bridge\"\n    }\n    service {\n      name = \"m\"\n      connect {\n        gateway {\n          mesh {}\n        }\n      }\n    }\n" +
		"    task \"t\" {\n      driver = \"exec\"\n      config { command = \"x\" }\n    }\n  }\n}\n"
	job, diags := Parse("t.hcl", []byte(src), nil)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	if g := job.TaskGroups[0].Services[0].Connect.Gateway; g.Mesh == nil {
		t.Fatalf("parsed mesh gateway = %+v", g)
	}
	raw, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	var nj nomadapi.Job
	if err := json.Unmarshal(raw, &nj); err != nil {
		t.Fatal(err)
	}
	if raw, err = json.Marshal(&nj); err != nil {
		t.Fatal(err)
	}
	var back structs.Job
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	if g := back.TaskGroups[0].Services[0].Connect.Gateway; g == nil || g.Mesh == nil || len(g.Kinds()) != 1 || g.Kinds()[0] != structs.GatewayKindMesh {
		t.Fatalf("mesh gateway after the round trip = %+v", g)
	}
}

// An upstream's mesh_gateway mode is one of Consul's, and a mode without
// a datacenter is pointless (warned).
func TestUpstreamMeshGatewayRules(t *testing.T) {
	up := func(extra string) string {
		return "network {\n  mode = \"bridge\"\n}\nservice {\n  name = \"web\"\n  port = \"8080\"\n  connect {\n    sidecar_service {\n      proxy {\n        upstreams {\n          destination_name = \"api\"\n          local_bind_port  = 9191\n" +
			extra + "        }\n      }\n    }\n  }\n}\n" + okTask
	}
	tests := []struct {
		name, body string
		want       []string
	}{
		{"local to dc2", up("          datacenter = \"dc2\"\n          mesh_gateway {\n            mode = \"local\"\n          }\n"), nil},
		{"remote to dc2", up("          datacenter = \"dc2\"\n          mesh_gateway {\n            mode = \"remote\"\n          }\n"), nil},
		{"bad mode", up("          datacenter = \"dc2\"\n          mesh_gateway {\n            mode = \"nearby\"\n          }\n"), []string{
			`t.hcl:17:20: error: Invalid mesh_gateway mode; Upstream "api": mesh_gateway mode "nearby" must be one of "local", "remote" or "none".`,
		}},
		{"no datacenter", up("          mesh_gateway {\n            mode = \"local\"\n          }\n"), []string{
			`t.hcl:16:20: warning: mesh_gateway without datacenter; Upstream "api" has no datacenter: mesh gateways only carry traffic to other datacenters, so mode "local" has no effect.`,
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assertDiags(t, parseGroup(t, tc.body), tc.want)
		})
	}
}

func TestIngressTLSDecode(t *testing.T) {
	src := "job \"j\" {\n  group \"g\" {\n" + ingressGroup(`tls {
  enabled = true
  tls_min_version = "TLSv1_2"
  tls_max_version = "TLSv1_2"
  cipher_suites = ["TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"]
  sds {
    cluster_name = "sds-cluster"
    cert_resource = "web-cert"
  }
}
listener {
  port = 8080
  protocol = "http"
  service {
    name = "web"
    hosts = ["web.example.com"]
  }
}`) + "\n  }\n}\n"
	job, diags := Parse("t.hcl", []byte(src), nil)
	if diags.HasErrors() || len(diags.Warnings()) > 0 {
		t.Fatalf("diagnostics: %v", diags)
	}
	Canonicalize(job)
	in := job.TaskGroups[0].Services[0].Connect.Gateway.Ingress
	want := &structs.ConsulGatewayTLSConfig{Enabled: true, TLSMinVersion: "TLSv1_2", TLSMaxVersion: "TLSv1_2",
		CipherSuites: []string{"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"}, SDS: &structs.ConsulGatewayTLSSDSConfig{ClusterName: "sds-cluster", CertResource: "web-cert"}}
	if !reflect.DeepEqual(in.TLS, want) {
		t.Fatalf("tls:\n got %+v\nwant %+v", in.TLS, want)
	}
	if _, err := Validate(job); err != nil {
		t.Errorf("job does not validate: %v", err)
	}
}

func TestGatewayProxyBindDecode(t *testing.T) {
	proxy := `proxy {
        connect_timeout = "2s"
        envoy_gateway_no_default_bind = true
        envoy_gateway_bind_tagged_addresses = true
        envoy_dns_discovery_type = "STRICT_DNS"
        envoy_gateway_bind_addresses "lo" {
          address = "127.0.0.1"
          port = 8080
        }
        envoy_gateway_bind_addresses "b" {
          address = "127.0.0.2"
          port = 8081
        }
        config {
          foo = "bar"
        }
      }`
	src := "job \"j\" {\n  group \"g\" {\n" + strings.Replace(ingressGroup("listener {\n  port = 8080\n  service { name = \"a\" }\n}"), `proxy { connect_timeout = "3s" }`, proxy, 1) + "\n  }\n}\n"
	job, diags := Parse("t.hcl", []byte(src), nil)
	if diags.HasErrors() || len(diags.Warnings()) > 0 {
		t.Fatalf("diagnostics: %v", diags)
	}
	px := job.TaskGroups[0].Services[0].Connect.Gateway.Proxy
	want := &structs.ConsulGatewayProxy{ConnectTimeout: px.ConnectTimeout, EnvoyGatewayNoDefaultBind: true, EnvoyGatewayBindTaggedAddresses: true,
		EnvoyDNSDiscoveryType: "STRICT_DNS", Config: map[string]any{"foo": "bar"},
		EnvoyGatewayBindAddresses: map[string]*structs.ConsulGatewayBindAddress{
			"lo": {Name: "lo", Address: "127.0.0.1", Port: 8080}, "b": {Name: "b", Address: "127.0.0.2", Port: 8081}}}
	if !reflect.DeepEqual(px, want) {
		t.Fatalf("proxy:\n got %+v\nwant %+v", px, want)
	}
	bad := strings.NewReplacer(`"STRICT_DNS"`, `"DNS"`, `"127.0.0.2"`, `"localhost"`, "port = 8081", "port = 0").Replace(proxy)
	src = "job \"j\" {\n  group \"g\" {\n" + strings.Replace(ingressGroup("listener {\n  port = 8080\n  service { name = \"a\" }\n}"), `proxy { connect_timeout = "3s" }`, bad, 1) + "\n  }\n}\n"
	_, diags = Parse("t.hcl", []byte(src), nil)
	got := diags.Error()
	for _, want := range []string{
		`t.hcl:19:36: error: Invalid envoy_dns_discovery_type; Consul Gateway Proxy Envoy DNS Discovery type must be STRICT_DNS or LOGICAL_DNS, got "DNS".`,
		`t.hcl:25:21: error: Invalid gateway bind address; Bind address "b": address "localhost" is not an IP address.`,
		`t.hcl:26:18: error: Invalid gateway bind address; Bind address "b" requires a port in 1-65535, got 0.`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("diagnostics lack %q:\n%s", want, got)
		}
	}
}

func TestIngressServiceTLS(t *testing.T) {
	listeners := `tls {
  sds {
    cluster_name  = "sds-cluster"
    cert_resource = "default-cert"
  }
}
listener {
  port = 8443
  protocol = "http"
  service {
    name = "web"
    hosts = ["web.example.com"]
    tls {
      sds { cert_resource = "web-cert" }
    }
  }
  service {
    name = "api"
    tls {
      sds { cert_resource = "api-cert" }
    }
  }
}`
	src := "job \"j\" {\n  group \"g\" {\n" + ingressGroup(listeners) + "\n  }\n}\n"
	job, diags := Parse("t.hcl", []byte(src), nil)
	got := diags.Error()
	if !strings.Contains(got, `t.hcl:35:5: error: Invalid ingress service TLS; A service's certificate from SDS needs sds { cert_resource } and hosts (its SNI names), and no wildcard service.`) ||
		strings.Count(got, "error:") != 1 {
		t.Fatalf("diagnostics:\n%s", got)
	}
	web := job.TaskGroups[0].Services[0].Connect.Gateway.Ingress.Listeners[0].Services[0]
	if web.TLS == nil || web.TLS.SDS == nil || web.TLS.SDS.CertResource != "web-cert" {
		t.Fatalf("web's tls = %+v", web.TLS)
	}
	entry := connect.IngressEntries(job)[0]
	if s := entry.Listeners[0].Services[0]; s.TLS == nil || s.TLS.SDS.CertResource != "web-cert" {
		t.Fatalf("entry service = %+v", s)
	}
}

func TestIngressServiceUnrunWarned(t *testing.T) {
	src := "job \"j\" {\n  group \"g\" {\n" + ingressGroup(`listener {
  port = 8080
  protocol = "http"
  service {
    name = "web"
    max_connections = 10
    request_headers {
      add = { "x-a" = "b" }
    }
  }
}`) + "\n  }\n}\n"
	_, diags := Parse("t.hcl", []byte(src), nil)
	if diags.HasErrors() {
		t.Fatalf("errors: %v", diags)
	}
	var got []string
	for _, w := range diags.Warnings() {
		got = append(got, fmt.Sprintf("%d:%d %s", w.Line, w.Column, w.Summary))
	}
	want := []string{"23:5 request_headers is not supported by meshlet yet; ignored", "22:5 max_connections is not supported by meshlet yet; ignored"}
	slices.Sort(got)
	slices.Sort(want)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("warnings = %v, want %v", got, want)
	}
}

package envoy

import (
	"errors"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/meshlet/meshlet/internal/envoyvalidate"
)

func parse(t *testing.T, cfg BootstrapConfig) *bootstrapv3.Bootstrap {
	t.Helper()
	js, err := JSON(cfg)
	if err != nil {
		t.Fatalf("JSON: %v", err)
	}
	b := &bootstrapv3.Bootstrap{}
	if err := protojson.Unmarshal(js, b); err != nil {
		t.Fatalf("bootstrap JSON does not unmarshal as envoy.config.bootstrap.v3.Bootstrap: %v\n%s", err, js)
	}
	if err := envoyvalidate.All(b); err != nil {
		t.Fatalf("bootstrap fails Envoy validation: %v\n%s", err, js)
	}
	return b
}

func TestBootstrapValidates(t *testing.T) {
	tests := []struct {
		name  string
		cfg   BootstrapConfig
		check func(t *testing.T, b *bootstrapv3.Bootstrap)
	}{{
		name: "unix socket, delta by default",
		cfg: BootstrapConfig{ProxyID: "_nomad-task-a1-group-web-web-9090-sidecar-proxy", Cluster: "web",
			GRPCAddr: "unix:///alloc/tmp/meshlet_grpc.sock", AdminBind: "127.0.0.2:19001", Datacenter: "dc1"},
		check: func(t *testing.T, b *bootstrapv3.Bootstrap) {
			if b.Node.Id != "_nomad-task-a1-group-web-web-9090-sidecar-proxy" || b.Node.Cluster != "web" {
				t.Errorf("node = %v", b.Node)
			}
			ep := b.StaticResources.Clusters[0].LoadAssignment.Endpoints[0].LbEndpoints[0].GetEndpoint().Address
			if ep.GetPipe().GetPath() != "/alloc/tmp/meshlet_grpc.sock" {
				t.Errorf("local_agent address = %v, want pipe", ep)
			}
			if got := b.DynamicResources.AdsConfig.ApiType; got != corev3.ApiConfigSource_DELTA_GRPC {
				t.Errorf("ads api type = %v, want DELTA_GRPC", got)
			}
			if a := b.Admin.Address.GetSocketAddress(); a.Address != "127.0.0.2" || a.GetPortValue() != 19001 {
				t.Errorf("admin = %v", a)
			}
		},
	}, {
		name: "tcp, sotw, token, escape hatches",
		cfg: BootstrapConfig{ProxyID: "db-sidecar-proxy", GRPCAddr: "127.0.0.1:8502", SotW: true, Token: "secret",
			ProxyConfig: map[string]any{
				KeyPrometheusBindAddr: "0.0.0.0:9102",
				KeyStatsBindAddr:      "0.0.0.0:9103",
				KeyExtraStaticClusters: `{"name":"extra","type":"STATIC","connect_timeout":"2s",
				  "load_assignment":{"cluster_name":"extra","endpoints":[{"lb_endpoints":[{"endpoint":{"address":{"socket_address":{"address":"127.0.0.1","port_value":7000}}}}]}]}}`,
			}},
		check: func(t *testing.T, b *bootstrapv3.Bootstrap) {
			if b.Node.Cluster != "db" {
				t.Errorf("cluster derived from proxy ID = %q, want db", b.Node.Cluster)
			}
			var names []string
			for _, c := range b.StaticResources.Clusters {
				names = append(names, c.Name)
			}
			if strings.Join(names, ",") != "local_agent,self_admin,extra" {
				t.Errorf("static clusters = %v", names)
			}
			if n := len(b.StaticResources.Listeners); n != 2 {
				t.Errorf("static listeners = %d, want 2 (prometheus, stats)", n)
			}
			if md := b.DynamicResources.AdsConfig.GrpcServices[0].InitialMetadata; len(md) != 1 || md[0].Value != "secret" {
				t.Errorf("token metadata = %v", md)
			}
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.check(t, parse(t, tt.cfg)) })
	}
}

func TestBootstrapRejectsBadInput(t *testing.T) {
	tests := []struct {
		name string
		cfg  BootstrapConfig
		want string
	}{
		{"no proxy id", BootstrapConfig{}, "proxy ID is required"},
		{"bad admin bind", BootstrapConfig{ProxyID: "p", AdminBind: "nope"}, "admin bind"},
		{"bad grpc addr", BootstrapConfig{ProxyID: "p", GRPCAddr: "host-without-port"}, "grpc address"},
		{"extra clusters not JSON", BootstrapConfig{ProxyID: "p", ProxyConfig: map[string]any{KeyExtraStaticClusters: `{"name": `}}, "not valid JSON"},
		{"extra cluster unknown field", BootstrapConfig{ProxyID: "p", ProxyConfig: map[string]any{KeyExtraStaticClusters: `{"nam": "x"}`}}, "cluster 0"},
		{"prometheus addr not a string", BootstrapConfig{ProxyID: "p", ProxyConfig: map[string]any{KeyPrometheusBindAddr: 9102}}, "must be a string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := JSON(tt.cfg)
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want ErrInvalidConfig containing %q", err, tt.want)
			}
		})
	}
}

func TestFindBinary(t *testing.T) {
	if _, err := FindBinary("/nonexistent/envoy"); !errors.Is(err, ErrEnvoyNotFound) {
		t.Fatalf("FindBinary(missing) = %v", err)
	}
	t.Setenv("PATH", t.TempDir())
	if _, err := FindBinary(""); !errors.Is(err, ErrEnvoyNotFound) {
		t.Fatalf("FindBinary with empty PATH = %v", err)
	}
}

// TestBootstrapWaitsForFirstConfig: as Consul's bootstrap, LDS and CDS
// wait for their first response however long the control plane takes
// (initial_fetch_timeout 0s): with Envoy's default of 15 s a sidecar that
// starts while meshlet is slow to answer (an agent restart, a server
// election) finishes initializing with no listeners and reports ready.
func TestBootstrapWaitsForFirstConfig(t *testing.T) {
	b := parse(t, BootstrapConfig{ProxyID: "web-sidecar-proxy", GRPCAddr: "unix:///alloc/run/meshlet_grpc.sock"})
	for name, src := range map[string]*corev3.ConfigSource{"lds": b.DynamicResources.LdsConfig, "cds": b.DynamicResources.CdsConfig} {
		if ift := src.GetInitialFetchTimeout(); ift == nil || ift.AsDuration() != 0 {
			t.Errorf("%s initial_fetch_timeout = %v, want 0s (wait indefinitely)", name, ift)
		}
	}
}

package xds

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/configentry"
	"github.com/meshlet/meshlet/internal/envoyvalidate"
)

func listenerNames(res *proxyResources) []string {
	var out []string
	for _, l := range res.listeners {
		out = append(out, l.GetName())
	}
	return out
}

func TestGatewayBinds(t *testing.T) {
	inst := func(cfg map[string]any) catalog.ServiceInstance {
		return catalog.ServiceInstance{Name: "gw", Address: "10.0.0.9", Port: 8443, Proxy: &catalog.Proxy{Config: cfg}}
	}
	cases := []struct {
		name string
		cfg  map[string]any
		want []GatewayBind
		err  string
	}{
		{"default", nil, []GatewayBind{{"default", "0.0.0.0", 8443}}, ""},
		{"tagged", map[string]any{CfgGatewayBindTaggedAddresses: true}, []GatewayBind{{"default", "0.0.0.0", 8443}, {"lan", "10.0.0.9", 8443}}, ""},
		{"named, no default", map[string]any{CfgGatewayNoDefaultBind: true, CfgGatewayBindAddresses: map[string]any{
			"z": map[string]any{"address": "127.0.0.2", "port": 9000}, "a": map[string]any{"address": "127.0.0.1", "port": float64(9001)},
			"dup": map[string]any{"address": "127.0.0.1", "port": 9001}}},
			[]GatewayBind{{"a", "127.0.0.1", 9001}, {"z", "127.0.0.2", 9000}}, ""},
		{"bad address", map[string]any{CfgGatewayBindAddresses: map[string]any{"x": map[string]any{"address": "host.example", "port": 1}}}, nil, `address "host.example" is not an IP address`},
		{"bad port", map[string]any{CfgGatewayBindAddresses: map[string]any{"x": map[string]any{"address": "127.0.0.1", "port": 70000}}}, nil, "port must be a whole number in 1-65535"},
		{"bad bool", map[string]any{CfgGatewayNoDefaultBind: "maybe"}, nil, "envoy_gateway_no_default_bind must be a boolean"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := GatewayBinds(inst(tc.cfg), "0.0.0.0")
			if tc.err != "" {
				if !errors.Is(err, ErrInvalidProxyConfig) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("GatewayBinds = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestIngressGatewayBindAddresses(t *testing.T) {
	b := builder{dc: "dc1", trustDomain: testTD, set: ingressSet(t)}
	gw := testGateway(map[string]any{CfgGatewayNoDefaultBind: true, CfgGatewayBindAddresses: map[string]any{
		"lo": map[string]any{"address": "127.0.0.1", "port": 1}, "lo2": map[string]any{"address": "127.0.0.2", "port": 1}}})
	res, err := b.proxy(gw)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"tcp:127.0.0.1:8080", "http:127.0.0.1:8081", "tcp:127.0.0.2:8080", "http:127.0.0.2:8081"}
	if got := listenerNames(res); !reflect.DeepEqual(got, want) {
		t.Fatalf("listeners = %v, want %v", got, want)
	}
	for _, l := range res.listeners {
		if err := envoyvalidate.All(l); err != nil {
			t.Fatalf("listener %s: %v", l.GetName(), err)
		}
	}
	if len(res.routes) != 1 {
		t.Errorf("routes = %d, want the http listener's one, shared", len(res.routes))
	}
	if err := checkConsistent(msgs(res.listeners), msgs(res.clusters), msgs(res.routes), func(string, string) bool { return true }); err != nil {
		t.Fatal(err)
	}
	// The default wildcard bind and a named one cannot share the ports.
	gw.Proxy.Config = map[string]any{CfgGatewayBindAddresses: map[string]any{"lo": map[string]any{"address": "127.0.0.1", "port": 1}}}
	if _, err := b.proxy(gw); !errors.Is(err, ErrInvalidProxyConfig) || !strings.Contains(err.Error(), "only one can bind") {
		t.Fatalf("wildcard and named bind on one port: %v", err)
	}
	// No bind at all: no listener.
	gw.Proxy.Config = map[string]any{CfgGatewayNoDefaultBind: true}
	if res, err := b.proxy(gw); err != nil || len(res.listeners) != 0 {
		t.Fatalf("no bind: %v, %v", listenerNames(res), err)
	}
}

func TestTerminatingGatewayBindsAndDNS(t *testing.T) {
	insts := map[string][]catalog.ServiceInstance{
		"db":  {{ID: "db-ext", Name: "db", Address: "db.example.com", Port: 5432, Healthy: true}, {ID: "db-ext2", Name: "db", Address: "db2.example.com", Port: 5432, Healthy: true}},
		"api": {{ID: "api-ext", Name: "api", Address: "192.0.2.20", Port: 443, Healthy: true}, {ID: "api-host", Name: "api", Address: "api.example.com", Port: 443, Healthy: true}},
	}
	b := builder{dc: "dc1", trustDomain: testTD, set: configentry.NewSet(terminatingEntry()),
		instances: func(svc string) []catalog.ServiceInstance { return insts[svc] }}
	gw := testTerminating(23000)
	gw.Proxy.Config[CfgGatewayBindAddresses] = map[string]any{"lo": map[string]any{"address": "127.0.0.1", "port": 23001}}
	gw.Proxy.Config[CfgDNSDiscoveryType] = "STRICT_DNS"
	res, err := b.proxy(gw)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := listenerNames(res), []string{"default:0.0.0.0:23000", "lo:127.0.0.1:23001"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("listeners = %v, want %v", got, want)
	}
	for _, l := range res.listeners {
		if err := envoyvalidate.All(l); err != nil {
			t.Fatalf("listener %s: %v", l.GetName(), err)
		}
	}
	db, api := res.clusters[0], res.clusters[1]
	for _, c := range res.clusters {
		if err := envoyvalidate.All(c); err != nil {
			t.Fatalf("cluster %s: %v", c.GetName(), err)
		}
	}
	if db.GetType() != cluster.Cluster_STRICT_DNS || len(db.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()) != 2 {
		t.Errorf("db (hostnames only) = %v", db)
	}
	if api.GetType() != cluster.Cluster_STATIC || len(api.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()) != 1 {
		t.Errorf("api (an IP address) = %v", api)
	}
	delete(gw.Proxy.Config, CfgDNSDiscoveryType)
	res, err = b.proxy(gw)
	if err != nil {
		t.Fatal(err)
	}
	if db := res.clusters[0]; db.GetType() != cluster.Cluster_LOGICAL_DNS || len(db.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()) != 1 {
		t.Errorf("db with the default LOGICAL_DNS = %v", db)
	}
	gw.Proxy.Config[CfgDNSDiscoveryType] = "ROUND_ROBIN"
	if _, err := b.proxy(gw); !errors.Is(err, ErrInvalidProxyConfig) {
		t.Fatalf("bad envoy_dns_discovery_type: %v", err)
	}
}

package xds

import (
	"reflect"
	"strings"
	"testing"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/internal/envoyvalidate"
)

// A mesh gateway honours the envoy_gateway_* bind options like the other
// gateways: its tagged addresses (a wan that differs from lan binds too),
// named bind addresses and no default bind; every listener carries the
// same SNI chains.
func TestMeshGatewayBinds(t *testing.T) {
	insts := meshGatewayCatalog()
	gw := insts[4]
	gw.TaggedAddresses = map[string]catalog.TaggedAddress{
		catalog.TaggedLAN: {Address: "10.0.0.5", Port: 24000},
		catalog.TaggedWAN: {Address: "127.0.9.5", Port: 8443},
	}
	cases := []struct {
		name string
		cfg  map[string]any
		want []string
		err  string
	}{
		{"default", nil, []string{"default:0.0.0.0:24000"}, ""},
		{"tagged", map[string]any{CfgGatewayBindTaggedAddresses: true},
			[]string{"default:0.0.0.0:24000", "lan:10.0.0.5:24000", "wan:127.0.9.5:8443"}, "wildcard"},
		{"tagged, no default", map[string]any{CfgGatewayBindTaggedAddresses: true, CfgGatewayNoDefaultBind: true},
			[]string{"lan:10.0.0.5:24000", "wan:127.0.9.5:8443"}, ""},
		{"named, no default", map[string]any{CfgGatewayNoDefaultBind: true, CfgGatewayBindAddresses: map[string]any{
			"lo": map[string]any{"address": "127.0.0.1", "port": 9443}}}, []string{"lo:127.0.0.1:9443"}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := gw
			g.Proxy = &catalog.Proxy{DestinationServiceName: gw.Name, Config: tc.cfg}
			b := builder{dc: "dc1", trustDomain: testTD, proxies: func() []catalog.ServiceInstance { return insts }}
			res, err := b.proxy(g)
			if tc.err != "" {
				// 0.0.0.0:24000 and 10.0.0.5:24000 cannot both bind.
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one mentioning %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := listenerNames(res); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("listeners = %v, want %v", got, tc.want)
			}
			for _, l := range res.listeners {
				if err := envoyvalidate.All(l); err != nil {
					t.Errorf("%s: %v", l.GetName(), err)
				}
				if len(l.GetFilterChains()) != 4 || l.GetFilterChains()[0] == res.listeners[0].GetFilterChains()[0] && l != res.listeners[0] {
					t.Errorf("%s: chains %d (want 4, owned by the listener)", l.GetName(), len(l.GetFilterChains()))
				}
			}
		})
	}
}

// taggedBinds: the registered tagged addresses (a port of 0 is the
// instance's, a non-IP is left out), else lan and wan at the instance's
// own address.
func TestTaggedBinds(t *testing.T) {
	inst := catalog.ServiceInstance{Address: "10.0.0.9", Port: 8443}
	if got, want := taggedBinds(inst), []GatewayBind{{"lan", "10.0.0.9", 8443}, {"wan", "10.0.0.9", 8443}}; !reflect.DeepEqual(got, want) {
		t.Errorf("untagged: %v, want %v", got, want)
	}
	inst.TaggedAddresses = map[string]catalog.TaggedAddress{
		"wan": {Address: "127.0.0.9"}, "lan": {Address: "10.0.0.9", Port: 8443}, "bad": {Address: "gw.example", Port: 1},
	}
	if got, want := taggedBinds(inst), []GatewayBind{{"lan", "10.0.0.9", 8443}, {"wan", "127.0.0.9", 8443}}; !reflect.DeepEqual(got, want) {
		t.Errorf("tagged: %v, want %v", got, want)
	}
}

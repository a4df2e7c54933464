package xds

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/internal/envoyvalidate"
)

// metaFilter is a stand-in for configentry.MatchFilter understanding only
// "Service.Meta.<k> == <v>" and "<tag> in Service.Tags", so these tests do
// not depend on go-bexpr.
func metaFilter(filter string, inst catalog.ServiceInstance) (bool, error) {
	if k, v, ok := strings.Cut(filter, " == "); ok && strings.HasPrefix(k, "Service.Meta.") {
		return inst.Meta[strings.TrimPrefix(k, "Service.Meta.")] == v, nil
	}
	if tag, ok := strings.CutSuffix(filter, " in Service.Tags"); ok {
		for _, t := range inst.Tags {
			if t == tag {
				return true, nil
			}
		}
		return false, nil
	}
	return false, errors.New("unsupported filter")
}

func sidecar(id, svc, addr string, meta map[string]string, tags ...string) catalog.ServiceInstance {
	return catalog.ServiceInstance{
		ID: id, Name: svc + "-sidecar-proxy", Kind: catalog.KindConnectProxy, Address: addr, Port: 21000, Healthy: true,
		Meta: meta, Tags: tags, Datacenter: "dc1",
		Proxy: &catalog.Proxy{DestinationServiceName: svc, DestinationServiceID: id + "-app"},
	}
}

type fakeInstances struct {
	sidecars []catalog.ServiceInstance
	apps     map[string]catalog.ServiceInstance
}

func (f fakeInstances) source() instanceSource {
	return instanceSource{
		sidecars: func(service, dc string) []catalog.ServiceInstance {
			var out []catalog.ServiceInstance
			for _, s := range f.sidecars {
				if s.Proxy.DestinationServiceName == service && s.Datacenter == dc {
					out = append(out, s)
				}
			}
			return out
		},
		get: func(id string) (catalog.ServiceInstance, bool) { a, ok := f.apps[id]; return a, ok },
	}
}

func addrsByPriority(cla *endpoint.ClusterLoadAssignment) [][]string {
	var out [][]string
	for i, l := range cla.GetEndpoints() {
		if int(l.GetPriority()) != i {
			return [][]string{{fmt.Sprintf("locality %d has priority %d", i, l.GetPriority())}}
		}
		addrs := []string{}
		for _, e := range l.GetLbEndpoints() {
			addrs = append(addrs, e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
		}
		out = append(out, addrs)
	}
	return out
}

func TestTargetAssignment(t *testing.T) {
	v1 := map[string]string{"version": "v1"}
	v2 := map[string]string{"version": "v2"}
	unhealthy := sidecar("b3", "service-b", "10.0.0.3", v2)
	unhealthy.Healthy = false
	warning := sidecar("b4", "service-b", "10.0.0.4", v2)
	warning.Checks = []catalog.Check{{ID: "c", Status: "warning"}}
	bare := sidecar("b5", "service-b", "10.0.0.5", nil) // no meta: the app's
	otherDC := sidecar("b6", "service-b", "10.0.1.6", v1)
	otherDC.Datacenter = "dc2"
	f := fakeInstances{
		sidecars: []catalog.ServiceInstance{
			sidecar("b1", "service-b", "10.0.0.1", v1), sidecar("b2", "service-b", "10.0.0.2", v2, "canary"),
			unhealthy, warning, bare, otherDC, sidecar("c1", "service-c", "10.0.2.1", nil),
		},
		apps: map[string]catalog.ServiceInstance{"b5-app": {ID: "b5-app", Meta: v2, Tags: []string{"canary"}}},
	}
	src := func(svc, dc, filter string, onlyPassing bool) endpointSource {
		return endpointSource{service: svc, dc: dc, filter: filter, onlyPassing: onlyPassing}
	}
	cases := []struct {
		name string
		spec endpointSpec
		want [][]string
	}{
		{"whole service", endpointSpec{[]endpointSource{src("service-b", "dc1", "", false)}}, [][]string{{"10.0.0.1", "10.0.0.2", "10.0.0.4", "10.0.0.5"}}},
		{"subset v1", endpointSpec{[]endpointSource{src("service-b", "dc1", "Service.Meta.version == v1", false)}}, [][]string{{"10.0.0.1"}}},
		{"subset v2 (app meta fallback, warning passes)", endpointSpec{[]endpointSource{src("service-b", "dc1", "Service.Meta.version == v2", false)}}, [][]string{{"10.0.0.2", "10.0.0.4", "10.0.0.5"}}},
		{"only passing", endpointSpec{[]endpointSource{src("service-b", "dc1", "Service.Meta.version == v2", true)}}, [][]string{{"10.0.0.2", "10.0.0.5"}}},
		{"tags", endpointSpec{[]endpointSource{src("service-b", "dc1", "canary in Service.Tags", false)}}, [][]string{{"10.0.0.2", "10.0.0.5"}}},
		{"empty subset", endpointSpec{[]endpointSource{src("service-b", "dc1", "Service.Meta.version == v9", false)}}, nil},
		{"failover keeps empty priorities", endpointSpec{[]endpointSource{
			src("service-b", "dc1", "Service.Meta.version == v9", false),
			src("service-b", "dc2", "", false),
			src("service-x", "dc1", "", false),
			src("service-c", "dc1", "", false),
		}}, [][]string{{}, {"10.0.1.6"}, {}, {"10.0.2.1"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cla, err := targetAssignment("name", tc.spec, f.source(), metaFilter)
			if err != nil {
				t.Fatal(err)
			}
			if err := envoyvalidate.All(cla); err != nil {
				t.Fatalf("CLA fails validation: %v", err)
			}
			got := addrsByPriority(cla)
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("endpoints by priority = %v, want %v", got, tc.want)
			}
			for _, l := range cla.GetEndpoints() {
				if l.GetLoadBalancingWeight().GetValue() != 1 {
					t.Errorf("locality weight = %v (gRPC-Go ignores zero-weight localities)", l.GetLoadBalancingWeight())
				}
			}
		})
	}
	// A plain spec is exactly the pre-L7 assignment.
	plain := endpointSpec{[]endpointSource{src("service-b", "dc1", "", false)}}
	cla, _ := targetAssignment("n", plain, f.source(), metaFilter)
	if want := loadAssignment("n", "dc1", f.source().sidecars("service-b", "dc1")); !proto.Equal(cla, want) {
		t.Errorf("plain CLA = %v, want %v", cla, want)
	}
	// A filter that fails leaves the instance out and reports the error.
	bad := endpointSpec{[]endpointSource{src("service-b", "dc1", "Service.Weird", false)}}
	cla, err := targetAssignment("n", bad, f.source(), metaFilter)
	if err == nil || len(cla.GetEndpoints()) != 0 {
		t.Errorf("bad filter: cla %v err %v", cla, err)
	}
}

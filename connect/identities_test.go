package connect

import (
	"testing"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/structs"
)

// ProxyIdentities names every proxy of a group as Registrations registers
// it: the allocation's socket accepts them by these identities while the
// catalog does not hold them.
func TestProxyIdentitiesMatchRegistrations(t *testing.T) {
	ports := func(labels ...string) *structs.AllocatedResources {
		var pm []structs.PortMapping
		for i, l := range labels {
			pm = append(pm, structs.PortMapping{Label: l, Value: 21000 + i, To: 21000 + i})
		}
		return &structs.AllocatedResources{Shared: structs.AllocatedSharedResources{Ports: pm}}
	}
	cases := []struct {
		name  string
		job   *structs.Job
		group string
		res   *structs.AllocatedResources
	}{
		{"sidecar", dashboardJob(), "dashboard", ports("http", "connect-proxy-count-dashboard")},
		{"ingress gateway", ingressJob(), "gw", ports("inbound")},
		{"terminating gateway", terminatingJob(), "gw", ports("connect-terminating-tgw")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := Inject(tc.job); err != nil {
				t.Fatal(err)
			}
			alloc := &structs.Allocation{ID: "a1", Job: tc.job, TaskGroup: tc.group, AllocatedResources: tc.res}
			regs, err := Registrations(Placement{Alloc: alloc, Address: "172.26.64.5", NodeID: "n1", Datacenter: "dc1"})
			if err != nil {
				t.Fatal(err)
			}
			var want []catalog.ServiceInstance
			for _, r := range regs {
				if catalog.IsProxyKind(r.Kind) {
					want = append(want, r)
				}
			}
			got := ProxyIdentities(alloc)
			if len(got) != len(want) || len(got) == 0 {
				t.Fatalf("identities %+v, want those of %+v", got, want)
			}
			for i := range got {
				g, w := got[i], want[i]
				if g.ID != w.ID || g.Name != w.Name || g.Kind != w.Kind || g.AllocID != w.AllocID ||
					g.Proxy == nil || g.Proxy.DestinationServiceName != w.Proxy.DestinationServiceName {
					t.Errorf("identity %+v (proxy %+v), want %+v (proxy %+v)", g, g.Proxy, w, w.Proxy)
				}
			}
		})
	}
	if got := ProxyIdentities(&structs.Allocation{ID: "a1"}); got != nil {
		t.Errorf("allocation without a job: %+v", got)
	}
}

package connect

import (
	"errors"
	"reflect"
	"testing"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/structs"
)

func meshGatewayJob(tagged map[string]string) *structs.Job {
	return &structs.Job{ID: "mgw", Name: "mgw", TaskGroups: []*structs.TaskGroup{{
		Name:     "gw",
		Networks: []*structs.NetworkResource{{Mode: "bridge", ReservedPorts: []structs.Port{{Label: "mesh", Value: 24000, To: 24000}}}},
		Services: []*structs.Service{{
			Name: "mesh-gateway", PortLabel: "mesh", TaggedAddresses: tagged,
			Connect: &structs.ConsulConnect{Gateway: &structs.ConsulGateway{Mesh: &structs.ConsulMeshConfigEntry{}}},
		}},
	}}}
}

// A mesh gateway registers lan and wan at its advertised address unless
// the service's tagged_addresses say otherwise ("ip" keeps the
// registered port); a bad value fails the registration.
func TestMeshGatewayTaggedAddresses(t *testing.T) {
	reg := func(tagged map[string]string) (map[string]catalog.TaggedAddress, error) {
		job := meshGatewayJob(tagged)
		if err := Inject(job); err != nil {
			t.Fatal(err)
		}
		alloc := &structs.Allocation{ID: "a1", Job: job, TaskGroup: "gw", AllocatedResources: &structs.AllocatedResources{
			Shared: structs.AllocatedSharedResources{Ports: []structs.PortMapping{{Label: "mesh", Value: 24000, To: 24000}}},
		}}
		got, err := Registrations(Placement{Alloc: alloc, Address: "172.26.64.9", NodeID: "n1", Datacenter: "dc1"})
		if err != nil {
			return nil, err
		}
		if len(got) != 1 || got[0].Kind != catalog.KindMeshGateway {
			t.Fatalf("registrations = %+v", got)
		}
		return got[0].TaggedAddresses, nil
	}
	here := catalog.TaggedAddress{Address: "172.26.64.9", Port: 24000}
	for _, tc := range []struct {
		tagged map[string]string
		want   map[string]catalog.TaggedAddress
	}{
		{nil, map[string]catalog.TaggedAddress{"lan": here, "wan": here}},
		{map[string]string{"wan": "127.0.9.1:8443"}, map[string]catalog.TaggedAddress{"lan": here, "wan": {Address: "127.0.9.1", Port: 8443}}},
		{map[string]string{"wan": "127.0.9.1", "lan_ipv4": "10.1.1.1:1"}, map[string]catalog.TaggedAddress{
			"lan": here, "wan": {Address: "127.0.9.1", Port: 24000}, "lan_ipv4": {Address: "10.1.1.1", Port: 1}}},
	} {
		got, err := reg(tc.tagged)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%v: tagged %v, %v; want %v", tc.tagged, got, err, tc.want)
		}
	}
	if _, err := reg(map[string]string{"wan": "gw.example:443"}); !errors.Is(err, ErrTaggedAddress) {
		t.Errorf("bad wan: err = %v, want ErrTaggedAddress", err)
	}
}

package connect

import (
	"reflect"
	"testing"

	consul "github.com/hashicorp/consul/api"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/configentry"
	"github.com/meshlet/meshlet/structs"
)

// terminatingJob has a terminating gateway group (bridge, no port: one is
// injected) linking db and api (with TLS origination).
func terminatingJob() *structs.Job {
	return &structs.Job{ID: "tgw", Name: "tgw", TaskGroups: []*structs.TaskGroup{{
		Name:     "gw",
		Networks: []*structs.NetworkResource{{Mode: "bridge"}},
		Services: []*structs.Service{{
			Name: "tgw",
			Connect: &structs.ConsulConnect{Gateway: &structs.ConsulGateway{
				Kind: "terminating",
				Terminating: &structs.ConsulTerminatingConfigEntry{Services: []*structs.ConsulLinkedService{
					{Name: "db"},
					{Name: "api", CAFile: "/etc/ssl/ca.pem", CertFile: "local/c.pem", KeyFile: "local/k.pem", SNI: "api.example.com"},
				}},
			}},
		}},
	}}}
}

func TestInjectTerminatingGateway(t *testing.T) {
	job := terminatingJob()
	if err := Inject(job); err != nil {
		t.Fatal(err)
	}
	if err := Inject(job); err != nil { // idempotent
		t.Fatal(err)
	}
	tg := job.TaskGroups[0]
	if len(tg.Tasks) != 1 {
		t.Fatalf("tasks = %v", taskNames(tg))
	}
	gw := tg.Tasks[0]
	if gw.Name != "connect-terminating-tgw" || gw.Kind != "connect-terminating:tgw" || gw.Driver != ProxyDriver || gw.Lifecycle != nil {
		t.Errorf("task = %s kind %s driver %s lifecycle %+v", gw.Name, gw.Kind, gw.Driver, gw.Lifecycle)
	}
	if s := tg.Services[0]; s.PortLabel != "connect-terminating-tgw" {
		t.Errorf("port label = %q", s.PortLabel)
	}
	if want := []structs.Port{{Label: "connect-terminating-tgw", To: -1}}; !reflect.DeepEqual(tg.Networks[0].DynamicPorts, want) {
		t.Errorf("dynamic ports = %+v", tg.Networks[0].DynamicPorts)
	}
	if gw.Config["proxy_id"] != "_nomad-task-${NOMAD_ALLOC_ID}-group-gw-tgw-connect-terminating-tgw" || gw.Config["service"] != "tgw" {
		t.Errorf("config = %v", gw.Config)
	}
	if ProxyTaskFor(tg, tg.Services[0]) != gw {
		t.Error("ProxyTaskFor does not find the gateway task")
	}
	if svc, ok := ProxyKindService(gw.Kind); !ok || svc != "tgw" {
		t.Errorf("ProxyKindService = %q, %v", svc, ok)
	}
}

func TestRegistrationsTerminatingGateway(t *testing.T) {
	job := terminatingJob()
	if err := Inject(job); err != nil {
		t.Fatal(err)
	}
	alloc := &structs.Allocation{ID: "a1", Job: job, TaskGroup: "gw", AllocatedResources: &structs.AllocatedResources{
		Shared: structs.AllocatedSharedResources{Ports: []structs.PortMapping{{Label: "connect-terminating-tgw", Value: 23456, To: 23456}}},
	}}
	got, err := Registrations(Placement{Alloc: alloc, Address: "172.26.64.9", NodeID: "n1", Datacenter: "dc1"})
	if err != nil {
		t.Fatal(err)
	}
	want := []catalog.ServiceInstance{{
		ID: "_nomad-task-a1-group-gw-tgw-connect-terminating-tgw", Name: "tgw", Kind: catalog.KindTerminatingGateway,
		Address: "172.26.64.9", Port: 23456, AllocID: "a1", NodeID: "n1", Datacenter: "dc1", Healthy: true,
		Proxy: &catalog.Proxy{DestinationServiceName: "tgw"},
	}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("registrations:\n got %+v\nwant %+v", got, want)
	}
	if EnvoyNodeID("a1", "gw", job.TaskGroups[0].Services[0]) != want[0].ID {
		t.Error("the gateway's node ID is not its service ID")
	}
}

func TestEntryMutatorTerminating(t *testing.T) {
	job := terminatingJob()
	w := &fakeWriter{}
	if _, err := (EntryMutator{Writer: w}).Mutate(job); err != nil {
		t.Fatal(err)
	}
	want := &consul.TerminatingGatewayConfigEntry{Kind: "terminating-gateway", Name: "tgw", Services: []consul.LinkedService{
		{Name: "db"},
		{Name: "api", CAFile: "/etc/ssl/ca.pem", CertFile: "local/c.pem", KeyFile: "local/k.pem", SNI: "api.example.com"},
	}}
	if len(w.got) != 1 || !reflect.DeepEqual(w.got[0], want) {
		t.Fatalf("written %+v\nwant %+v", w.got, want)
	}
	if err := configentry.Validate(w.got[0]); err != nil {
		t.Errorf("the written entry does not validate: %v", err)
	}
}

package connect

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	consul "github.com/hashicorp/consul/api"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/configentry"
	"github.com/meshlet/meshlet/structs"
)

// ingressJob has an ingress gateway group (bridge, static 8080 -> 8080)
// and nothing else.
func ingressJob() *structs.Job {
	timeout := 3 * time.Second
	return &structs.Job{ID: "ing", Name: "ing", TaskGroups: []*structs.TaskGroup{{
		Name:     "gw",
		Networks: []*structs.NetworkResource{{Mode: "bridge", ReservedPorts: []structs.Port{{Label: "inbound", Value: 8080, To: 8080}}}},
		Services: []*structs.Service{{
			Name: "ingress", PortLabel: "8080",
			Connect: &structs.ConsulConnect{Gateway: &structs.ConsulGateway{
				Kind:  "ingress",
				Proxy: &structs.ConsulGatewayProxy{ConnectTimeout: &timeout},
				Ingress: &structs.ConsulIngressConfigEntry{Listeners: []*structs.ConsulIngressListener{
					{Port: 8080, Protocol: "tcp", Services: []*structs.ConsulIngressService{{Name: "api"}}},
				}},
			}},
		}},
	}}}
}

func TestInjectIngressGateway(t *testing.T) {
	job := ingressJob()
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
	if gw.Name != "connect-ingress-ingress" || gw.Kind != "connect-ingress:ingress" || gw.Driver != ProxyDriver || gw.Lifecycle != nil {
		t.Errorf("task = %s kind %s driver %s lifecycle %+v", gw.Name, gw.Kind, gw.Driver, gw.Lifecycle)
	}
	if *gw.Resources.CPU != 250 || *gw.Resources.MemoryMB != 128 || gw.ShutdownDelay != 5*time.Second {
		t.Errorf("defaults not Nomad's: %+v delay %s", gw.Resources, gw.ShutdownDelay)
	}
	if gw.Config["proxy_id"] != "_nomad-task-${NOMAD_ALLOC_ID}-group-gw-ingress-8080" || gw.Config["service"] != "ingress" ||
		gw.Config["admin_bind"] != "127.0.0.2:19001" {
		t.Errorf("config = %v", gw.Config)
	}
	if len(tg.Networks[0].DynamicPorts) != 0 {
		t.Errorf("a gateway got a dynamic port: %+v", tg.Networks[0].DynamicPorts)
	}
	if ProxyTaskFor(tg, tg.Services[0]) != gw {
		t.Error("ProxyTaskFor does not find the gateway task")
	}
	if svc, ok := ProxyKindService(gw.Kind); !ok || svc != "ingress" {
		t.Errorf("ProxyKindService = %q, %v", svc, ok)
	}
}

func TestInjectIngressNextToSidecar(t *testing.T) {
	job := dashboardJob()
	tg := job.TaskGroups[0]
	tg.Services = append(tg.Services, ingressJob().TaskGroups[0].Services[0])
	tg.Services[1].Connect.SidecarTask = &structs.SidecarTask{Name: "my-gw", Env: map[string]string{"A": "b"}}
	if err := Inject(job); err != nil {
		t.Fatal(err)
	}
	if got := taskNames(tg); !reflect.DeepEqual(got, []string{"connect-proxy-count-dashboard", "dashboard", "my-gw"}) {
		t.Fatalf("tasks = %v", got)
	}
	if px, gw := tg.Tasks[0], tg.Tasks[2]; px.Config["admin_bind"] != "127.0.0.2:19001" || gw.Config["admin_bind"] != "127.0.0.2:19002" || gw.Env["A"] != "b" {
		t.Errorf("admin binds %v %v, env %v", px.Config["admin_bind"], gw.Config["admin_bind"], gw.Env)
	}
}

func TestInjectIngressNetworks(t *testing.T) {
	job := ingressJob()
	job.TaskGroups[0].Networks = append(job.TaskGroups[0].Networks, &structs.NetworkResource{Mode: "host"})
	if err := Inject(job); !errors.Is(err, ErrInvalid) {
		t.Fatalf("two networks: %v", err)
	}
	job.TaskGroups[0].Networks = []*structs.NetworkResource{{Mode: "none"}}
	if err := Inject(job); !errors.Is(err, ErrInvalid) {
		t.Fatalf("network mode none: %v", err)
	}
	// Host mode, as Nomad allows for gateways: the proxy runs in the
	// host's namespace, its admin listener on 127.0.0.2 and a dynamic port
	// of its own.
	for _, nets := range [][]*structs.NetworkResource{nil, {{Mode: "host"}}} {
		job = ingressJob()
		job.TaskGroups[0].Networks = nets
		if err := Inject(job); err != nil {
			t.Fatalf("host mode: %v", err)
		}
		tg := job.TaskGroups[0]
		gw := tg.Tasks[len(tg.Tasks)-1]
		if gw.Config["network_mode"] != "host" || gw.Config["admin_bind"] != "127.0.0.2:${NOMAD_HOST_PORT_connect_admin_ingress}" {
			t.Errorf("host-mode gateway task config = %v", gw.Config)
		}
		if len(tg.Networks) != 1 || len(tg.Networks[0].DynamicPorts) != 1 || tg.Networks[0].DynamicPorts[0].Label != "connect-admin-ingress" {
			t.Errorf("host-mode gateway network = %+v", tg.Networks)
		}
	}
}

func TestRegistrationsIngressGateway(t *testing.T) {
	job := ingressJob()
	if err := Inject(job); err != nil {
		t.Fatal(err)
	}
	alloc := &structs.Allocation{ID: "a1", Job: job, TaskGroup: "gw", AllocatedResources: &structs.AllocatedResources{
		Shared: structs.AllocatedSharedResources{Ports: []structs.PortMapping{{Label: "inbound", Value: 8080, To: 8080}}},
	}}
	got, err := Registrations(Placement{Alloc: alloc, Address: "172.26.64.9", NodeID: "n1", Datacenter: "dc1"})
	if err != nil {
		t.Fatal(err)
	}
	want := []catalog.ServiceInstance{{
		ID: "_nomad-task-a1-group-gw-ingress-8080", Name: "ingress", Kind: catalog.KindIngressGateway,
		Address: "172.26.64.9", Port: 8080, AllocID: "a1", NodeID: "n1", Datacenter: "dc1", Healthy: true,
		Proxy: &catalog.Proxy{DestinationServiceName: "ingress", Config: map[string]any{"connect_timeout_ms": 3000}},
	}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("registrations:\n got %+v\nwant %+v", got, want)
	}
	if EnvoyNodeID("a1", "gw", job.TaskGroups[0].Services[0]) != want[0].ID {
		t.Error("the gateway's node ID is not its service ID")
	}
}

type fakeWriter struct {
	got []configentry.Entry
	err error
}

func (w *fakeWriter) PutConfigEntry(_ context.Context, e configentry.Entry, _ *uint64) (bool, uint64, error) {
	w.got = append(w.got, e)
	return w.err == nil, 1, w.err
}

func TestEntryMutator(t *testing.T) {
	job := ingressJob()
	l := job.TaskGroups[0].Services[0].Connect.Gateway.Ingress
	l.Listeners = append(l.Listeners, &structs.ConsulIngressListener{Port: 8081, Protocol: "http", Services: []*structs.ConsulIngressService{
		{Name: "web", Hosts: []string{"web.example.com"}}, {Name: "dash"}}})
	w := &fakeWriter{}
	if _, err := (EntryMutator{Writer: w}).Mutate(job); err != nil {
		t.Fatal(err)
	}
	want := &consul.IngressGatewayConfigEntry{Kind: "ingress-gateway", Name: "ingress", Listeners: []consul.IngressListener{
		{Port: 8080, Protocol: "tcp", Services: []consul.IngressService{{Name: "api"}}},
		{Port: 8081, Protocol: "http", Services: []consul.IngressService{{Name: "web", Hosts: []string{"web.example.com"}}, {Name: "dash"}}},
	}}
	if len(w.got) != 1 || !reflect.DeepEqual(w.got[0], want) {
		t.Fatalf("written %+v\nwant %+v", w.got, want)
	}
	if err := configentry.Validate(w.got[0]); err != nil {
		t.Errorf("the written entry does not validate: %v", err)
	}
	w.err = configentry.ErrInvalid
	if _, err := (EntryMutator{Writer: w}).Mutate(job); !errors.Is(err, configentry.ErrInvalid) {
		t.Errorf("Mutate = %v, want the writer's error", err)
	}
	w.got = nil
	if _, err := (EntryMutator{Writer: w}).Mutate(dashboardJob()); err != nil || len(w.got) != 0 {
		t.Errorf("a job without gateways wrote %v (%v)", w.got, err)
	}
}

func TestGatewayProxyConfig(t *testing.T) {
	d := 1500 * time.Millisecond
	got := GatewayProxyConfig(&structs.ConsulGatewayProxy{ConnectTimeout: &d, EnvoyGatewayNoDefaultBind: true, EnvoyGatewayBindTaggedAddresses: true,
		EnvoyDNSDiscoveryType: "STRICT_DNS", Config: map[string]any{"foo": "bar", "connect_timeout_ms": 1},
		EnvoyGatewayBindAddresses: map[string]*structs.ConsulGatewayBindAddress{"lo": {Name: "lo", Address: "127.0.0.1", Port: 8080}}})
	want := map[string]any{"foo": "bar", "connect_timeout_ms": 1500, "envoy_gateway_no_default_bind": true, "envoy_gateway_bind_tagged_addresses": true,
		"envoy_dns_discovery_type": "STRICT_DNS", "envoy_gateway_bind_addresses": map[string]any{"lo": map[string]any{"address": "127.0.0.1", "port": 8080}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("GatewayProxyConfig =\n %v\nwant %v", got, want)
	}
	if got := GatewayProxyConfig(&structs.ConsulGatewayProxy{}); got != nil {
		t.Fatalf("empty proxy block = %v", got)
	}
}

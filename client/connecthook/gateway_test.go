package connecthook

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/client/allocdir"
	"github.com/meshlet/meshlet/client/allocrunner"
	"github.com/meshlet/meshlet/connect"
	"github.com/meshlet/meshlet/internal/envoyvalidate"
	"github.com/meshlet/meshlet/structs"
	"github.com/meshlet/meshlet/xds"
)

// An ingress gateway allocation gets its socket, an Envoy bootstrap whose
// node is the gateway service's ID, and its catalog registration.
func TestHooksIngressGateway(t *testing.T) {
	job := &structs.Job{ID: "j", Name: "j", TaskGroups: []*structs.TaskGroup{{
		Name:     "gw",
		Networks: []*structs.NetworkResource{{Mode: "bridge", ReservedPorts: []structs.Port{{Label: "in", Value: 8080, To: 8080}}}},
		Services: []*structs.Service{{Name: "ingress", PortLabel: "8080", Connect: &structs.ConsulConnect{Gateway: &structs.ConsulGateway{
			Ingress: &structs.ConsulIngressConfigEntry{Listeners: []*structs.ConsulIngressListener{
				{Port: 8080, Protocol: "tcp", Services: []*structs.ConsulIngressService{{Name: "api"}}}}},
		}}}},
	}}}
	if err := connect.Inject(job); err != nil {
		t.Fatal(err)
	}
	alloc := &structs.Allocation{ID: "a1", Job: job, TaskGroup: "gw", AllocatedResources: &structs.AllocatedResources{
		Shared: structs.AllocatedSharedResources{Ports: []structs.PortMapping{{Label: "in", Value: 8080, To: 8080}}},
	}}
	ad := allocdir.New(t.TempDir(), alloc.ID)
	if err := ad.Build([]string{"connect-ingress-ingress"}, nil); err != nil {
		t.Fatal(err)
	}
	hc := &allocrunner.AllocHookContext{Alloc: alloc, AllocDir: ad, Logger: hclog.NewNullLogger(),
		NetworkStatus: &structs.AllocNetworkStatus{InterfaceName: "eth0", Address: "10.9.0.3"}}
	cat := catalog.New()
	socks := &sockets{served: map[string]string{}, removed: map[string]string{}}
	d := Deps{Sockets: socks, Catalog: cat, NodeID: "n1", Datacenter: "dc1", SidecarMode: "envoy", EnvoyBinary: "/usr/bin/envoy",
		ValidateProxy: func(inst catalog.ServiceInstance) error {
			return xds.ValidateProxy(inst, "dc1", "11111111-2222-3333-4444-555555555555.meshlet")
		}}
	for _, h := range Factory(d)(alloc) {
		if err := h.Prerun(context.Background(), hc); err != nil {
			t.Fatal(err)
		}
	}
	if socks.served["a1"] == "" {
		t.Error("no socket served for the gateway allocation")
	}
	js, err := os.ReadFile(filepath.Join(ad.TaskDir("connect-ingress-ingress").SecretsDir, "envoy_bootstrap.json"))
	if err != nil {
		t.Fatal(err)
	}
	b := &bootstrapv3.Bootstrap{}
	if err := protojson.Unmarshal(js, b); err != nil {
		t.Fatal(err)
	}
	if err := envoyvalidate.All(b); err != nil {
		t.Fatal(err)
	}
	if b.Node.Id != "_nomad-task-a1-group-gw-ingress-8080" || b.Node.Cluster != "ingress" {
		t.Errorf("node = %s / %s", b.Node.Id, b.Node.Cluster)
	}
	insts := cat.Service("ingress")
	if len(insts) != 1 || insts[0].Kind != catalog.KindIngressGateway || insts[0].Address != "10.9.0.3" || insts[0].Port != 8080 {
		t.Fatalf("catalog = %+v", insts)
	}
	if ps := cat.Proxies(); len(ps) != 1 || ps[0].ID != b.Node.Id {
		t.Errorf("proxies = %+v", ps)
	}
}

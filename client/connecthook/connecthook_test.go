package connecthook

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
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

// sockets records what the hook asks of the control plane (a fake of a
// two-method interface; the real one is exercised by the e2e tests).
type sockets struct {
	served, removed map[string]string
	proxies         map[string][]catalog.ServiceInstance
}

func (s *sockets) ServeAllocSocket(id, path, _ string, proxies []catalog.ServiceInstance) error {
	s.served[id] = path
	if s.proxies == nil {
		s.proxies = map[string][]catalog.ServiceInstance{}
	}
	s.proxies[id] = proxies
	return nil
}
func (s *sockets) RemoveAllocSocket(id string) { s.removed[id] = "" }

func webAlloc(t *testing.T, proxyConfig map[string]any) *structs.Allocation {
	t.Helper()
	job := &structs.Job{ID: "j", Name: "j", TaskGroups: []*structs.TaskGroup{{
		Name:     "web",
		Networks: []*structs.NetworkResource{{Mode: "bridge"}},
		Services: []*structs.Service{{Name: "web", PortLabel: "8080", Connect: &structs.ConsulConnect{
			SidecarService: &structs.ConsulSidecarService{Proxy: &structs.ConsulProxy{
				Config:    proxyConfig,
				Upstreams: []*structs.ConsulUpstream{{DestinationName: "db", LocalBindPort: 9191}},
			}},
		}}},
		Tasks: []*structs.Task{{Name: "web", Driver: "raw_exec"}},
	}}}
	if err := connect.Inject(job); err != nil {
		t.Fatal(err)
	}
	return &structs.Allocation{ID: "a1", Job: job, TaskGroup: "web", AllocatedResources: &structs.AllocatedResources{
		Shared: structs.AllocatedSharedResources{Ports: []structs.PortMapping{{Label: "connect-proxy-web", Value: 21000, To: 21000}}},
	}}
}

func run(t *testing.T, mode string, proxyConfig map[string]any) (*allocrunner.AllocHookContext, *catalog.Catalog, *sockets, []allocrunner.AllocHook, error) {
	t.Helper()
	return runDeps(t, mode, proxyConfig, nil, nil)
}

// runDeps is run with a last say on the hooks' Deps, and the allocation
// directory ad when given (else a new one).
func runDeps(t *testing.T, mode string, proxyConfig map[string]any, edit func(*Deps), ad *allocdir.AllocDir) (*allocrunner.AllocHookContext, *catalog.Catalog, *sockets, []allocrunner.AllocHook, error) {
	t.Helper()
	cat := catalog.New()
	socks := &sockets{served: map[string]string{}, removed: map[string]string{}}
	alloc := webAlloc(t, proxyConfig)
	if ad == nil {
		ad = allocdir.New(t.TempDir(), alloc.ID)
	}
	if err := ad.Build([]string{"web", "connect-proxy-web"}, nil); err != nil {
		t.Fatal(err)
	}
	hc := &allocrunner.AllocHookContext{Alloc: alloc, AllocDir: ad, Logger: hclog.NewNullLogger(),
		NetworkStatus: &structs.AllocNetworkStatus{InterfaceName: "eth0", Address: "10.9.0.2"}}
	d := Deps{Sockets: socks, Catalog: cat, NodeID: "n1", Datacenter: "dc1", SidecarMode: mode,
		EnvoyBinary: "/usr/bin/envoy", ValidateProxy: func(inst catalog.ServiceInstance) error {
			return xds.ValidateProxy(inst, "dc1", "11111111-2222-3333-4444-555555555555.meshlet")
		}}
	if edit != nil {
		edit(&d)
	}
	hooks := Factory(d)(alloc)
	for _, h := range hooks {
		if err := h.Prerun(context.Background(), hc); err != nil {
			return hc, cat, socks, hooks, err
		}
	}
	return hc, cat, socks, hooks, nil
}

func TestHooksJoinAllocationToMesh(t *testing.T) {
	hc, cat, socks, hooks, err := run(t, "auto", map[string]any{"envoy_prometheus_bind_addr": "0.0.0.0:9102"})
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(hc.AllocDir.SharedDir, "run", "meshlet_grpc.sock"); socks.served["a1"] != want {
		t.Errorf("socket served at %q, want %q", socks.served["a1"], want)
	}
	// The socket knows its sidecar from the job, registered or not.
	if px := socks.proxies["a1"]; len(px) != 1 || px[0].ID != "_nomad-task-a1-group-web-web-8080-sidecar-proxy" ||
		px[0].Proxy.DestinationServiceName != "web" {
		t.Errorf("socket served for proxies %+v, want web's sidecar", px)
	}
	if hc.Env["NOMAD_UPSTREAM_ADDR_db"] != "127.0.0.1:9191" {
		t.Errorf("upstream env = %v", hc.Env)
	}
	js, err := os.ReadFile(filepath.Join(hc.AllocDir.TaskDir("connect-proxy-web").SecretsDir, "envoy_bootstrap.json"))
	if err != nil {
		t.Fatalf("envoy bootstrap not written in envoy mode: %v", err)
	}
	b := &bootstrapv3.Bootstrap{}
	if err := protojson.Unmarshal(js, b); err != nil {
		t.Fatal(err)
	}
	if err := envoyvalidate.All(b); err != nil {
		t.Fatalf("bootstrap fails Envoy validation: %v", err)
	}
	if b.Node.Id != "_nomad-task-a1-group-web-web-8080-sidecar-proxy" {
		t.Errorf("node id = %q", b.Node.Id)
	}
	proxies := cat.ConnectProxies("web")
	if len(proxies) != 1 || proxies[0].Address != "10.9.0.2" || proxies[0].Port != 21000 || len(cat.Service("web")) != 1 {
		t.Fatalf("catalog = proxies %+v, web %+v", proxies, cat.Service("web"))
	}
	hooks[1].(allocrunner.PreKillHook).PreKill(context.Background(), hc)
	if len(cat.Service("web")) != 0 || len(cat.ConnectProxies("web")) != 0 {
		t.Error("PreKill left registrations behind")
	}
	for i := len(hooks) - 1; i >= 0; i-- {
		if err := hooks[i].Postrun(context.Background(), hc); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := socks.removed["a1"]; !ok {
		t.Error("socket not removed at Postrun")
	}
}

func TestBuiltinModeWritesNoBootstrap(t *testing.T) {
	hc, _, _, _, err := run(t, "builtin", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(hc.AllocDir.TaskDir("connect-proxy-web").SecretsDir, "envoy_bootstrap.json")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("bootstrap written in builtin mode: %v", err)
	}
}

func TestBadEscapeHatchFailsAllocation(t *testing.T) {
	tests := []struct {
		mode string
		cfg  map[string]any
		want string
	}{
		{"auto", map[string]any{"envoy_extra_static_clusters_json": `{"name": `}, "envoy_extra_static_clusters_json"},
		{"builtin", map[string]any{"envoy_public_listener_json": `{"name": 1`}, "envoy_public_listener_json"},
		{"builtin", map[string]any{"protocol": "smtp"}, "protocol"},
	}
	for _, tt := range tests {
		_, cat, _, _, err := run(t, tt.mode, tt.cfg)
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), `service "web"`) {
			t.Errorf("mode %s config %v: err = %v, want a message naming %s", tt.mode, tt.cfg, err, tt.want)
		}
		if len(cat.Proxies()) != 0 {
			t.Errorf("a rejected proxy was registered: %+v", cat.Proxies())
		}
	}
}

// registrar records what the services hook registers, through the
// Registrar interface (no catalog needed).
type registrar struct {
	registered   []string
	deregistered []string
}

func (r *registrar) Register(inst catalog.ServiceInstance) {
	r.registered = append(r.registered, inst.ID)
}
func (r *registrar) DeregisterAlloc(id string) { r.deregistered = append(r.deregistered, id) }
func (r *registrar) Deregister(id string) error {
	r.deregistered = append(r.deregistered, id)
	return nil
}

var _ Registrar = (*catalog.Catalog)(nil)

func TestServicesHookUsesRegistrar(t *testing.T) {
	reg := &registrar{}
	alloc := webAlloc(t, nil)
	hc := &allocrunner.AllocHookContext{Alloc: alloc, Logger: hclog.NewNullLogger(),
		NetworkStatus: &structs.AllocNetworkStatus{Address: "10.9.0.2"}}
	h := &ServicesHook{d: Deps{Catalog: reg, NodeID: "n1", Datacenter: "dc1"}}
	if err := h.Prerun(context.Background(), hc); err != nil {
		t.Fatal(err)
	}
	want := []string{"_nomad-task-a1-group-web-web-8080", "_nomad-task-a1-group-web-web-8080-sidecar-proxy"}
	if strings.Join(reg.registered, ",") != strings.Join(want, ",") {
		t.Fatalf("registered %v, want %v", reg.registered, want)
	}
	if err := h.Postrun(context.Background(), hc); err != nil || len(reg.deregistered) != 1 || reg.deregistered[0] != "a1" {
		t.Fatalf("deregistered %v, %v", reg.deregistered, err)
	}
}

package connect

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/structs"
)

func dashboardJob() *structs.Job {
	return &structs.Job{ID: "countdash", Name: "countdash", TaskGroups: []*structs.TaskGroup{{
		Name:     "dashboard",
		Networks: []*structs.NetworkResource{{Mode: "bridge", ReservedPorts: []structs.Port{{Label: "http", Value: 9002, To: 9002}}}},
		Services: []*structs.Service{{
			Name: "count-dashboard", PortLabel: "http",
			Connect: &structs.ConsulConnect{SidecarService: &structs.ConsulSidecarService{
				Proxy: &structs.ConsulProxy{Upstreams: []*structs.ConsulUpstream{{DestinationName: "count-api", LocalBindPort: 8080}}},
			}},
		}},
		Tasks: []*structs.Task{{Name: "dashboard", Driver: "raw_exec"}},
	}}}
}

func TestInjectAddsSidecarTaskAndPort(t *testing.T) {
	job := dashboardJob()
	if err := Inject(job); err != nil {
		t.Fatal(err)
	}
	tg := job.TaskGroups[0]
	if len(tg.Tasks) != 2 || tg.Tasks[0].Name != "connect-proxy-count-dashboard" {
		t.Fatalf("tasks = %v", taskNames(tg))
	}
	px := tg.Tasks[0]
	if px.Lifecycle == nil || px.Lifecycle.Hook != "prestart" || !px.Lifecycle.Sidecar {
		t.Errorf("lifecycle = %+v", px.Lifecycle)
	}
	if *px.Resources.CPU != 250 || *px.Resources.MemoryMB != 128 || px.ShutdownDelay != 5*time.Second {
		t.Errorf("defaults not Nomad's: %+v delay %s", px.Resources, px.ShutdownDelay)
	}
	if got := ProxyTask(tg, "count-dashboard"); got != px || px.Kind != "connect-proxy:count-dashboard" {
		t.Errorf("ProxyTask = %v, kind %q", got, px.Kind)
	}
	want := []structs.Port{{Label: "connect-proxy-count-dashboard", To: -1}}
	if !reflect.DeepEqual(tg.Networks[0].DynamicPorts, want) {
		t.Errorf("dynamic ports = %+v", tg.Networks[0].DynamicPorts)
	}
	wantConfig := map[string]any{
		"proxy_id": "_nomad-task-${NOMAD_ALLOC_ID}-group-dashboard-count-dashboard-http-sidecar-proxy",
		"service":  "count-dashboard",
		// The socket lives in alloc/run (root-only), not alloc/tmp (any
		// task may plant files there).
		"grpc_addr":      "unix://${NOMAD_ALLOC_DIR}/run/meshlet_grpc.sock",
		"admin_bind":     "127.0.0.2:19001",
		"mode":           "${attr.meshlet.sidecar}",
		"envoy_binary":   "${attr.meshlet.envoy_binary}",
		"bootstrap_path": "${NOMAD_SECRETS_DIR}/envoy_bootstrap.json",
		"token_file":     "${NOMAD_SECRETS_DIR}/si_token",
	}
	if px.Driver != "connect_proxy" || !reflect.DeepEqual(px.Config, wantConfig) {
		t.Errorf("sidecar driver %q config %v, want connect_proxy %v", px.Driver, px.Config, wantConfig)
	}
	if got := SocketPath("/d/alloc/a1/alloc/"); got != "/d/alloc/a1/alloc/run/meshlet_grpc.sock" {
		t.Errorf("SocketPath = %s", got)
	}
	if err := Inject(job); err != nil || len(tg.Tasks) != 2 || len(tg.Networks[0].DynamicPorts) != 1 {
		t.Fatalf("Inject not idempotent: %v, tasks %v", err, taskNames(tg))
	}
}

func TestInjectMergesSidecarTask(t *testing.T) {
	job := dashboardJob()
	mem, delay := 300, 2*time.Second
	job.TaskGroups[0].Services[0].Connect.SidecarTask = &structs.SidecarTask{
		Env: map[string]string{"X": "1"}, Resources: &structs.Resources{MemoryMB: &mem}, ShutdownDelay: &delay,
		Config: map[string]any{"envoy_args": []any{"-l", "debug"}, "admin_bind": "127.0.0.2:19100"},
	}
	if err := Inject(job); err != nil {
		t.Fatal(err)
	}
	px := job.TaskGroups[0].Tasks[0]
	if *px.Resources.MemoryMB != 300 || *px.Resources.CPU != 250 || px.ShutdownDelay != delay || px.Env["X"] != "1" {
		t.Errorf("merge: resources %+v delay %s env %v", px.Resources, px.ShutdownDelay, px.Env)
	}
	if px.Driver != "connect_proxy" || px.Config["admin_bind"] != "127.0.0.2:19100" || px.Config["envoy_args"] == nil ||
		px.Config["proxy_id"] == nil || len(px.Config) != 9 {
		t.Errorf("config merge = %s %v", px.Driver, px.Config)
	}
}

// TestInjectSidecarTaskDriver: a sidecar_task that names connect_proxy
// merges like the default; raw_exec starts from the same sidecar as a
// command line (what a raw_exec sidecar always was); any other driver
// starts from its own config only.
func TestInjectSidecarTaskDriver(t *testing.T) {
	rawArgs := []any{"connect", "sidecar",
		"-proxy-id", "_nomad-task-${NOMAD_ALLOC_ID}-group-dashboard-count-dashboard-http-sidecar-proxy",
		"-service", "count-dashboard", "-grpc-addr", "unix://${NOMAD_ALLOC_DIR}/run/meshlet_grpc.sock",
		"-admin-bind", "127.0.0.2:19001", "-mode", "${attr.meshlet.sidecar}", "-envoy-binary", "${attr.meshlet.envoy_binary}",
		"-bootstrap-path", "${NOMAD_SECRETS_DIR}/envoy_bootstrap.json", "-token-file", "${NOMAD_SECRETS_DIR}/si_token"}
	envoyArgs := []any{"-c", "/secrets/envoy_bootstrap.json", "-l", "info", "--concurrency", "1", "--disable-hot-restart"}
	tests := []struct {
		name       string
		driver     string
		config     map[string]any
		wantDriver string
		want       map[string]any
	}{
		{"raw_exec alone", "raw_exec", nil, "raw_exec", map[string]any{"command": "${attr.meshlet.binary}", "args": rawArgs}},
		{"raw_exec with a command", "raw_exec", map[string]any{"command": "/usr/local/bin/envoy-wrapper"}, "raw_exec",
			map[string]any{"command": "/usr/local/bin/envoy-wrapper", "args": rawArgs}},
		{"raw_exec with its own command line", "raw_exec", map[string]any{"command": "/usr/local/bin/envoy", "args": []any{"-c", "x"}},
			"raw_exec", map[string]any{"command": "/usr/local/bin/envoy", "args": []any{"-c", "x"}}},
		{"docker starts from the Envoy container", "docker", map[string]any{"image": "envoyproxy/envoy:v1.31"}, "docker",
			map[string]any{"image": "envoyproxy/envoy:v1.31", "args": envoyArgs}},
		{"another driver without config", "exec", nil, "exec", map[string]any{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			job := dashboardJob()
			job.TaskGroups[0].Services[0].Connect.SidecarTask = &structs.SidecarTask{Driver: tc.driver, Config: tc.config}
			if err := Inject(job); err != nil {
				t.Fatal(err)
			}
			px := job.TaskGroups[0].Tasks[0]
			if px.Driver != tc.wantDriver || !reflect.DeepEqual(px.Config, tc.want) {
				t.Errorf("driver %q config %#v\nwant %q %#v", px.Driver, px.Config, tc.wantDriver, tc.want)
			}
		})
	}
	job := dashboardJob()
	job.TaskGroups[0].Services[0].Connect.SidecarTask = &structs.SidecarTask{Driver: "connect_proxy", Config: map[string]any{"mode": "builtin"}}
	if err := Inject(job); err != nil {
		t.Fatal(err)
	}
	if px := job.TaskGroups[0].Tasks[0]; px.Driver != "connect_proxy" || px.Config["mode"] != "builtin" || px.Config["service"] != "count-dashboard" {
		t.Errorf("connect_proxy named explicitly: %s %v", px.Driver, px.Config)
	}
}

func TestInjectRejectsHostNetwork(t *testing.T) {
	job := dashboardJob()
	job.TaskGroups[0].Networks[0].Mode = "host"
	if err := Inject(job); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Inject(host mode) = %v, want ErrInvalid", err)
	}
}

func TestRegistrations(t *testing.T) {
	job := dashboardJob()
	svc := job.TaskGroups[0].Services[0]
	svc.Meta, svc.Tags = map[string]string{"version": "v2"}, []string{"canary"}
	if err := Inject(job); err != nil {
		t.Fatal(err)
	}
	alloc := &structs.Allocation{ID: "a1", Job: job, TaskGroup: "dashboard", AllocatedResources: &structs.AllocatedResources{
		Shared: structs.AllocatedSharedResources{Ports: []structs.PortMapping{
			{Label: "http", Value: 9002, To: 9002}, {Label: "connect-proxy-count-dashboard", Value: 21000, To: 21000},
		}},
	}}
	got, err := Registrations(Placement{Alloc: alloc, Address: "172.26.64.5", NodeID: "n1", Datacenter: "dc1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("got %d instances, want 2", len(got))
	}
	app, px := got[0], got[1]
	if app.ID != "_nomad-task-a1-group-dashboard-count-dashboard-http" || app.Port != 9002 || app.Address != "172.26.64.5" || !app.Connect {
		t.Errorf("app = %+v", app)
	}
	if px.ID != app.ID+"-sidecar-proxy" || px.Name != "count-dashboard-sidecar-proxy" || px.Kind != catalog.KindConnectProxy || px.Port != 21000 {
		t.Errorf("proxy = %+v", px)
	}
	wantProxy := &catalog.Proxy{DestinationServiceName: "count-dashboard", DestinationServiceID: app.ID,
		LocalServiceAddress: "127.0.0.1", LocalServicePort: 9002,
		Upstreams: []catalog.Upstream{{DestinationName: "count-api", LocalBindAddress: "127.0.0.1", LocalBindPort: 8080}}}
	if !reflect.DeepEqual(px.Proxy, wantProxy) {
		t.Errorf("proxy config = %+v, want %+v", px.Proxy, wantProxy)
	}
	// The sidecar inherits its service's meta and tags (subset filters
	// select proxy instances).
	if px.Meta["version"] != "v2" || len(px.Tags) != 1 || px.Tags[0] != "canary" {
		t.Errorf("proxy meta/tags = %v %v; want the service's", px.Meta, px.Tags)
	}
	alloc.AllocatedResources = nil
	if _, err := Registrations(Placement{Alloc: alloc}); !errors.Is(err, ErrInvalid) {
		t.Errorf("unassigned port label: err = %v, want ErrInvalid", err)
	}
}

func TestUpstreamEnv(t *testing.T) {
	got := UpstreamEnv(dashboardJob().TaskGroups[0])
	want := map[string]string{
		"NOMAD_UPSTREAM_ADDR_count_api": "127.0.0.1:8080",
		"NOMAD_UPSTREAM_IP_count_api":   "127.0.0.1",
		"NOMAD_UPSTREAM_PORT_count_api": "8080",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("UpstreamEnv = %v", got)
	}
}

func taskNames(tg *structs.TaskGroup) []string {
	var out []string
	for _, t := range tg.Tasks {
		out = append(out, t.Name)
	}
	return out
}

func TestResolveSidecarMode(t *testing.T) {
	tests := []struct {
		configured, envoy, want string
		err                     error
	}{
		{"auto", "/usr/bin/envoy", SidecarEnvoy, nil},
		{"", "", SidecarBuiltin, nil},
		{"builtin", "/usr/bin/envoy", SidecarBuiltin, nil},
		{"envoy", "/usr/bin/envoy", SidecarEnvoy, nil},
		{"envoy", "", "", ErrNoEnvoy},
		{"istio", "", "", ErrInvalid},
	}
	for _, tt := range tests {
		got, err := ResolveSidecarMode(tt.configured, tt.envoy)
		if got != tt.want || !errors.Is(err, tt.err) || (tt.err == nil) != (err == nil) {
			t.Errorf("ResolveSidecarMode(%q, %q) = %q, %v; want %q, %v", tt.configured, tt.envoy, got, err, tt.want, tt.err)
		}
	}
}

func TestInjectIdempotentWithRenamedSidecar(t *testing.T) {
	job := dashboardJob()
	job.TaskGroups[0].Services[0].Connect.SidecarTask = &structs.SidecarTask{Name: "proxy"}
	for i := 0; i < 2; i++ {
		if err := Inject(job); err != nil {
			t.Fatal(err)
		}
	}
	tg := job.TaskGroups[0]
	if len(tg.Tasks) != 2 || ProxyTask(tg, "count-dashboard") == nil || ProxyTask(tg, "count-dashboard").Name != "proxy" {
		t.Fatalf("tasks = %v", taskNames(tg))
	}
}

func TestRegistrationsIncludeTaskServices(t *testing.T) {
	job := &structs.Job{ID: "j", TaskGroups: []*structs.TaskGroup{{Name: "g",
		Tasks: []*structs.Task{{Name: "api", Services: []*structs.Service{{Name: "api", PortLabel: "http"}}}}}}}
	alloc := &structs.Allocation{ID: "a1", Job: job, TaskGroup: "g", AllocatedResources: &structs.AllocatedResources{
		Shared: structs.AllocatedSharedResources{Ports: []structs.PortMapping{{Label: "http", Value: 23456}}}}}
	got, err := Registrations(Placement{Alloc: alloc, Address: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].ID != "_nomad-task-a1-api-api-http" || got[0].Port != 23456 {
		t.Fatalf("task service registrations = %+v", got)
	}
}

// In a cluster, services with a host port mapping are registered at the
// node's address and the host port (Nomad's address_mode auto), so other
// nodes reach the sidecar through the node's port mapping; the proxy
// still forwards to the app inside the namespace.
func TestRegistrationsAtNodeAddress(t *testing.T) {
	job := dashboardJob()
	if err := Inject(job); err != nil {
		t.Fatal(err)
	}
	alloc := &structs.Allocation{ID: "a1", Job: job, TaskGroup: "dashboard", AllocatedResources: &structs.AllocatedResources{
		Shared: structs.AllocatedSharedResources{Ports: []structs.PortMapping{
			{Label: "http", Value: 25123, To: 9002}, {Label: "connect-proxy-count-dashboard", Value: 21000, To: 21000},
		}},
	}}
	got, err := Registrations(Placement{Alloc: alloc, Address: "172.26.64.5", NodeAddress: "10.0.0.7", NodeName: "c1", NodeID: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	app, px := got[0], got[1]
	if app.Address != "10.0.0.7" || app.Port != 25123 || app.NodeName != "c1" || app.NodeAddress != "10.0.0.7" {
		t.Errorf("app registered at %s:%d on %q, want 10.0.0.7:25123 on c1", app.Address, app.Port, app.NodeName)
	}
	if px.Address != "10.0.0.7" || px.Port != 21000 || px.NodeName != "c1" {
		t.Errorf("proxy registered at %s:%d on %q, want 10.0.0.7:21000 on c1", px.Address, px.Port, px.NodeName)
	}
	if px.Proxy.LocalServiceAddress != "127.0.0.1" || px.Proxy.LocalServicePort != 9002 {
		t.Errorf("proxy forwards to %s:%d, want the app inside the namespace at 127.0.0.1:9002", px.Proxy.LocalServiceAddress, px.Proxy.LocalServicePort)
	}
	// A port without a host mapping keeps the allocation's address.
	alloc.AllocatedResources.Shared.Ports[0].Value = 0
	got, err = Registrations(Placement{Alloc: alloc, Address: "172.26.64.5", NodeAddress: "10.0.0.7"})
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Address != "172.26.64.5" || got[0].Port != 9002 {
		t.Errorf("unmapped app port registered at %s:%d, want 172.26.64.5:9002", got[0].Address, got[0].Port)
	}
}

// sidecar_service { port = "..." } names the proxy's public port; Inject
// and Registrations both use it.
func TestSidecarPortOverride(t *testing.T) {
	job := dashboardJob()
	s := job.TaskGroups[0].Services[0]
	if got := SidecarPortLabel(s); got != "connect-proxy-count-dashboard" {
		t.Fatalf("default label %q", got)
	}
	s.Connect.SidecarService.Port = "mesh"
	if got := SidecarPortLabel(s); got != "mesh" {
		t.Fatalf("overridden label %q", got)
	}
	if err := Inject(job); err != nil {
		t.Fatal(err)
	}
	n := job.TaskGroups[0].Networks[0]
	if len(n.DynamicPorts) != 1 || n.DynamicPorts[0].Label != "mesh" {
		t.Fatalf("dynamic ports %+v, want the override's label", n.DynamicPorts)
	}
	alloc := &structs.Allocation{ID: "a1", Job: job, TaskGroup: "dashboard", AllocatedResources: &structs.AllocatedResources{
		Shared: structs.AllocatedSharedResources{Ports: []structs.PortMapping{
			{Label: "http", Value: 9002, To: 9002}, {Label: "mesh", Value: 23000, To: 23000}}},
	}}
	insts, err := Registrations(Placement{Alloc: alloc, Address: "10.0.0.2"})
	if err != nil {
		t.Fatal(err)
	}
	if len(insts) != 2 || insts[1].Kind != catalog.KindConnectProxy || insts[1].Port != 23000 {
		t.Fatalf("registrations %+v, want the proxy on the override's port", insts)
	}
}

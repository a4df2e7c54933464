package connect

import (
	"errors"
	"regexp"
	"slices"
	"testing"

	"github.com/meshlet/meshlet/structs"
)

func exposeJob() *structs.Job {
	return &structs.Job{ID: "api", Name: "api", TaskGroups: []*structs.TaskGroup{{
		Name: "api",
		Networks: []*structs.NetworkResource{{Mode: "bridge",
			DynamicPorts: []structs.Port{{Label: "http", To: 8080}, {Label: "metrics", To: -1}}}},
		Services: []*structs.Service{{
			Name: "api", PortLabel: "http",
			Checks: []structs.ServiceCheck{
				{Name: "health", Type: "http", Path: "/health?full=1", Expose: true},
				{Name: "rpc", Type: "grpc", Expose: true},
				{Name: "tcp", Type: "tcp", Expose: true},
				{Name: "not-exposed", Type: "http", Path: "/ready"},
			},
			Connect: &structs.ConsulConnect{SidecarService: &structs.ConsulSidecarService{
				Proxy: &structs.ConsulProxy{Expose: &structs.ConsulExposeConfig{Paths: []*structs.ConsulExposePath{
					{Path: "/metrics", Protocol: "http", LocalPathPort: 9102, ListenerPort: "metrics"}}}},
			}},
		}},
		Tasks: []*structs.Task{{Name: "api", Driver: "raw_exec"}},
	}}}
}

var exposeLabelRE = regexp.MustCompile(`^svc_api_ck_[0-9a-f]{6}$`)

// Inject turns each exposed http/grpc check into an expose path on a new
// dynamic port the check then targets; the user's own paths stay.
func TestInjectExposesChecks(t *testing.T) {
	job := exposeJob()
	if err := Inject(job); err != nil {
		t.Fatal(err)
	}
	s := job.TaskGroups[0].Services[0]
	httpLabel, grpcLabel := s.Checks[0].PortLabel, s.Checks[1].PortLabel
	if !exposeLabelRE.MatchString(httpLabel) || !exposeLabelRE.MatchString(grpcLabel) || httpLabel == grpcLabel {
		t.Fatalf("check port labels %q, %q; want two distinct svc_api_ck_<hash>", httpLabel, grpcLabel)
	}
	for _, c := range s.Checks[2:] {
		if c.PortLabel != "" {
			t.Errorf("check %q (tcp or unexposed) got port %q", c.Name, c.PortLabel)
		}
	}
	want := []structs.ConsulExposePath{
		{Path: "/metrics", Protocol: "http", LocalPathPort: 9102, ListenerPort: "metrics"},
		{Path: "/health", Protocol: "http", LocalPathPort: 8080, ListenerPort: httpLabel},
		{Path: GRPCHealthPath, Protocol: "http2", LocalPathPort: 8080, ListenerPort: grpcLabel},
	}
	if got := exposePaths(s); !slices.Equal(got, want) {
		t.Errorf("expose paths\n got %+v\nwant %+v", got, want)
	}
	ports := job.TaskGroups[0].Networks[0].DynamicPorts
	for _, l := range []string{httpLabel, grpcLabel} {
		if !slices.Contains(ports, structs.Port{Label: l, To: -1}) {
			t.Errorf("dynamic ports %+v lack %q (to = -1)", ports, l)
		}
	}

	// Registering again (an inspected job resubmitted) adds nothing, and
	// the same jobspec gets the same labels.
	before := len(ports)
	if err := Inject(job); err != nil {
		t.Fatal(err)
	}
	if got := exposePaths(s); len(got) != 3 || len(job.TaskGroups[0].Networks[0].DynamicPorts) != before {
		t.Errorf("second Inject changed the job: paths %+v, ports %+v", got, job.TaskGroups[0].Networks[0].DynamicPorts)
	}
	again := exposeJob()
	if err := Inject(again); err != nil {
		t.Fatal(err)
	}
	if l := again.TaskGroups[0].Services[0].Checks[0].PortLabel; l != httpLabel {
		t.Errorf("label not stable: %q then %q", httpLabel, l)
	}
}

// The registration resolves the expose listener to the port inside the
// namespace, which is also where the exposed check now goes.
func TestExposedCheckTargetsTheExposeListener(t *testing.T) {
	job := exposeJob()
	if err := Inject(job); err != nil {
		t.Fatal(err)
	}
	tg := job.TaskGroups[0]
	label := tg.Services[0].Checks[0].PortLabel
	alloc := &structs.Allocation{ID: "a1", Job: job, TaskGroup: "api", AllocatedResources: &structs.AllocatedResources{
		Shared: structs.AllocatedSharedResources{Ports: []structs.PortMapping{
			{Label: "http", Value: 25001, To: 8080}, {Label: "metrics", Value: 25002, To: -1},
			{Label: label, Value: 25003, To: -1}, {Label: tg.Services[0].Checks[1].PortLabel, Value: 25004, To: -1},
			{Label: "connect-proxy-api", Value: 25005, To: -1},
		}},
	}}
	insts, err := Registrations(Placement{Alloc: alloc, Address: "172.26.64.9"})
	if err != nil {
		t.Fatal(err)
	}
	px := insts[1].Proxy
	if len(px.Expose) != 3 || px.Expose[1].Path != "/health" || px.Expose[1].ListenerPort != 25003 || px.Expose[1].LocalPathPort != 8080 {
		t.Fatalf("proxy expose paths %+v, want /health on 25003 -> 8080", px.Expose)
	}
	if port, err := ServicePort(alloc, label, true); err != nil || port != 25003 {
		t.Errorf("the exposed check's port = %d, %v; want the expose listener's 25003", port, err)
	}
}

func TestExposeLocalPort(t *testing.T) {
	// local_service_port wins over the service port.
	job := exposeJob()
	s := job.TaskGroups[0].Services[0]
	s.Connect.SidecarService.Proxy.LocalServicePort = 7070
	if err := Inject(job); err != nil {
		t.Fatal(err)
	}
	if got := exposePaths(s)[1].LocalPathPort; got != 7070 {
		t.Errorf("local_path_port %d, want local_service_port 7070", got)
	}
	// A numeric service port is the port inside the namespace.
	job = exposeJob()
	job.TaskGroups[0].Services[0].PortLabel = "9001"
	if err := Inject(job); err != nil {
		t.Fatal(err)
	}
	if got := exposePaths(job.TaskGroups[0].Services[0])[1].LocalPathPort; got != 9001 {
		t.Errorf("local_path_port %d, want 9001", got)
	}
	// A dynamic port without `to` is unknown until allocated.
	job = exposeJob()
	job.TaskGroups[0].Networks[0].DynamicPorts[0].To = -1
	if err := Inject(job); !errors.Is(err, ErrInvalid) {
		t.Errorf("dynamic service port without to: err = %v, want ErrInvalid", err)
	}
}

// A check that names its own port keeps it: that port is the listener.
func TestExposedCheckWithItsOwnPort(t *testing.T) {
	job := exposeJob()
	s := job.TaskGroups[0].Services[0]
	s.Checks = s.Checks[:1]
	s.Checks[0].PortLabel = "metrics"
	s.Connect.SidecarService.Proxy = nil
	if err := Inject(job); err != nil {
		t.Fatal(err)
	}
	want := []structs.ConsulExposePath{{Path: "/health", Protocol: "http", LocalPathPort: 8080, ListenerPort: "metrics"}}
	if got := exposePaths(s); !slices.Equal(got, want) || s.Checks[0].PortLabel != "metrics" {
		t.Errorf("paths %+v (check port %q), want %+v", got, s.Checks[0].PortLabel, want)
	}
	if n := len(job.TaskGroups[0].Networks[0].DynamicPorts); n != 3 { // http, metrics, the sidecar's
		t.Errorf("%d dynamic ports, want no new one for the check", n)
	}
}

func exposePaths(s *structs.Service) []structs.ConsulExposePath {
	var out []structs.ConsulExposePath
	for _, p := range s.Connect.SidecarService.Proxy.Expose.Paths {
		out = append(out, *p)
	}
	return out
}

package connecthook

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/client/allocdir"
	"github.com/meshlet/meshlet/client/allocrunner"
	"github.com/meshlet/meshlet/client/checks"
	"github.com/meshlet/meshlet/connect"
	"github.com/meshlet/meshlet/internal/testutil"
	"github.com/meshlet/meshlet/jobspecs"
	"github.com/meshlet/meshlet/structs"
)

// lastRegistered keeps the last registration of each instance.
type lastRegistered struct {
	mu   sync.Mutex
	last map[string]catalog.ServiceInstance
}

func (l *lastRegistered) Register(inst catalog.ServiceInstance) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.last[inst.ID] = inst
}

func (l *lastRegistered) DeregisterAlloc(string) {}

func (l *lastRegistered) Deregister(id string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.last, id)
	return nil
}

func (l *lastRegistered) get(id string) catalog.ServiceInstance {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last[id]
}

// Results of different checks of one service arriving together: none is
// lost, and the last registration of the service and of its sidecar is
// the final health. Every check ends passing, so both end healthy.
func TestConcurrentResultsOfOneService(t *testing.T) {
	const checksN, flips = 16, 200
	defs := make([]checks.Definition, checksN)
	for i := range defs {
		defs[i] = checks.Definition{ID: fmt.Sprintf("service:web:%d", i+1), Name: fmt.Sprint("c", i), ServiceID: "web", Type: "tcp"}
	}
	reg := &lastRegistered{last: map[string]catalog.ServiceInstance{}}
	sc := &serviceChecks{reg: reg, own: initialChecks(defs), insts: map[string]catalog.ServiceInstance{
		"web":       {ID: "web", Name: "web"},
		"web-proxy": {ID: "web-proxy", Name: "web-sidecar-proxy", Proxy: &catalog.Proxy{DestinationServiceID: "web"}},
	}}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range checksN {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for k := range flips {
				st := checks.StatusCritical
				if k%2 == 1 {
					st = checks.StatusPassing // the last flip
				}
				sc.onResult(checks.Result{CheckID: defs[i].ID, ServiceID: "web", Status: st, Output: fmt.Sprint(k)})
			}
		}()
	}
	close(start)
	wg.Wait()
	web, proxy := reg.get("web"), reg.get("web-proxy")
	if len(web.Checks) != checksN {
		t.Fatalf("web registered with %d checks, want %d", len(web.Checks), checksN)
	}
	for _, c := range web.Checks {
		if c.Status != string(checks.StatusPassing) || c.Output != fmt.Sprint(flips-1) {
			t.Errorf("check %s registered %s (output %q), want its last result: passing (%d)", c.ID, c.Status, c.Output, flips-1)
		}
	}
	if !web.Healthy || !proxy.Healthy {
		t.Errorf("final health: web %v, proxy %v; want both healthy", web.Healthy, proxy.Healthy)
	}
}

func defsByID(defs []checks.Definition) map[string]checks.Definition {
	out := map[string]checks.Definition{}
	for _, d := range defs {
		out[d.Name] = d
	}
	return out
}

// Group service checks run in the service's task when it names one (as
// Nomad's do); check_restart of a service naming none restarts the
// allocation's main tasks (task ""). TLS server name and the warning
// threshold reach the runner.
func TestGroupCheckTasks(t *testing.T) {
	grace := time.Second
	cr := &structs.CheckRestart{Limit: 3, Grace: &grace}
	job := &structs.Job{ID: "j", Name: "j", TaskGroups: []*structs.TaskGroup{{
		Name:     "web",
		Networks: []*structs.NetworkResource{{Mode: "bridge"}},
		Services: []*structs.Service{
			{Name: "web", PortLabel: "8080", TaskName: "web", Checks: []structs.ServiceCheck{
				{Name: "script", Type: "script", Command: "/bin/true", Interval: time.Second, Timeout: time.Second},
				{Name: "grpc", Type: "grpc", CheckRestart: cr, Interval: time.Second, Timeout: time.Second,
					GRPCUseTLS: true, TLSServerName: "web.internal", FailuresBeforeWarning: 2, FailuresBeforeCritical: 4},
				{Name: "own-task", Type: "script", Command: "/bin/true", TaskName: "side", Interval: time.Second, Timeout: time.Second},
			}},
			{Name: "api", PortLabel: "9090", Checks: []structs.ServiceCheck{
				{Name: "http", Type: "http", Path: "/", CheckRestart: cr, Interval: time.Second, Timeout: time.Second},
			}},
		},
		Tasks: []*structs.Task{{Name: "web", Driver: "raw_exec"}, {Name: "side", Driver: "raw_exec"}},
	}}}
	alloc := &structs.Allocation{ID: "a1", Job: job, TaskGroup: "web"}
	defs, err := checkDefinitions(alloc)
	if err != nil {
		t.Fatal(err)
	}
	by := defsByID(defs)
	for name, task := range map[string]string{"script": "web", "grpc": "web", "own-task": "side", "http": ""} {
		if got := by[name].Task; got != task {
			t.Errorf("check %s: task %q, want %q", name, got, task)
		}
	}
	for _, d := range defs {
		if err := d.Validate(); err != nil {
			t.Errorf("check %s: %v", d.Name, err)
		}
	}
	if g := by["grpc"]; g.TLSServerName != "web.internal" || g.FailuresBeforeWarning != 2 || g.FailuresBeforeCritical != 4 ||
		g.CheckRestart == nil || g.CheckRestart.Limit != 3 || g.CheckRestart.Grace != grace {
		t.Errorf("grpc definition %+v", g)
	}
}

// The default sidecar check targets the sidecar's port, which
// sidecar_service { port = "..." } may rename.
func TestDefaultSidecarCheckPortOverride(t *testing.T) {
	job := &structs.Job{ID: "j", Name: "j", TaskGroups: []*structs.TaskGroup{{
		Name:     "web",
		Networks: []*structs.NetworkResource{{Mode: "bridge"}},
		Services: []*structs.Service{{Name: "web", PortLabel: "8080",
			Connect: &structs.ConsulConnect{SidecarService: &structs.ConsulSidecarService{Port: "mesh"}}}},
		Tasks: []*structs.Task{{Name: "web", Driver: "raw_exec"}},
	}}}
	if err := connect.Inject(job); err != nil {
		t.Fatal(err)
	}
	alloc := &structs.Allocation{ID: "a1", Job: job, TaskGroup: "web", AllocatedResources: &structs.AllocatedResources{
		Shared: structs.AllocatedSharedResources{Ports: []structs.PortMapping{{Label: "mesh", Value: 31500, To: 21500}}},
	}}
	defs, err := checkDefinitions(alloc)
	if err != nil {
		t.Fatal(err)
	}
	if len(defs) != 1 || defs[0].Type != checks.TypeTCP || defs[0].Port != 21500 {
		t.Fatalf("definitions %+v, want the sidecar check on port 21500 (inside the namespace)", defs)
	}
}

// closedPort returns a 127.0.0.1 port nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	return strconv.Itoa(port)
}

// After an agent restart, a restored allocation's instances are registered
// passing (they were serving a moment ago) unless initial_status says
// otherwise; the checks' results then decide.
func TestRestoredAllocationStartsPassing(t *testing.T) {
	port := closedPort(t)
	tcp := func(initial string) []structs.ServiceCheck {
		return []structs.ServiceCheck{{Name: "tcp", Type: "tcp", Interval: 30 * time.Millisecond, Timeout: time.Second,
			InitialStatus: initial, FailuresBeforeCritical: 2}}
	}
	job := &structs.Job{ID: "j", Name: "j", TaskGroups: []*structs.TaskGroup{{
		Name: "web",
		Services: []*structs.Service{
			{Name: "web", PortLabel: port, Checks: tcp("")},
			{Name: "strict", PortLabel: port, Checks: tcp("critical")},
		},
		Tasks: []*structs.Task{{Name: "web", Driver: "raw_exec"}},
	}}}
	for _, restored := range []bool{false, true} {
		t.Run(fmt.Sprint("restored=", restored), func(t *testing.T) {
			alloc := &structs.Allocation{ID: "a1", Job: job, TaskGroup: "web"}
			reg := &firstAndLast{first: map[string]catalog.ServiceInstance{}, lastRegistered: lastRegistered{last: map[string]catalog.ServiceInstance{}}}
			hc := &allocrunner.AllocHookContext{Alloc: alloc, AllocDir: allocdir.New(t.TempDir(), alloc.ID),
				Logger: hclog.NewNullLogger(), Restored: restored}
			h := &ServicesHook{d: Deps{Catalog: reg, NodeID: "n1", Datacenter: "dc1"}}
			if err := h.Prerun(context.Background(), hc); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = h.Postrun(context.Background(), hc) }()
			webID, strictID := connect.ServiceID("a1", "web", "web", port), connect.ServiceID("a1", "web", "strict", port)
			if got := reg.firstOf(webID); got.Healthy != restored {
				t.Errorf("web first registered healthy=%v, want %v (checks %+v)", got.Healthy, restored, got.Checks)
			}
			if got := reg.firstOf(strictID); got.Healthy {
				t.Errorf("initial_status critical registered healthy: %+v", got.Checks)
			}
			testutil.WaitFor(t, 10*time.Second, "the failing check to turn web critical", func() bool {
				return !reg.get(webID).Healthy && len(reg.get(webID).Checks) == 1 && reg.get(webID).Checks[0].Output != ""
			})
		})
	}
}

// firstAndLast also keeps the first registration of each instance.
type firstAndLast struct {
	lastRegistered
	first map[string]catalog.ServiceInstance
}

func (f *firstAndLast) Register(inst catalog.ServiceInstance) {
	f.mu.Lock()
	if _, ok := f.first[inst.ID]; !ok {
		f.first[inst.ID] = inst
	}
	f.mu.Unlock()
	f.lastRegistered.Register(inst)
}

func (f *firstAndLast) firstOf(id string) catalog.ServiceInstance {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.first[id]
}

// Every check of jobspecs/testdata/valid/checks.hcl can run: the group
// service's grpc check inherits check_restart without a task (it restarts
// the main tasks) and none is left critical by an invalid definition.
func TestChecksJobspecDefinitionsValid(t *testing.T) {
	job, diags := jobspecs.ParseFile("../../jobspecs/testdata/valid/checks.hcl", nil)
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	if err := connect.Inject(job); err != nil {
		t.Fatal(err)
	}
	alloc := &structs.Allocation{ID: "a1", Job: job, TaskGroup: "web", AllocatedResources: &structs.AllocatedResources{
		Shared: structs.AllocatedSharedResources{Ports: []structs.PortMapping{
			{Label: "http", Value: 31000, To: 8080}, {Label: "grpc", Value: 31001, To: 9090},
			{Label: "connect-proxy-web", Value: 31002, To: 31002}}},
	}}
	defs, err := checkDefinitions(alloc)
	if err != nil {
		t.Fatal(err)
	}
	by := defsByID(defs)
	for _, d := range defs {
		if err := d.Validate(); err != nil {
			t.Errorf("%s: %v", d.Name, err)
		}
	}
	if g := by["web-grpc"]; g.CheckRestart == nil || g.CheckRestart.Limit != 5 || g.Task != "" {
		t.Errorf("web-grpc %+v: want the service's check_restart, restarting the main tasks", g)
	}
	if h := by["web-http"]; h.TLSServerName != "web.internal" || h.FailuresBeforeWarning != 1 {
		t.Errorf("web-http %+v: want tls_server_name and failures_before_warning", h)
	}
}

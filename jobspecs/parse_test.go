package jobspecs

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/meshlet/meshlet/structs"
)

// wantCanonicalTask returns the defaults Canonicalize gives a service-job
// task with the given resources.
func wantCanonicalTask(name string, config map[string]any, cpu, mem int) *structs.Task {
	return &structs.Task{
		Name: name, Driver: "raw_exec", Config: config,
		Resources:     &structs.Resources{CPU: ptr(cpu), MemoryMB: ptr(mem)},
		RestartPolicy: serviceRestart(),
		KillTimeout:   ptr(5 * time.Second),
		LogConfig:     &structs.LogConfig{MaxFiles: ptr(10), MaxFileSizeMB: ptr(10), Disabled: ptr(false)},
	}
}

func serviceRestart() *structs.RestartPolicy {
	return &structs.RestartPolicy{Attempts: ptr(2), Interval: ptr(30 * time.Minute), Delay: ptr(15 * time.Second), Mode: ptr("fail")}
}

func serviceReschedule() *structs.ReschedulePolicy {
	r := DefaultReschedule(structs.JobTypeService)
	return &r
}

func TestParseCountdash(t *testing.T) {
	job, diags := ParseFile("countdash.hcl", nil)
	if len(diags) != 0 {
		t.Fatalf("diagnostics:\n%v", diags)
	}
	want := &structs.Job{
		Region: "global", Namespace: "default", ID: "countdash", Name: "countdash", Type: "service",
		Priority: 50, Datacenters: []string{"*"},
		TaskGroups: []*structs.TaskGroup{
			{
				Name: "api", Count: 1, RestartPolicy: serviceRestart(), ReschedulePolicy: serviceReschedule(),
				Networks: []*structs.NetworkResource{{Mode: "bridge"}},
				Services: []*structs.Service{{
					Name: "count-api", PortLabel: "9001", AddressMode: "auto",
					Connect: &structs.ConsulConnect{SidecarService: &structs.ConsulSidecarService{
						Proxy: &structs.ConsulProxy{LocalServiceAddress: "127.0.0.1"},
					}},
				}},
				Tasks: []*structs.Task{wantCanonicalTask("web", map[string]any{
					"command": "${attr.meshlet.binary}",
					"args":    []any{"demo-app", "counting", "-listen", "127.0.0.1:9001"},
				}, 100, 64)},
			},
			{
				Name: "dashboard", Count: 1, RestartPolicy: serviceRestart(), ReschedulePolicy: serviceReschedule(),
				Networks: []*structs.NetworkResource{{
					Mode:          "bridge",
					ReservedPorts: []structs.Port{{Label: "http", Value: 9002, To: 9002}},
				}},
				Services: []*structs.Service{{
					Name: "count-dashboard", PortLabel: "http", AddressMode: "auto",
					Connect: &structs.ConsulConnect{SidecarService: &structs.ConsulSidecarService{
						Proxy: &structs.ConsulProxy{
							LocalServiceAddress: "127.0.0.1",
							Upstreams:           []*structs.ConsulUpstream{{DestinationName: "count-api", LocalBindPort: 8080}},
						},
					}},
				}},
				Tasks: []*structs.Task{wantCanonicalTask("dashboard", map[string]any{
					"command": "${attr.meshlet.binary}",
					"args": []any{"demo-app", "dashboard", "-listen", "0.0.0.0:${NOMAD_PORT_http}",
						"-counting-url", "http://${NOMAD_UPSTREAM_ADDR_count_api}"},
				}, 100, 64)},
			},
		},
	}
	assertJSONEqual(t, job, want)
	if !reflect.DeepEqual(job, want) {
		t.Error("jobs differ in a way JSON does not show (types of config values?)")
	}
}

func assertJSONEqual(t *testing.T, got, want any) {
	t.Helper()
	g, _ := json.MarshalIndent(got, "", "  ")
	w, _ := json.MarshalIndent(want, "", "  ")
	if string(g) != string(w) {
		t.Errorf("mismatch:\n--- got\n%s\n--- want\n%s", g, w)
	}
}

func TestParseHello(t *testing.T) {
	for _, tc := range []struct{ file, driver string }{{"hello.hcl", "raw_exec"}, {"hello-exec.hcl", "exec"}} {
		t.Run(tc.file, func(t *testing.T) {
			job, diags := ParseFile(tc.file, nil)
			if len(diags) != 0 {
				t.Fatalf("diagnostics:\n%v", diags)
			}
			task := job.TaskGroups[0].Tasks[0]
			if task.Driver != tc.driver {
				t.Errorf("driver = %q, want %q", task.Driver, tc.driver)
			}
			wantArgs := []any{"-c", `while true; do echo "hello from $NOMAD_ALLOC_ID"; sleep 2; done`}
			if !reflect.DeepEqual(task.Config["args"], wantArgs) || task.Config["command"] != "/bin/sh" {
				t.Errorf("config = %#v", task.Config)
			}
		})
	}
}

func TestParseBatchDefaults(t *testing.T) {
	job, diags := Parse("b.hcl", []byte(`job "b" {
  type = "batch"
  update { max_parallel = 2 }
  group "g" {
    restart { attempts = 7 }
    task "t" {
      driver = "exec"
      restart { delay = "1m" }
      resources { cores = 2 }
      config { command = "x" }
    }
  }
}`), nil)
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	tg := job.TaskGroups[0]
	wantGroup := &structs.RestartPolicy{Attempts: ptr(7), Interval: ptr(24 * time.Hour), Delay: ptr(15 * time.Second), Mode: ptr("fail")}
	assertJSONEqual(t, tg.RestartPolicy, wantGroup)
	wantTask := &structs.RestartPolicy{Attempts: ptr(7), Interval: ptr(24 * time.Hour), Delay: ptr(time.Minute), Mode: ptr("fail")}
	assertJSONEqual(t, tg.Tasks[0].RestartPolicy, wantTask)
	assertJSONEqual(t, tg.Update, &structs.UpdateStrategy{MaxParallel: ptr(2)})
	assertJSONEqual(t, tg.Tasks[0].Resources, &structs.Resources{Cores: ptr(2), MemoryMB: ptr(300)})
	if tg.Update == job.Update || tg.Update.MaxParallel == job.Update.MaxParallel {
		t.Error("group update aliases the job's")
	}
}

// Sysbatch jobs run to completion, like batch jobs: Nomad gives them the
// batch restart defaults (3 attempts in 24h), not the service ones.
func TestParseSysbatchRestartDefaults(t *testing.T) {
	job, diags := Parse("s.hcl", []byte(`job "s" {
  type = "sysbatch"
  group "g" {
    task "t" {
      driver = "exec"
      config { command = "x" }
    }
  }
}`), nil)
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	want := &structs.RestartPolicy{Attempts: ptr(3), Interval: ptr(24 * time.Hour), Delay: ptr(15 * time.Second), Mode: ptr("fail")}
	assertJSONEqual(t, job.TaskGroups[0].RestartPolicy, want)
	assertJSONEqual(t, job.TaskGroups[0].Tasks[0].RestartPolicy, want)
}

func TestCanonicalizeIdempotent(t *testing.T) {
	for _, file := range hclFiles(t) {
		job, diags := ParseFile(file, nil)
		if job == nil {
			if !diags.HasErrors() {
				t.Errorf("%s: nil job without errors", file)
			}
			continue
		}
		before, _ := json.Marshal(job)
		Canonicalize(job)
		after, _ := json.Marshal(job)
		if string(before) != string(after) {
			t.Errorf("%s: second Canonicalize changed the job:\n%s\n%s", file, before, after)
		}
	}
	Canonicalize(nil) // must not panic
	job := &structs.Job{Name: "x", TaskGroups: []*structs.TaskGroup{nil, {Name: "g", Tasks: []*structs.Task{nil}}}}
	Canonicalize(job)
	if job.ID != "x" || job.TaskGroups[1].Count != 0 { // an explicit 0 is kept
		t.Errorf("canonicalized = %+v", job)
	}
}

func TestParseStructuralErrors(t *testing.T) {
	tests := []struct {
		name, src string
		wantJob   bool
		want      []string
	}{
		{"no job", `variable "x" { default = 1 }`, false,
			[]string{"t.hcl: error: Missing job block; A jobspec must contain one job \"name\" { ... } block."}},
		{"two jobs", "job \"a\" {\n group \"g\" {\n task \"t\" {\n driver = \"exec\"\n config { command = \"x\" }\n}\n}\n}\njob \"b\" {}\n", true,
			[]string{"t.hcl:9:1: error: Duplicate job block; Only one job block is allowed here; another was defined at line 1."}},
		{"job without label", "job {\n}\n", false,
			[]string{"t.hcl:1:5: error: Missing name for job; All job blocks must have 1 label(s): name."}},
		{"group with two labels", "job \"a\" {\n  group \"g\" \"h\" {}\n}\n", true, []string{
			"t.hcl:1:1: error: Missing group; A job needs at least one group \"name\" { ... } block.",
			"t.hcl:2:13: error: Extraneous label for group; group blocks take only 1 label(s): name.",
		}},
		{"network with label", "job \"a\" {\n  group \"g\" {\n    network \"x\" {}\n    task \"t\" {\n driver = \"exec\"\n config { command = \"x\" }\n}\n  }\n}\n", true,
			[]string{"t.hcl:3:13: error: Extraneous label for network; network blocks take no labels."}},
		{"block given as argument", "job \"a\" {\n  group = {}\n}\n", true, []string{
			"t.hcl:1:1: error: Missing group; A job needs at least one group \"name\" { ... } block.",
			"t.hcl:2:3: error: Unsupported argument; An argument named \"group\" is not expected here. Did you mean to define a block of type \"group\"?",
		}},
		{"argument given as block", "job \"a\" {\n  type {}\n  group \"g\" {\n    task \"t\" {\n driver = \"exec\"\n config { command = \"x\" }\n}\n  }\n}\n", true,
			[]string{"t.hcl:2:3: error: Unsupported block type; Blocks of type \"type\" are not expected here. Did you mean to define argument \"type\"? If so, use the equals sign to assign it a value."}},
		{"duplicate resources", "job \"a\" {\n  group \"g\" {\n    task \"t\" {\n      driver = \"exec\"\n      resources {}\n      resources {}\n      config { command = \"x\" }\n    }\n  }\n}\n", true,
			[]string{"t.hcl:6:7: error: Duplicate resources block; Only one resources block is allowed here; another was defined at line 5."}},
		{"env block and argument", "job \"a\" {\n  group \"g\" {\n    task \"t\" {\n      driver = \"exec\"\n      env = {}\n      env {}\n      config { command = \"x\" }\n    }\n  }\n}\n", true,
			[]string{"t.hcl:6:7: error: Duplicate env; env is already defined as an argument at line 5; use either the block or the argument."}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			job, diags := Parse("t.hcl", []byte(tc.src), nil)
			if (job != nil) != tc.wantJob {
				t.Errorf("job = %v, want job: %v", job, tc.wantJob)
			}
			assertDiags(t, diags, tc.want)
		})
	}
}

func assertDiags(t *testing.T, diags Diagnostics, want []string) {
	t.Helper()
	var got []string
	for _, d := range diags {
		got = append(got, d.String())
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("diagnostics:\n got %q\nwant %q", got, want)
	}
}

func TestParseFileMissing(t *testing.T) {
	job, diags := ParseFile("testdata/does-not-exist.hcl", nil)
	if job != nil || !diags.HasErrors() || diags[0].Summary != "Failed to read jobspec" {
		t.Fatalf("job=%v diags=%v", job, diags)
	}
}

func TestParseSidecarOverrides(t *testing.T) {
	job, diags := ParseFile("testdata/valid/sidecar-overrides.hcl", nil)
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	tg := job.TaskGroups[0]
	svc := tg.Services[0]
	wantTask := &structs.SidecarTask{
		Name: "billing-proxy", Driver: "raw_exec", User: "nobody",
		Config: map[string]any{
			"command": "/usr/local/bin/envoy",
			"args":    []any{"-c", "${NOMAD_SECRETS_DIR}/envoy_bootstrap.json", "-l", "debug", "--concurrency", "2"},
		},
		Env:           map[string]string{"ENVOY_LOG.format": "json"},
		Resources:     &structs.Resources{CPU: ptr(500), MemoryMB: ptr(256)},
		LogConfig:     &structs.LogConfig{MaxFiles: ptr(5), MaxFileSizeMB: ptr(20)},
		ShutdownDelay: ptr(10 * time.Second), KillTimeout: ptr(15 * time.Second), KillSignal: "SIGINT",
	}
	if !reflect.DeepEqual(svc.Connect.SidecarTask, wantTask) {
		assertJSONEqual(t, svc.Connect.SidecarTask, wantTask)
		t.Error("sidecar task differs")
	}
	cfg := svc.Connect.SidecarService.Proxy.Config
	wantListener := "{\n  \"@type\": \"type.googleapis.com/envoy.config.listener.v3.Listener\",\n  \"name\": \"public_listener\",\n" +
		"  \"address\": {\"socket_address\": {\"address\": \"0.0.0.0\", \"port_value\": 21000}}\n}\n"
	wantClusters := "{\n  \"name\": \"zipkin\",\n  \"type\": \"STRICT_DNS\",\n  \"connect_timeout\": \"5s\"\n}\n"
	if cfg["envoy_public_listener_json"] != wantListener || cfg["envoy_extra_static_clusters_json"] != wantClusters {
		t.Errorf("heredocs not preserved: %q", cfg)
	}
	grace := 30 * time.Second
	wantChecks := []structs.ServiceCheck{
		{Name: "billing-health", Type: "http", Path: "/health", Expose: true, Interval: 10 * time.Second,
			Timeout: 2 * time.Second, CheckRestart: &structs.CheckRestart{Limit: 3, Grace: &grace}},
		{Type: "grpc", PortLabel: "health", Expose: true, Interval: 15 * time.Second, Timeout: 3 * time.Second},
	}
	assertJSONEqual(t, svc.Checks, wantChecks)
	wantExpose := &structs.ConsulExposeConfig{Paths: []*structs.ConsulExposePath{
		{Path: "/metrics", Protocol: "http", LocalPathPort: 9102, ListenerPort: "metrics"}}}
	assertJSONEqual(t, svc.Connect.SidecarService.Proxy.Expose, wantExpose)
	if !svc.Connect.SidecarService.DisableDefaultTCPCheck || tg.Count != 2 {
		t.Errorf("disable_default_tcp_check / count not decoded: %+v count=%d", svc.Connect.SidecarService, tg.Count)
	}
}

func TestParseMultiUpstream(t *testing.T) {
	job, diags := ParseFile("testdata/valid/multi-upstream.hcl", &ParseOptions{Vars: map[string]string{"replicas": "5"}})
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	tg := job.TaskGroups[0]
	proxy := tg.Services[0].Connect.SidecarService.Proxy
	wantUpstreams := []*structs.ConsulUpstream{
		{DestinationName: "catalog-api", LocalBindPort: 9001},
		{DestinationName: "cart", LocalBindPort: 9002, LocalBindAddress: "127.0.0.2", Datacenter: "dc2",
			MeshGateway: &structs.ConsulMeshGateway{Mode: "local"},
			Config: map[string]any{"connect_timeout_ms": 2500, "protocol": "http",
				"limits": map[string]any{"max_connections": 100}}},
		{DestinationName: "payments-v2", LocalBindPort: 9003},
	}
	if !reflect.DeepEqual(proxy.Upstreams, wantUpstreams) {
		assertJSONEqual(t, proxy.Upstreams, wantUpstreams)
		t.Error("upstreams differ")
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"count from -var", tg.Count, 5},
		{"priority", job.Priority, 70},
		{"datacenters", job.Datacenters, []string{"dc1"}},
		{"meta", job.Meta, map[string]string{"owner": "team-web", "cost.center": "4711"}},
		{"tags", tg.Services[0].Tags, []string{"web", "v1.4.2"}},
		{"local_service_port", proxy.LocalServicePort, 8080},
		{"proxy config", proxy.Config, map[string]any{"protocol": "http", "local_connect_timeout_ms": 1000, "bind_address": "0.0.0.0"}},
		{"ports", tg.Networks[0].ReservedPorts, []structs.Port{{Label: "http", Value: 8088, To: 8080}}},
		{"dynamic", tg.Networks[0].DynamicPorts, []structs.Port{{Label: "metrics", To: -1}}},
		{"env", tg.Tasks[0].Env, map[string]string{"IMAGE_TAG": "1.4.2", "REPLICAS": "5", "NODE_IP": "${attr.unique.network.ip-address}"}},
		{"cpu", *tg.Tasks[0].Resources.CPU, 250},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %#v, want %#v", c.name, c.got, c.want)
		}
	}
}

package taskenv

import (
	"reflect"
	"testing"

	"github.com/meshlet/meshlet/structs"
)

func intp(i int) *int { return &i }

func fixture(mode string) (*structs.Node, *structs.Allocation, *structs.Task) {
	node := &structs.Node{ID: "node-uuid", Name: "box", Datacenter: "dc1",
		Attributes: map[string]string{"kernel.name": "linux", "meshlet.binary": "/usr/bin/meshlet"},
		Meta:       map[string]string{"rack": "r1"}}
	task := &structs.Task{Name: "web", Driver: "raw_exec",
		Resources: &structs.Resources{CPU: intp(500), MemoryMB: intp(256)},
		Meta:      map[string]string{"owner": "task"},
		Env:       map[string]string{"LISTEN": "127.0.0.1:${NOMAD_PORT_http}", "BIN": "${attr.meshlet.binary}"}}
	job := &structs.Job{ID: "countdash", Name: "countdash", Region: "global", Namespace: "default",
		Meta: map[string]string{"owner": "job", "team": "mesh"},
		TaskGroups: []*structs.TaskGroup{{Name: "dashboard", Meta: map[string]string{"tier": "front"},
			Networks: []*structs.NetworkResource{{Mode: mode}}, Tasks: []*structs.Task{task}}}}
	alloc := &structs.Allocation{ID: "0123456789abcdef", Name: "countdash.dashboard[2]", TaskGroup: "dashboard", Job: job,
		AllocatedResources: &structs.AllocatedResources{Shared: structs.AllocatedSharedResources{
			Networks: []*structs.NetworkResource{{Mode: mode}},
			Ports: []structs.PortMapping{
				{Label: "http", Value: 9002, To: 8080, HostIP: "127.0.0.1"},
				{Label: "connect-proxy-web", Value: 21000, To: 21000, HostIP: "127.0.0.1"},
			}}}}
	return node, alloc, task
}

func TestBuildEnv(t *testing.T) {
	tests := []struct {
		name string
		mode string
		net  *structs.AllocNetworkStatus
		want map[string]string
	}{
		{name: "host mode", mode: "host", want: map[string]string{
			"NOMAD_PORT_http": "9002", "NOMAD_IP_http": "127.0.0.1", "NOMAD_ADDR_http": "127.0.0.1:9002",
			"NOMAD_HOST_PORT_http": "9002", "NOMAD_ALLOC_PORT_http": "8080", "NOMAD_ALLOC_IP_http": "127.0.0.1",
			"NOMAD_PORT_connect_proxy_web": "21000", "LISTEN": "127.0.0.1:9002",
		}},
		{name: "bridge mode", mode: "bridge", net: &structs.AllocNetworkStatus{InterfaceName: "eth0", Address: "172.26.64.5"},
			want: map[string]string{
				"NOMAD_PORT_http": "8080", "NOMAD_ADDR_http": "127.0.0.1:9002", "NOMAD_HOST_PORT_http": "9002",
				"NOMAD_ALLOC_PORT_http": "8080", "NOMAD_ALLOC_IP_http": "172.26.64.5", "NOMAD_ALLOC_ADDR_http": "172.26.64.5:8080",
				"LISTEN": "127.0.0.1:8080",
			}},
	}
	common := map[string]string{
		"NOMAD_ALLOC_ID": "0123456789abcdef", "NOMAD_SHORT_ALLOC_ID": "01234567", "NOMAD_ALLOC_NAME": "countdash.dashboard[2]",
		"NOMAD_ALLOC_INDEX": "2", "NOMAD_GROUP_NAME": "dashboard", "NOMAD_TASK_NAME": "web", "NOMAD_JOB_ID": "countdash",
		"NOMAD_JOB_NAME": "countdash", "NOMAD_NAMESPACE": "default", "NOMAD_DC": "dc1", "NOMAD_REGION": "global",
		"NOMAD_CPU_LIMIT": "500", "NOMAD_MEMORY_LIMIT": "256", "NOMAD_ALLOC_DIR": "/d/alloc", "NOMAD_TASK_DIR": "/d/web/local",
		"NOMAD_SECRETS_DIR": "/d/web/secrets", "NOMAD_META_owner": "task", "NOMAD_META_OWNER": "task", "NOMAD_META_team": "mesh",
		"NOMAD_META_tier": "front", "BIN": "/usr/bin/meshlet", "UPSTREAM": "x", "PATH": DefaultPath,
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			node, alloc, task := fixture(tc.mode)
			env := NewBuilder(node, alloc, task).SetDirs("/d/alloc", "/d/web/local", "/d/web/secrets").
				SetNetworkStatus(tc.net).SetExtra(map[string]string{"UPSTREAM": "x"}).Build().Map()
			for _, want := range []map[string]string{common, tc.want} {
				for k, v := range want {
					if env[k] != v {
						t.Errorf("%s = %q, want %q", k, env[k], v)
					}
				}
			}
		})
	}
}

func TestInterpolation(t *testing.T) {
	node, alloc, task := fixture("host")
	env := NewBuilder(node, alloc, task).Build()
	tests := []struct {
		in   any
		want any
	}{
		{"${NOMAD_PORT_http}", "9002"},
		{"${attr.kernel.name}-${meta.rack}", "linux-r1"},
		{"${node.unique.id} ${node.unique.name} ${node.datacenter} ${node.region}", "node-uuid box dc1 global"},
		{"${NOMAD_UPSTREAM_ADDR_api}", "${NOMAD_UPSTREAM_ADDR_api}"}, // unknown: kept
		{"${attr.nope}", "${attr.nope}"},
		{"unterminated ${NOMAD_PORT_http", "unterminated ${NOMAD_PORT_http"},
		{"${ NOMAD_PORT_http }", "9002"},
		{"no refs", "no refs"},
		{42, 42},
		{[]any{"-listen", "127.0.0.1:${NOMAD_PORT_http}", 3}, []any{"-listen", "127.0.0.1:9002", 3}},
		{map[string]any{"args": []any{map[string]any{"x": "${NOMAD_ALLOC_INDEX}"}}, "n": true},
			map[string]any{"args": []any{map[string]any{"x": "2"}}, "n": true}},
		{[]string{"${NOMAD_JOB_ID}"}, []string{"countdash"}},
	}
	for _, tc := range tests {
		if got := env.ReplaceAll(tc.in); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ReplaceAll(%#v) = %#v, want %#v", tc.in, got, tc.want)
		}
	}
	cfg := map[string]any{"command": "${attr.meshlet.binary}", "args": []any{"${NOMAD_PORT_http}"}}
	out := env.ParseConfig(cfg)
	if out["command"] != "/usr/bin/meshlet" || cfg["command"] != "${attr.meshlet.binary}" {
		t.Fatalf("ParseConfig = %v, input modified: %v", out, cfg)
	}
	if env.ParseConfig(nil) != nil {
		t.Fatal("nil config")
	}
}

func TestCleanKeyAndMode(t *testing.T) {
	if got := CleanKey("count-api.v1"); got != "count_api_v1" {
		t.Errorf("CleanKey = %q", got)
	}
	_, alloc, _ := fixture("bridge")
	if Mode(alloc) != "bridge" {
		t.Errorf("Mode = %q", Mode(alloc))
	}
	if Mode(&structs.Allocation{}) != "host" {
		t.Error("default mode is not host")
	}
}

package connect

import (
	"errors"
	"reflect"
	"testing"

	"github.com/meshlet/meshlet/structs"
)

// The sidecar's driver, in order: the sidecar_task's, else the options',
// else connect_proxy.
func TestInjectWithSidecarDriver(t *testing.T) {
	envoyArgs := []any{"-c", "/secrets/envoy_bootstrap.json", "-l", "info", "--concurrency", "1", "--disable-hot-restart"}
	tests := []struct {
		name       string
		opts       Options
		override   *structs.SidecarTask
		wantDriver string
		wantConfig map[string]any // nil: not checked
	}{
		{"default", Options{}, nil, ProxyDriver, nil},
		{"docker, default image", Options{SidecarDriver: "docker"}, nil, "docker",
			map[string]any{"image": DefaultSidecarImage, "args": envoyArgs}},
		{"docker, configured image", Options{SidecarDriver: "docker", SidecarImage: "local/envoy:test"}, nil, "docker",
			map[string]any{"image": "local/envoy:test", "args": envoyArgs}},
		{"docker, sidecar_task config merged", Options{SidecarDriver: "docker"},
			&structs.SidecarTask{Config: map[string]any{"image": "mine/envoy:1"}}, "docker",
			map[string]any{"image": "mine/envoy:1", "args": envoyArgs}},
		{"sidecar_task connect_proxy wins", Options{SidecarDriver: "docker"},
			&structs.SidecarTask{Driver: ProxyDriver}, ProxyDriver, nil},
		{"sidecar_task docker with connect_proxy default", Options{},
			&structs.SidecarTask{Driver: "docker", Config: map[string]any{"image": "x/envoy:2"}}, "docker",
			map[string]any{"image": "x/envoy:2", "args": envoyArgs}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			job := dashboardJob()
			job.TaskGroups[0].Services[0].Connect.SidecarTask = tc.override
			if err := InjectWith(job, tc.opts); err != nil {
				t.Fatal(err)
			}
			px := job.TaskGroups[0].Tasks[0]
			if px.Driver != tc.wantDriver {
				t.Fatalf("driver %q, want %q", px.Driver, tc.wantDriver)
			}
			if px.Driver == ProxyDriver && px.Config["proxy_id"] == nil {
				t.Errorf("connect_proxy sidecar lost its config: %v", px.Config)
			}
			if tc.wantConfig != nil && !reflect.DeepEqual(px.Config, tc.wantConfig) {
				t.Errorf("config %#v\nwant %#v", px.Config, tc.wantConfig)
			}
			if IsDockerSidecar(px) != (tc.wantDriver == "docker") {
				t.Errorf("IsDockerSidecar = %v", IsDockerSidecar(px))
			}
			if uid, ok := px.Env[EnvoyUIDEnv]; (tc.wantDriver == "docker") != (ok && uid == "0") {
				t.Errorf("env %v: ENVOY_UID=0 wanted on docker sidecars only", px.Env)
			}
		})
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, d := range []string{"", "connect_proxy", "docker"} {
		if err := (Options{SidecarDriver: d}).Validate(); err != nil {
			t.Errorf("%q: %v", d, err)
		}
	}
	if err := (Options{SidecarDriver: "podman"}).Validate(); !errors.Is(err, ErrInvalid) {
		t.Errorf("podman: %v, want ErrInvalid", err)
	}
}

func TestMutatorUsesOptions(t *testing.T) {
	job := dashboardJob()
	if _, err := (Mutator{Options: Options{SidecarDriver: "docker"}}).Mutate(job); err != nil {
		t.Fatal(err)
	}
	if d := job.TaskGroups[0].Tasks[0].Driver; d != "docker" {
		t.Errorf("driver %q, want docker", d)
	}
}

func TestDockerSidecarEnvoyUIDOverride(t *testing.T) {
	job := dashboardJob()
	job.TaskGroups[0].Services[0].Connect.SidecarTask = &structs.SidecarTask{Env: map[string]string{EnvoyUIDEnv: "101", "X": "y"}}
	if err := InjectWith(job, Options{SidecarDriver: "docker"}); err != nil {
		t.Fatal(err)
	}
	if env := job.TaskGroups[0].Tasks[0].Env; env[EnvoyUIDEnv] != "101" || env["X"] != "y" {
		t.Errorf("env %v: the sidecar_task's env should win", env)
	}
}

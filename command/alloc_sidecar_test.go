package command

import (
	"testing"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/meshlet/meshlet/driver/connectproxy"
	"github.com/meshlet/meshlet/structs"
)

func TestSidecarProxy(t *testing.T) {
	const builtin = "built-in (meshlet connect proxy)"
	docker := &nomadapi.Task{Driver: "docker", Config: map[string]any{"image": "envoyproxy/envoy:v1.34.1"}}
	if got := sidecarProxy(docker, nil, builtin); got != "Envoy container (envoyproxy/envoy:v1.34.1)" {
		t.Errorf("docker sidecar: %q", got)
	}
	proxy := &nomadapi.Task{Driver: "connect_proxy"}
	if got := sidecarProxy(proxy, nil, builtin); got != builtin {
		t.Errorf("connect_proxy sidecar: %q", got)
	}
	// The runtime the node's connect_proxy driver chose (its latest
	// Driver event) wins over the node's mode.
	ts := &nomadapi.TaskState{Events: []*nomadapi.TaskEvent{
		{Type: structs.TaskDriverMessage, Details: map[string]string{connectproxy.DetailProxy: "Envoy (/usr/bin/envoy)"}},
		{Type: structs.TaskStarted},
		{Type: structs.TaskDriverMessage, Details: map[string]string{connectproxy.DetailProxy: "Envoy container (img:1)"}},
		{Type: structs.TaskTerminated},
	}}
	if got := sidecarProxy(proxy, ts, builtin); got != "Envoy container (img:1)" {
		t.Errorf("connect_proxy sidecar with a runtime event: %q", got)
	}
}

package command

import (
	"testing"

	nomadapi "github.com/hashicorp/nomad/api"
)

func TestSidecarProxy(t *testing.T) {
	docker := &nomadapi.Task{Driver: "docker", Config: map[string]any{"image": "envoyproxy/envoy:v1.34.1"}}
	if got := sidecarProxy(docker, "built-in (meshlet connect proxy)"); got != "Envoy container (envoyproxy/envoy:v1.34.1)" {
		t.Errorf("docker sidecar: %q", got)
	}
	proxy := &nomadapi.Task{Driver: "connect_proxy"}
	if got := sidecarProxy(proxy, "built-in (meshlet connect proxy)"); got != "built-in (meshlet connect proxy)" {
		t.Errorf("connect_proxy sidecar: %q", got)
	}
}

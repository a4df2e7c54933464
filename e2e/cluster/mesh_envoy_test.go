package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	"google.golang.org/protobuf/encoding/protojson"

	// Types packed in the bootstrap's Any fields.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"

	"github.com/meshlet/meshlet/internal/envoyvalidate"
)

// TestEnvoySidecarOnClientNode: no Envoy binary can be installed here, so
// a stand-in records the bootstrap the sidecar task of a client node (not
// the server) hands it; the bootstrap passes Envoy's own validation and
// points at that node's agent: the allocation's control plane socket in
// the client's data dir, served by the client agent.
func TestEnvoySidecarOnClientNode(t *testing.T) {
	c := newCluster(t)
	s1 := c.AddServer("s1", 2, 1)
	// The stand-in runs as the proxy user: it lives where any user may run
	// it and records where any user may write.
	dir := t.TempDir()
	for d, mode := range map[string]os.FileMode{filepath.Dir(dir): 0o755, dir: 0o777} {
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
	}
	record := filepath.Join(dir, "record")
	bin := filepath.Join(dir, "envoy")
	script := fmt.Sprintf("#!/bin/sh\npwd > %[1]s.cwd\ncp \"$2\" %[1]s.json.tmp && mv %[1]s.json.tmp %[1]s.json\nexec sleep 600\n", record)
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	c1 := c.add("c1", 5, false, fmt.Sprintf(`ports {
  http = %d
}
server {
  enabled = false
}
client {
  enabled  = true
  servers  = %s
  cni_path = %q
}
plugin "raw_exec" {
  config {
    enabled = true
  }
}
sidecar      = "envoy"
envoy_binary = %q
`, httpPort, hclList(rpcAddrs([]*agent{s1})), c.cniPath, bin))
	c.WaitNodesReady(60*time.Second, s1, c1)

	c.RunJobCLI(s1, "envoy-db", `job "envoy-db" {
  datacenters = ["dc1"]
  group "db" {
    network {
      mode = "bridge"
    }
    service {
      name = "db"
      port = "9090"
      connect {
        sidecar_service {}
      }
    }
    task "db" {
      driver = "raw_exec"
      config {
        command = "${attr.meshlet.binary}"
        args    = ["demo-app", "echo", "-listen", "127.0.0.1:9090"]
      }
      resources {
        cpu    = 20
        memory = 32
      }
    }
  }
}
`)
	allocs, _ := c.WaitRunning(s1, "envoy-db", 1, 60*time.Second)
	var js []byte
	poll(t, 30*time.Second, "the client node's sidecar task to start envoy", func() (bool, string) {
		var err error
		js, err = os.ReadFile(record + ".json")
		return err == nil, fmt.Sprint(err)
	})
	b := &bootstrapv3.Bootstrap{}
	if err := protojson.Unmarshal(js, b); err != nil {
		t.Fatalf("bootstrap does not parse as envoy.config.bootstrap.v3.Bootstrap: %v", err)
	}
	if err := envoyvalidate.All(b); err != nil {
		t.Fatalf("bootstrap fails Envoy's validation: %v", err)
	}
	wantID := fmt.Sprintf("_nomad-task-%s-group-db-db-9090-sidecar-proxy", allocs[0].ID)
	if b.Node.Id != wantID {
		t.Errorf("node = %s, want %s", b.Node.Id, wantID)
	}
	// Envoy runs in the socket's directory, the socket relative to it.
	cwd, err := os.ReadFile(record + ".cwd")
	if err != nil {
		t.Fatal(err)
	}
	pipe := filepath.Join(strings.TrimSpace(string(cwd)),
		b.StaticResources.Clusters[0].LoadAssignment.Endpoints[0].LbEndpoints[0].GetEndpoint().Address.GetPipe().GetPath())
	if !strings.HasPrefix(pipe, c1.DataDir+string(os.PathSeparator)) {
		t.Errorf("xDS socket %q is not in the client node's data dir %s", pipe, c1.DataDir)
	}
	if st, err := os.Stat(pipe); err != nil || st.Mode()&os.ModeSocket == 0 {
		t.Errorf("xDS socket %q is not served: %v", pipe, err)
	}
	// `connect envoy -sidecar-for` on the client agent (its local connect
	// API) makes a bootstrap for the proxy it serves.
	svcID := fmt.Sprintf("_nomad-task-%s-group-db-db-9090", allocs[0].ID)
	out, err := c.CLIOnHost(c1, "connect", "envoy", "-sidecar-for", svcID, "-bootstrap")
	if err != nil {
		t.Fatalf("connect envoy -sidecar-for on the client agent: %v\n%s", err, out)
	}
	b2 := &bootstrapv3.Bootstrap{}
	if err := protojson.Unmarshal([]byte(out), b2); err != nil {
		t.Fatalf("connect envoy -bootstrap output does not parse: %v\n%.500s", err, out)
	}
	if err := envoyvalidate.All(b2); err != nil || b2.Node.Id != wantID {
		t.Errorf("connect envoy -bootstrap on the client agent: node %q (want %s), validation: %v", b2.Node.GetId(), wantID, err)
	}
}

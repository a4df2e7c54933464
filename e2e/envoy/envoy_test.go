// Package envoy holds the end-to-end test of the Envoy sidecar path: no
// Envoy binary can be installed here, so a stand-in records what the
// sidecar task hands it (arguments and bootstrap), and the test checks it
// with Envoy's own proto validation.
package envoy

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

	"github.com/meshlet/meshlet/e2e/framework"
	"github.com/meshlet/meshlet/internal/envoyvalidate"
)

// fakeEnvoy writes a stand-in envoy that records its arguments and a copy
// of the bootstrap it is given, then stays up like Envoy would.
func fakeEnvoy(t *testing.T) (bin, record string) {
	t.Helper()
	dir := t.TempDir()
	record = filepath.Join(dir, "record")
	bin = filepath.Join(dir, "envoy")
	// The bootstrap copy is in place before the arguments appear (the test
	// waits for those), each renamed into place whole.
	script := fmt.Sprintf(`#!/bin/sh
cp "$2" %[1]s.json.tmp && mv %[1]s.json.tmp %[1]s.json
echo "$@" > %[1]s.args.tmp && mv %[1]s.args.tmp %[1]s.args
exec sleep 600
`, record)
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, record
}

func TestEnvoySidecarGetsValidBootstrap(t *testing.T) {
	bin, record := fakeEnvoy(t)
	a := framework.NewAgent(t, framework.Options{Sidecar: "envoy", EnvoyBinary: bin})
	job := a.RunJob("input/db.hcl")
	alloc := a.RunningAllocs(job, 1)[0]

	var args string
	a.Eventually(30*time.Second, "the sidecar task to start envoy", func() bool {
		b, err := os.ReadFile(record + ".args")
		args = strings.TrimSpace(string(b))
		return err == nil
	})
	bootstrapPath := filepath.Join(a.DataDir, "data", "alloc", alloc.ID, "connect-proxy-db", "secrets", "envoy_bootstrap.json")
	if want := "-c " + bootstrapPath + " -l info --concurrency 1 --disable-hot-restart"; args != want {
		t.Fatalf("envoy args = %q, want %q", args, want)
	}
	st, err := os.Stat(bootstrapPath)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("bootstrap file: %v, mode %v (want 0600)", err, st.Mode())
	}
	js, err := os.ReadFile(record + ".json")
	if err != nil {
		t.Fatal(err)
	}
	b := &bootstrapv3.Bootstrap{}
	if err := protojson.Unmarshal(js, b); err != nil {
		t.Fatalf("bootstrap does not parse as envoy.config.bootstrap.v3.Bootstrap: %v", err)
	}
	if err := envoyvalidate.All(b); err != nil {
		t.Fatalf("bootstrap fails Envoy's validation: %v", err)
	}
	wantID := fmt.Sprintf("_nomad-task-%s-group-db-db-9090-sidecar-proxy", alloc.ID)
	if b.Node.Id != wantID || b.Node.Cluster != "db" {
		t.Errorf("node = %s/%s, want %s/db", b.Node.Id, b.Node.Cluster, wantID)
	}
	pipe := b.StaticResources.Clusters[0].LoadAssignment.Endpoints[0].LbEndpoints[0].GetEndpoint().Address.GetPipe().GetPath()
	if st, err := os.Stat(pipe); err != nil || st.Mode()&os.ModeSocket == 0 {
		t.Errorf("local_agent pipe %q is not the served control plane socket: %v", pipe, err)
	}
	if len(b.StaticResources.Listeners) != 1 {
		t.Errorf("envoy_prometheus_bind_addr did not add the metrics listener")
	}
	if status := a.MustCLI("alloc", "status", alloc.ID); !strings.Contains(status, "Sidecar Proxy: Envoy ("+bin+")") {
		t.Errorf("alloc status does not say the sidecar runs Envoy:\n%s", status)
	}
	if r := a.CLI("connect", "envoy", "-proxy-id", wantID, "-bootstrap", "-grpc-addr", "unix://"+pipe); r.Code != 0 || !strings.Contains(r.Stdout, `"envoy_prometheus_metrics_listener"`) {
		t.Errorf("connect envoy -bootstrap: exit %d, stdout %.300s, stderr %s", r.Code, r.Stdout, r.Stderr)
	}
}

// Package envoy holds the end-to-end test of the Envoy sidecar path: no
// Envoy binary can be installed here, so a stand-in records what the
// sidecar task hands it (arguments, bootstrap, the user and privileges it
// runs with), and the test checks the bootstrap with Envoy's own proto
// validation.
package envoy

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	"google.golang.org/protobuf/encoding/protojson"

	// Types packed in the bootstrap's Any fields.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"

	"github.com/meshlet/meshlet/connect"
	"github.com/meshlet/meshlet/e2e/framework"
	"github.com/meshlet/meshlet/internal/envoyvalidate"
)

// fakeEnvoy writes a stand-in envoy that records its arguments, working
// directory, privileges (/proc status) and a copy of the bootstrap it is
// given, then stays up like Envoy would. It runs as the proxy user, so it
// lives where any user may run it and records where any user may write.
func fakeEnvoy(t *testing.T) (bin, record string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "meshlet-fake-envoy-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	records := filepath.Join(dir, "records")
	if err := os.Mkdir(records, 0o755); err != nil {
		t.Fatal(err)
	}
	for path, mode := range map[string]os.FileMode{dir: 0o755, records: 0o777} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
	}
	record = filepath.Join(records, "record")
	bin = filepath.Join(dir, "envoy")
	// Everything else is in place before the arguments appear (the test
	// waits for those), each renamed into place whole.
	script := fmt.Sprintf(`#!/bin/sh
cp "$2" %[1]s.json.tmp && mv %[1]s.json.tmp %[1]s.json
cat /proc/$$/status > %[1]s.status.tmp && mv %[1]s.status.tmp %[1]s.status
pwd > %[1]s.cwd.tmp && mv %[1]s.cwd.tmp %[1]s.cwd
echo "$@" > %[1]s.args.tmp && mv %[1]s.args.tmp %[1]s.args
exec sleep 600
`, record)
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, record
}

// TestEnvoySidecarGetsValidBootstrap runs a connect job on a client
// without raw_exec: the sidecar runs on the connect_proxy driver and
// starts Envoy as the proxy user (no capabilities, no_new_privs) with an
// in-memory copy of the bootstrap, which passes Envoy's own validation;
// the file the client wrote stays root's.
func TestEnvoySidecarGetsValidBootstrap(t *testing.T) {
	nobody, err := user.Lookup(connect.ProxyUser)
	if err != nil {
		t.Skipf("no %s user on this host: %v", connect.ProxyUser, err)
	}
	bin, record := fakeEnvoy(t)
	a := framework.NewAgent(t, framework.Options{Sidecar: "envoy", EnvoyBinary: bin, NoRawExec: true})
	job := a.RunJob("input/db.hcl")
	alloc := a.RunningAllocs(job, 1)[0]
	node, _, err := a.Nomad().Nodes().Info(alloc.NodeID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := node.Drivers["raw_exec"]; d == nil || d.Detected {
		t.Fatalf("raw_exec on the node: %+v, want disabled", d)
	}

	var args string
	a.Eventually(30*time.Second, "the sidecar task to start envoy", func() bool {
		b, err := os.ReadFile(record + ".args")
		args = strings.TrimSpace(string(b))
		return err == nil
	})
	if !regexp.MustCompile(`^-c /dev/fd/\d+ -l info --concurrency 1 --disable-hot-restart$`).MatchString(args) {
		t.Fatalf("envoy args = %q, want the in-memory bootstrap and the defaults", args)
	}
	status, _ := os.ReadFile(record + ".status")
	for _, want := range []string{fmt.Sprintf("\nUid:\t%[1]s\t%[1]s\t%[1]s\t%[1]s\n", nobody.Uid), "\nCapEff:\t0000000000000000\n",
		"\nCapPrm:\t0000000000000000\n", "\nCapAmb:\t0000000000000000\n", "\nNoNewPrivs:\t1\n"} {
		if !strings.Contains(string(status), want) {
			t.Errorf("envoy's /proc status lacks %q:\n%s", want, status)
		}
	}
	bootstrapPath := filepath.Join(a.DataDir, "data", "alloc", alloc.ID, "connect-proxy-db", "secrets", "envoy_bootstrap.json")
	st, err := os.Stat(bootstrapPath)
	if err != nil || st.Mode().Perm() != 0o600 || st.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Fatalf("bootstrap file: %v, mode %v (want root's, 0600)", err, st.Mode())
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
	// The socket is relative to envoy's working directory, its own.
	cwd, _ := os.ReadFile(record + ".cwd")
	pipe := filepath.Join(strings.TrimSpace(string(cwd)),
		b.StaticResources.Clusters[0].LoadAssignment.Endpoints[0].LbEndpoints[0].GetEndpoint().Address.GetPipe().GetPath())
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

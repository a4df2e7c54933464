package ingress

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/e2e/framework"
	"github.com/meshlet/meshlet/internal/testutil"
)

// TestIngressGRPC: gRPC (h2c) from the host to an ingress gateway's grpc
// listener, several calls over one connection, to a grpc service.
func TestIngressGRPC(t *testing.T) {
	a := framework.NewAgent(t, framework.Options{})
	if r := a.CLIStdin([]byte("Kind = \"service-defaults\"\nName = \"grpcsvc\"\nProtocol = \"grpc\"\n"), "config", "write", "-"); r.Code != 0 {
		t.Fatalf("config write: %s %s", r.Stdout, r.Stderr)
	}
	port := testutil.FreePort(t)
	job := a.RunJob(writeJob(t, "input/ingress-grpc.hcl", strings.NewReplacer("GRPC_PORT", strconv.Itoa(port))))
	a.RunningAllocs(job, 2)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	var out string
	a.Eventually(60*time.Second, "gRPC calls through the grpc listener", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		b, err := exec.CommandContext(ctx, a.Bin, "demo-app", "grpc-get", "-timeout", "3s", "-n", "3", addr).Output()
		out = string(b)
		return err == nil && out == strings.Repeat("OK g1\n", 3)
	})
	if out != strings.Repeat("OK g1\n", 3) {
		t.Fatalf("grpc-get through the gateway = %q", out)
	}
}

package ingress

import (
	"context"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/e2e/framework"
	"github.com/meshlet/meshlet/internal/testutil"
)

// TestIngressGRPC: gRPC (h2c) from the host to an ingress gateway's grpc
// listener, several calls over one connection, to a grpc service; h2c
// requests to its http2 listener, routed by Host, to an http service.
func TestIngressGRPC(t *testing.T) {
	a := framework.NewAgent(t, framework.Options{})
	for svc, prot := range map[string]string{"grpcsvc": "grpc", "h2web": "http"} {
		if r := a.CLIStdin([]byte("Kind = \"service-defaults\"\nName = \""+svc+"\"\nProtocol = \""+prot+"\"\n"), "config", "write", "-"); r.Code != 0 {
			t.Fatalf("config write: %s %s", r.Stdout, r.Stderr)
		}
	}
	port, h2Port := testutil.FreePort(t), testutil.FreePort(t)
	job := a.RunJob(writeJob(t, "input/ingress-grpc.hcl", strings.NewReplacer("GRPC_PORT", strconv.Itoa(port), "H2_PORT", strconv.Itoa(h2Port))))
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

	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true) // h2c with prior knowledge only
	cl := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Protocols: &protos}}
	h2Addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(h2Port))
	var proto, body string
	a.Eventually(60*time.Second, "h2c through the http2 listener", func() bool {
		req, err := http.NewRequest(http.MethodGet, "http://"+h2Addr+"/", nil)
		if err != nil {
			return false
		}
		req.Host = "h2web.ingress.consul"
		resp, err := cl.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		proto, body = resp.Proto, strings.TrimSpace(string(b))
		return err == nil && resp.StatusCode == http.StatusOK
	})
	if proto != "HTTP/2.0" || body != "h2web" {
		t.Fatalf("through the http2 listener: %s %q", proto, body)
	}
}

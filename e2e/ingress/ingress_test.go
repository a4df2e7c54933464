// Package ingress holds the end-to-end test of an ingress gateway: a job
// whose gateway group meshlet completes with a connect-ingress task, bridge
// networking with static host ports, tcp and Host-routed http listeners,
// and intentions judging the gateway's identity.
package ingress

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	consul "github.com/hashicorp/consul/api"

	"github.com/meshlet/meshlet/e2e/framework"
	"github.com/meshlet/meshlet/internal/testutil"
)

// jobWithPorts writes input/ingress.hcl with the two listener ports set.
func jobWithPorts(t *testing.T, tcpPort, httpPort int) string {
	t.Helper()
	src, err := os.ReadFile("input/ingress.hcl")
	if err != nil {
		t.Fatal(err)
	}
	s := strings.ReplaceAll(string(src), "TCP_PORT", strconv.Itoa(tcpPort))
	s = strings.ReplaceAll(s, "HTTP_PORT", strconv.Itoa(httpPort))
	path := filepath.Join(t.TempDir(), "ingress.hcl")
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// echoTCP sends a line to the gateway's tcp listener on the host's
// loopback and reports whether it came back.
func echoTCP(addr string) (bool, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return false, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := fmt.Fprintln(c, "hello gateway"); err != nil {
		return false, err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return false, err
	}
	return strings.TrimSpace(line) == "hello gateway", nil
}

// getHost sends GET / with a Host header to the gateway's http listener.
func getHost(addr, host string) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/", nil)
	if err != nil {
		return 0, "", err
	}
	req.Host = host
	cl := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := cl.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b)), err
}

func TestIngressGateway(t *testing.T) {
	a := framework.NewAgent(t, framework.Options{})
	tcpPort, httpPort := testutil.FreePort(t), testutil.FreePort(t)
	job := a.RunJob(jobWithPorts(t, tcpPort, httpPort))
	allocs := a.RunningAllocs(job, 3)
	gw := a.AllocByGroup(allocs, "gateway")
	tcpAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(tcpPort))
	httpAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(httpPort))

	a.Eventually(60*time.Second, "echo through the gateway's tcp listener", func() bool { ok, _ := echoTCP(tcpAddr); return ok })
	a.Eventually(30*time.Second, "web through the gateway by its default host", func() bool {
		code, body, err := getHost(httpAddr, "web.ingress.meshlet:"+strconv.Itoa(httpPort))
		return err == nil && code == http.StatusOK && body == "web"
	})
	// api is another allocation, whose sidecar may come up after web's.
	a.Eventually(30*time.Second, "api through the gateway by its host api.example.com", func() bool {
		code, body, err := getHost(httpAddr, "api.example.com")
		return err == nil && code == http.StatusOK && body == "api"
	})
	if code, _, err := getHost(httpAddr, "nobody.example.com"); err != nil || code != http.StatusNotFound {
		t.Fatalf("an unknown host through the gateway: %d %v, want 404", code, err)
	}

	t.Run("inspection", func(t *testing.T) {
		out := a.MustCLI("alloc", "status", gw.ID)
		if !strings.Contains(out, `Task "connect-ingress-ingress"`) || !strings.Contains(out, "Ingress Gateway: ingress") {
			t.Errorf("alloc status lacks the gateway task:\n%s", out)
		}
		entries, _, err := a.Consul().Health().Service("ingress", "", false, nil)
		if err != nil || len(entries) != 1 || entries[0].Service.Kind != consul.ServiceKindIngressGateway || entries[0].Service.Port != tcpPort {
			t.Fatalf("health/service/ingress = %+v, %v", entries, err)
		}
		e, _, err := a.Consul().ConfigEntries().Get(consul.IngressGateway, "ingress", nil)
		if err != nil {
			t.Fatal(err)
		}
		if ig, ok := e.(*consul.IngressGatewayConfigEntry); !ok || len(ig.Listeners) != 2 || ig.Listeners[1].Services[1].Hosts[0] != "api.example.com" {
			t.Fatalf("ingress-gateway entry written at registration = %+v", e)
		}
	})

	// A deny from the gateway's identity to db refuses the tcp listener's
	// connections; web (no intention) still answers.
	a.MustCLI("intention", "create", "-deny", "ingress", "db")
	a.Eventually(10*time.Second, "the deny to close the tcp path", func() bool { ok, _ := echoTCP(tcpAddr); return !ok })
	if code, body, err := getHost(httpAddr, "web.ingress.meshlet"); err != nil || code != http.StatusOK || body != "web" {
		t.Fatalf("web after a deny to db: %d %q %v", code, body, err)
	}
	a.MustCLI("intention", "create", "-deny", "ingress", "web")
	a.Eventually(10*time.Second, "the deny to refuse web through the gateway", func() bool {
		code, _, err := getHost(httpAddr, "web.ingress.meshlet")
		return err == nil && code >= 500
	})
	a.MustCLI("intention", "delete", "ingress", "db")
	a.Eventually(10*time.Second, "echo after deleting the deny", func() bool { ok, _ := echoTCP(tcpAddr); return ok })
}

package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/internal/netnsdial"
)

// ingressTLSJob: an ingress gateway serving TLS from the mesh CA on
// gwNode (port 8443, static), web behind it on webNode.
func ingressTLSJob(gwNode, webNode string) string {
	pin := func(node string) string {
		return fmt.Sprintf("constraint {\n      attribute = \"${node.unique.name}\"\n      value     = %q\n    }", node)
	}
	return fmt.Sprintf(`job "igw-tls" {
  datacenters = ["dc1"]

  group "gateway" {
    %[1]s
    network {
      mode = "bridge"
      port "https" {
        static = 8443
        to     = 8443
      }
    }
    service {
      name = "igw"
      port = "8443"
      connect {
        gateway {
          ingress {
            tls {
              enabled = true
            }
            listener {
              port     = 8443
              protocol = "http"
              service {
                name  = "web"
                hosts = ["web.example.com"]
              }
            }
          }
        }
      }
    }
  }

  group "web" {
    %[2]s
    network {
      mode = "bridge"
    }
    service {
      name = "web"
      port = "8080"
      connect {
        sidecar_service {}
      }
    }
    task "web" {
      driver = "raw_exec"
      config {
        command = "${attr.meshlet.binary}"
        args    = ["demo-app", "hello", "-listen", "127.0.0.1:8080", "-id", "web", "-any-path"]
      }
    }
  }
}
`, pin(gwNode), pin(webNode))
}

// TestCrossNodeIngressTLS: an ingress gateway on a client agent (whose CA
// is in remote mode) serves HTTPS with a leaf the servers signed with the
// gateway's DNS SANs from its CSR; HTTPS from the gateway node's host
// namespace, trusting the cluster's roots, reaches web on another node.
func TestCrossNodeIngressTLS(t *testing.T) {
	c := newCluster(t)
	s1 := c.AddServer("s1", 2, 1)
	c1, c2 := c.AddClient("c1", 5, s1), c.AddClient("c2", 6, s1)
	c.WaitNodesReady(60*time.Second, s1, c1, c2)
	c.RunJobCLI(s1, "igw-tls", ingressTLSJob("c2", "c1"))
	c.WaitRunning(s1, "igw-tls", 2, 90*time.Second)

	d := netnsdial.New(filepath.Join("/var/run/netns", c2.NS))
	roots := x509.NewCertPool()
	poll(t, 30*time.Second, "the cluster's roots from c2", func() (bool, string) {
		cl := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: d.DialContext}}
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://127.0.0.1:8500/v1/agent/connect/ca/roots", nil)
		req.Header.Set("X-Consul-Token", c2.token)
		resp, err := cl.Do(req)
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		var out struct{ Roots []struct{ RootCert string } } // Consul's JSON name

		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || len(out.Roots) == 0 || out.Roots[0].RootCert == "" {
			return false, fmt.Sprint(resp.StatusCode, err)
		}
		for _, r := range out.Roots {
			roots.AppendCertsFromPEM([]byte(r.RootCert))
		}
		return true, ""
	})
	var sans []string
	poll(t, 60*time.Second, "web over HTTPS through the gateway on c2", func() (bool, string) {
		tr := &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true,
			TLSClientConfig: &tls.Config{ServerName: "web.example.com", RootCAs: roots}}
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, "https://127.0.0.1:8443/", nil)
		req.Host = "web.example.com"
		resp, err := (&http.Client{Timeout: 5 * time.Second, Transport: tr}).Do(req)
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		sans = resp.TLS.PeerCertificates[0].DNSNames
		return resp.StatusCode == http.StatusOK && strings.TrimSpace(string(b)) == "web", fmt.Sprint(resp.StatusCode, string(b))
	})
	for _, want := range []string{"*.ingress.consul", "*.ingress.dc1.consul", "web.example.com"} {
		if !slices.Contains(sans, want) {
			t.Errorf("the gateway's certificate (signed by a server from c2's CSR) lacks DNS SAN %q: %v", want, sans)
		}
	}
}

// Package connect holds the end-to-end tests of TCP through the mesh,
// isolation and identity, against the real agent, real namespaces and the
// built-in proxy.
package connect

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/e2e/framework"
)

// echoVia sends "hello world" to the upstream listener from inside web's
// allocation and reports whether it came back.
func echoVia(a *framework.Agent, allocID string) (bool, framework.CLIResult) {
	r := a.Exec(allocID, "web", a.Bin, "demo-app", "tcp-client", "-addr", "127.0.0.1:9191", "-message", "hello world", "-timeout", "2s")
	return r.Code == 0 && strings.TrimSpace(r.Stdout) == "hello world", r
}

func TestTCPThroughMeshAndIntentions(t *testing.T) {
	a := framework.NewAgent(t, framework.Options{})
	job := a.RunJob("input/echo.hcl")
	allocs := a.RunningAllocs(job, 2)
	web := a.AllocByGroup(allocs, "web")

	a.Eventually(30*time.Second, "echo through the mesh", func() bool { ok, _ := echoVia(a, web.ID); return ok })

	a.MustCLI("intention", "create", "-deny", "web", "db")
	if r := a.CLI("intention", "check", "web", "db"); r.Code != 1 || !strings.Contains(r.Stdout, "Denied") {
		t.Fatalf("intention check after deny: exit %d, %q", r.Code, r.Stdout)
	}
	ok, r := echoVia(a, web.ID)
	if ok {
		t.Fatalf("echo still works after deny intention: %+v", r)
	}
	if !strings.Contains(r.Stderr, "closed") && !strings.Contains(r.Stderr, "reset") {
		t.Errorf("denied connection should be closed without an echo, got stderr %q", r.Stderr)
	}

	a.MustCLI("intention", "delete", "web", "db")
	a.Eventually(10*time.Second, "echo after deleting the intention", func() bool { ok, _ := echoVia(a, web.ID); return ok })
}

func TestIsolationAndIdentity(t *testing.T) {
	a := framework.NewAgent(t, framework.Options{})
	job := a.RunJob("input/echo.hcl")
	allocs := a.RunningAllocs(job, 2)
	web, db := a.AllocByGroup(allocs, "web"), a.AllocByGroup(allocs, "db")
	a.Eventually(30*time.Second, "echo through the mesh", func() bool { ok, _ := echoVia(a, web.ID); return ok })

	t.Run("upstream listener is private to web", func(t *testing.T) {
		if c, err := net.DialTimeout("tcp", "127.0.0.1:9191", time.Second); err == nil {
			c.Close()
			t.Error("web's upstream listener answered from the host namespace")
		}
		r := a.Exec(db.ID, "db", a.Bin, "demo-app", "tcp-client", "-addr", "127.0.0.1:9191", "-timeout", "1s")
		if r.Code == 0 {
			t.Errorf("web's upstream listener answered from db's namespace: %q", r.Stdout)
		}
	})

	t.Run("sidecars run as nobody without privileges", func(t *testing.T) {
		for _, alloc := range []string{web.ID, db.ID} {
			status := sidecarStatus(t, alloc)
			if !strings.Contains(status, "\nUid:\t65534\t65534\t65534\t65534\n") || !strings.Contains(status, "\nNoNewPrivs:\t1\n") ||
				!strings.Contains(status, "\nCapEff:\t0000000000000000\n") {
				t.Errorf("allocation %s's built-in sidecar: want uid nobody, no_new_privs, no capabilities; /proc status:\n%s", alloc, status)
			}
		}
	})

	consul := a.Consul()
	entries, _, err := consul.Health().Connect("db", "", false, nil)
	if err != nil || len(entries) != 1 {
		t.Fatalf("health/connect/db = %v, %v", entries, err)
	}
	public := net.JoinHostPort(entries[0].Service.Address, fmt.Sprint(entries[0].Service.Port))

	t.Run("public listener requires a mesh certificate", func(t *testing.T) {
		if err := tlsEcho(public, nil); err == nil {
			t.Error("connection without a client certificate succeeded")
		}
		foreign := foreignCert(t)
		if err := tlsEcho(public, &foreign); err == nil {
			t.Error("connection with a certificate from another CA succeeded")
		}
	})

	t.Run("web's identity decides", func(t *testing.T) {
		leaf, _, err := consul.Agent().ConnectCALeaf("web", nil)
		if err != nil {
			t.Fatal(err)
		}
		roots, _, err := consul.Agent().ConnectCARoots(nil)
		if err != nil {
			t.Fatal(err)
		}
		cert, err := tls.X509KeyPair([]byte(leaf.CertPEM), []byte(leaf.PrivateKeyPEM))
		if err != nil {
			t.Fatal(err)
		}
		x, _ := x509.ParseCertificate(cert.Certificate[0])
		want := fmt.Sprintf("spiffe://%s/ns/default/dc/dc1/svc/web", roots.TrustDomain)
		if len(x.URIs) != 1 || x.URIs[0].String() != want {
			t.Fatalf("web's certificate SAN = %v, want %s", x.URIs, want)
		}
		if err := tlsEcho(public, &cert); err != nil {
			t.Fatalf("web's certificate was refused while allowed: %v", err)
		}
		a.MustCLI("intention", "create", "-deny", "web", "db")
		if err := tlsEcho(public, &cert); err == nil {
			t.Fatal("web's certificate still accepted after deny web -> db")
		}
		a.MustCLI("intention", "create", "-replace", "-allow", "web", "db")
		if err := tlsEcho(public, &cert); err != nil {
			t.Fatalf("web's certificate refused after allow: %v", err)
		}
	})
}

// tlsEcho connects to db's public listener with cert and expects an echo.
func tlsEcho(addr string, cert *tls.Certificate) error {
	cfg := &tls.Config{InsecureSkipVerify: true} // the test checks the client side, not the server
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.WriteString(c, "ping"); err != nil {
		return err
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil {
		return err
	}
	if string(buf) != "ping" {
		return fmt.Errorf("got %q", buf)
	}
	return nil
}

func foreignCert(t *testing.T) tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	u, _ := url.Parse("spiffe://11111111-2222-3333-4444-555555555555.meshlet/ns/default/dc/dc1/svc/web")
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "web"}, URIs: []*url.URL{u},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// sidecarStatus is /proc/<pid>/status of the built-in sidecar of
// allocation allocID (its command line names the allocation in its proxy
// ID).
func sidecarStatus(t *testing.T, allocID string) string {
	t.Helper()
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		cmd, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmd), "\x00")
		if len(args) > 3 && args[1] == "connect" && args[2] == "sidecar" && strings.Contains(string(cmd), allocID) {
			status, err := os.ReadFile(filepath.Join("/proc", d.Name(), "status"))
			if err != nil {
				t.Fatal(err)
			}
			return string(status)
		}
	}
	t.Fatalf("no built-in sidecar process of allocation %s", allocID)
	return ""
}

package checks

import (
	"context"
	"errors"
	"github.com/meshlet/meshlet/internal/netnsdial"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// newTestNS creates a throwaway network namespace with loopback up, removed
// when the test ends; it skips the test without the privileges for it.
func newTestNS(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a network namespace (run the tests as root to include it)")
	}
	n, err := testutils.NewNS()
	if errors.Is(err, unix.EPERM) {
		t.Skipf("cannot create a network namespace here (needs CAP_SYS_ADMIN): %v", err)
	}
	if err != nil {
		t.Fatalf("create network namespace: %v", err)
	}
	t.Cleanup(func() {
		_ = n.Close()
		// A dial the HTTP transport or gRPC started in the background
		// (they outlive a cancelled request) may still hold the
		// namespace file open for a moment: unmount refuses with EBUSY
		// until it is closed.
		deadline := time.Now().Add(5 * time.Second)
		for {
			err := testutils.UnmountNS(n)
			if err == nil {
				return
			}
			if !strings.Contains(err.Error(), "device or resource busy") || time.Now().After(deadline) {
				t.Errorf("remove network namespace: %v", err)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	err = n.Do(func(ns.NetNS) error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		return netlink.LinkSetUp(lo)
	})
	if err != nil {
		t.Fatalf("bring up lo in the namespace: %v", err)
	}
	return n.Path()
}

// listenInNS listens on 127.0.0.1:0 inside the namespace at path, on a
// port where the host's 127.0.0.1 has nothing, so a check that dials from
// the host must fail.
func listenInNS(t *testing.T, path string) net.Listener {
	t.Helper()
	for range 5 {
		var l net.Listener
		err := ns.WithNetNSPath(path, func(ns.NetNS) error {
			var err error
			l, err = net.Listen("tcp", "127.0.0.1:0")
			return err
		})
		if err != nil {
			t.Fatalf("listen in the namespace: %v", err)
		}
		c, err := net.DialTimeout("tcp", l.Addr().String(), time.Second)
		if err != nil {
			t.Cleanup(func() { _ = l.Close() })
			return l
		}
		// The host happens to use this port too: try another.
		_ = c.Close()
		_ = l.Close()
	}
	t.Fatal("no port free on both the host's and the namespace's 127.0.0.1")
	return nil
}

// TestChecksInNamespace shows that with NetNS set, http, tcp and grpc
// checks reach a service that listens on the allocation's 127.0.0.1, and
// that the same checks from the host fail (nothing listens there).
func TestChecksInNamespace(t *testing.T) {
	path := newTestNS(t)
	hl := listenInNS(t, path)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("inside"))
	}), ReadHeaderTimeout: time.Second}
	go func() { _ = srv.Serve(hl) }()
	t.Cleanup(func() { _ = srv.Close() })
	gl := listenInNS(t, path)
	hs := grpcServer(t, gl)
	hs.SetServingStatus("api", healthpb.HealthCheckResponse_SERVING)

	h, hp := hostPort(t, hl.Addr().String())
	_, gp := hostPort(t, gl.Addr().String())
	base := Definition{Address: h, Interval: 20 * time.Millisecond, Timeout: time.Second}
	httpD, tcpD, grpcD := base, base, base
	httpD.ID, httpD.Type, httpD.Port, httpD.Path = "http", TypeHTTP, hp, "/"
	tcpD.ID, tcpD.Type, tcpD.Port = "tcp", TypeTCP, hp
	grpcD.ID, grpcD.Type, grpcD.Port, grpcD.GRPCService = "grpc", TypeGRPC, gp, "api"
	defs := []Definition{httpD, tcpD, grpcD}

	inside := startRunner(t, Config{NetNS: path}, defs...)
	host := startRunner(t, Config{}, defs...)
	for _, d := range defs {
		res := waitFor(t, inside, d.ID, "passing inside the namespace", func(r Result) bool { return r.Status == StatusPassing })
		if d.Type == TypeHTTP && !strings.Contains(res.Output, "Output: inside") {
			t.Fatalf("http output %q", res.Output)
		}
		res = waitFor(t, host, d.ID, "a run from the host", func(r Result) bool { return r.Output != "" })
		if res.Status != StatusCritical {
			t.Fatalf("%s check from the host: %+v, want critical", d.ID, res)
		}
	}
}

func TestDialerMissingNamespace(t *testing.T) {
	d := netnsdial.New("/nonexistent/netns/checks-test")
	_, err := d.DialContext(context.Background(), "tcp", "127.0.0.1:1")
	if err == nil || !strings.Contains(err.Error(), "failed to enter network namespace") {
		t.Fatalf("dial in a missing namespace: %v", err)
	}
	var notExist ns.NSPathNotExistErr
	if !errors.As(err, &notExist) {
		t.Fatalf("error %v does not wrap ns.NSPathNotExistErr", err)
	}
}

// TestDialerResolvesOnHost dials a name from inside the namespace: the name
// is resolved first (on the host), then the address dialed inside.
func TestDialerResolvesOnHost(t *testing.T) {
	path := newTestNS(t)
	l := listenInNS(t, path)
	_, port, _ := net.SplitHostPort(l.Addr().String())
	d := netnsdial.New(path)
	d.Resolver = &net.Resolver{PreferGo: true, Dial: func(context.Context, string, string) (net.Conn, error) {
		return nil, errors.New("no DNS in tests")
	}}
	c, err := d.DialContext(context.Background(), "tcp", "localhost:"+port)
	if err != nil && strings.Contains(err.Error(), "no DNS") {
		t.Skip("localhost is not in /etc/hosts here")
	}
	if err != nil {
		// The host's 127.0.0.1 has nothing on port: only a dial made
		// inside the namespace can succeed.
		t.Fatalf("dial localhost:%s in the namespace: %v", port, err)
	}
	_ = c.Close()
}

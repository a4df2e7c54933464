package xds

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/internal/testutil"
)

// TestAllocSocketRefusesOtherNamespaces binds an allocation socket to a
// throwaway network namespace and connects from the host namespace: the
// connection is closed before any gRPC byte is exchanged. (The accepted
// path — a sidecar inside the allocation's namespace — is exercised by the
// e2e tests, where the sidecar process really lives in the namespace.)
func TestAllocSocketRefusesOtherNamespaces(t *testing.T) {
	testutil.RequireRoot(t)
	name := fmt.Sprintf("mlxds%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })

	e := newEnv(t, hclog.Off)
	dir, err := os.MkdirTemp("", "mlx")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "s.sock")
	l, err := e.srv.ListenAlloc("a1", path, WithPeerNetNS("/var/run/netns/"+name))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			c.Close()
		}
		accepted <- err
	}()

	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("connection from the host namespace: read %d bytes, err %v; want it closed by the server", n, err)
	}
	l.Close()
	if err := <-accepted; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept handed out a refused connection (err %v)", err)
	}

	if _, err := e.srv.ListenAlloc("a2", filepath.Join(dir, "t.sock"), WithPeerNetNS("/nonexistent/netns")); err == nil {
		t.Fatal("ListenAlloc accepted a namespace path that does not exist")
	}
}

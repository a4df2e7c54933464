package docker_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/driver/docker"
	"github.com/meshlet/meshlet/driver/internal/drivertest"
)

var nsSeq atomic.Int64

// newNetNS makes a throwaway named network namespace with lo up and a
// veth pair named link and link+"p", deleted at cleanup.
func newNetNS(t *testing.T, link string) (name, path string) {
	t.Helper()
	name = fmt.Sprintf("meshlet-dock-%d-%d", os.Getpid(), nsSeq.Add(1))
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "delete", name).Run() })
	for _, args := range [][]string{
		{"-n", name, "link", "set", "lo", "up"},
		{"-n", name, "link", "add", link, "type", "veth", "peer", "name", link + "p"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	return name, "/var/run/netns/" + name
}

// addNSAddr gives link in the named namespace the address cidr and sets
// it up.
func addNSAddr(t *testing.T, name, link, cidr string) {
	t.Helper()
	for _, args := range [][]string{{"-n", name, "addr", "add", cidr, "dev", link}, {"-n", name, "link", "set", link, "up"}} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
}

// serveInNetNS serves body over HTTP on 127.0.0.1 inside the namespace.
func serveInNetNS(t *testing.T, path, body string) int {
	t.Helper()
	var ln net.Listener
	err := ns.WithNetNSPath(path, func(ns.NetNS) error {
		var err error
		ln, err = net.Listen("tcp", "127.0.0.1:0")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, body) })}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

// pauseContainers lists the pause containers of alloc.
func pauseContainers(t *testing.T, alloc string) []container.Summary {
	t.Helper()
	list, err := daemon.Client(t).ContainerList(context.Background(), container.ListOptions{All: true, Filters: filters.NewArgs(
		filters.Arg("label", docker.LabelPause), filters.Arg("label", docker.LabelAllocID+"="+alloc))})
	if err != nil {
		t.Fatal(err)
	}
	return list
}

// Docker tasks of an allocation with its own namespace share it (through
// the pause container) with each other and with whatever else runs in
// it; network_mode "none" stays out. The pause container goes with the
// allocation's last task.
func TestAllocNetworkNamespaceShared(t *testing.T) {
	d := newDriver(t, docker.Config{})
	_, path := newNetNS(t, "mlt0")
	port := serveInNetNS(t, path, "hello-from-ns")
	script := fmt.Sprintf("grep -o 'mlt0:' /proc/net/dev; wget -qO- http://127.0.0.1:%d/; echo", port)
	var cfgs []*driver.TaskConfig
	for _, name := range []string{"web", "api"} {
		cfg := taskConfig(t, name, "sh", "-c", script+"; sleep 300")
		delete(cfg.Config, "network_mode")
		cfg.AllocID, cfg.NetNSPath = "alloc-shared", path
		drivertest.Start(t, d, cfg)
		cfgs = append(cfgs, cfg)
	}
	for _, cfg := range cfgs {
		drivertest.WaitLog(t, cfg, "hello-from-ns")
		if got := drivertest.Log(t, cfg, "stdout"); got != "mlt0:\nhello-from-ns\n" {
			t.Errorf("%s stdout = %q, want the namespace's link and server", cfg.Name, got)
		}
	}
	if n := len(pauseContainers(t, "alloc-shared")); n != 1 {
		t.Errorf("%d pause containers, want 1 shared", n)
	}
	own := taskConfig(t, "own", "sh", "-c", script)
	own.AllocID, own.NetNSPath = "alloc-shared", path
	drivertest.Start(t, d, own)
	drivertest.Wait(t, d, own.ID)
	if got := drivertest.Log(t, own, "stdout"); got != "\n" {
		t.Errorf("network_mode none task stdout = %q, want nothing of the namespace", got)
	}
	for _, cfg := range append(cfgs, own) {
		if err := d.DestroyTask(cfg.ID, true); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(pauseContainers(t, "alloc-shared")); n != 0 {
		t.Errorf("%d pause containers left after the allocation's tasks", n)
	}
}

// A namespace recreated under the same path (the network hook rebuilt it)
// gets a new pause container: new tasks join the new namespace.
func TestPauseFollowsRecreatedNamespace(t *testing.T) {
	d := newDriver(t, docker.Config{})
	name, path := newNetNS(t, "mlt0")
	first := taskConfig(t, "first", "sh", "-c", "grep -o 'mlt[01]:' /proc/net/dev; sleep 300")
	delete(first.Config, "network_mode")
	first.AllocID, first.NetNSPath = "alloc-recreated", path
	drivertest.Start(t, d, first)
	drivertest.WaitLog(t, first, "mlt0:")
	for _, args := range [][]string{{"netns", "delete", name}, {"netns", "add", name}, {"-n", name, "link", "add", "mlt1", "type", "veth", "peer", "name", "mlt1p"}} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	second := taskConfig(t, "second", "sh", "-c", "grep -o 'mlt[01]:' /proc/net/dev")
	delete(second.Config, "network_mode")
	second.AllocID, second.NetNSPath = "alloc-recreated", path
	drivertest.Start(t, d, second)
	drivertest.Wait(t, d, second.ID)
	if got := drivertest.Log(t, second, "stdout"); strings.TrimSpace(got) != "mlt1:" {
		t.Errorf("task in the recreated namespace sees %q, want mlt1", got)
	}
}

// Tasks of one allocation starting at once share one pause container.
func TestPauseConcurrentStarts(t *testing.T) {
	d := newDriver(t, docker.Config{})
	_, path := newNetNS(t, "mlt0")
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for i := range 4 {
		cfg := taskConfig(t, fmt.Sprintf("t%d", i), "sleep", "300")
		delete(cfg.Config, "network_mode")
		cfg.AllocID, cfg.NetNSPath = "alloc-concurrent", path
		t.Cleanup(func() { _ = d.DestroyTask(cfg.ID, true) })
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := d.StartTask(cfg); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := len(pauseContainers(t, "alloc-concurrent")); n != 1 {
		t.Errorf("%d pause containers, want 1", n)
	}
}

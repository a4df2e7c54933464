package cni

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/meshlet/meshlet/structs"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// TestTeardownKeepsRecordUntilDone: a Teardown that cannot remove
// everything fails and keeps the namespace record (GC's only marker of
// what is left), so GC (on a later agent start) collects the rest.
func TestTeardownKeepsRecordUntilDone(t *testing.T) {
	for name, breakIt := range map[string]func(t *testing.T, tn *testNet, a *structs.Allocation) *Manager{
		// A second mount on the namespace file (someone's `mount --bind`):
		// the namespace file cannot be removed.
		"namespace busy": func(t *testing.T, tn *testNet, a *structs.Allocation) *Manager {
			path := tn.m.NetNSPath(a.ID)
			if err := unix.Mount(path, path, "none", unix.MS_BIND, ""); err != nil {
				t.Fatal(err)
			}
			return tn.m
		},
		// DEL fails and the iptables sweep after it cannot run: the
		// allocation's rules are still there.
		"sweep after a failed DEL": func(t *testing.T, tn *testNet, a *structs.Allocation) *Manager {
			cfg := tn.cfg
			cfg.PluginDir = copyPlugins(t, "", "bridge", "portmap")
			broken, err := New(cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			broken.lookPath = func(string) (string, error) { return "", exec.ErrNotFound }
			return broken
		},
	} {
		t.Run(name, func(t *testing.T) {
			tn := newTestNet(t)
			a := tn.alloc(structs.PortMapping{Label: "http", Value: freePort(t), To: 80})
			tn.setup(a)
			m := breakIt(t, tn, a)
			if err := m.Teardown(t.Context(), a); err == nil {
				t.Fatal("Teardown that left the allocation's state behind returned nil")
			}
			if _, err := os.Stat(tn.m.recordPath(a.ID)); err != nil {
				t.Fatalf("namespace record removed although the teardown failed (GC can never collect the rest): %v", err)
			}
			if err := tn.newManager().GC(t.Context(), liveIDs()); err != nil {
				t.Fatalf("GC after the cause is gone: %v", err)
			}
			tn.requireClean(a.ID)
		})
	}
}

// crashingPlugin returns a copy of the real plugins in which plugin name
// dies on the CNI command cmd without reporting a CNI error, as a crash
// (or a plugin killed by the OOM killer) does.
func crashingPlugin(t *testing.T, name, cmd string) string {
	t.Helper()
	dir := copyPlugins(t, name)
	script := fmt.Sprintf("#!/bin/sh\nif [ \"$CNI_COMMAND\" = %q ]; then\n  echo 'panic: simulated crash' >&2\n  exit 2\nfi\nexec %q \"$@\"\n",
		cmd, filepath.Join(realPluginDir(t), name))
	if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestInconclusiveCheckKeepsNetwork: a Restore whose CHECK does not run to
// its end (the agent stops meanwhile, or a plugin crashes) learns nothing
// about the network and must leave it exactly as it was: same address on
// eth0, lease, cached ADD, traffic. So must a rebuild whose DEL is cut
// short. Restore reports the error.
func TestInconclusiveCheckKeepsNetwork(t *testing.T) {
	for name, restore := range map[string]func(t *testing.T, cfg Config, a *structs.Allocation) error{
		"context ends during CHECK": func(t *testing.T, cfg Config, a *structs.Allocation) error {
			return restoreCancelledIn(t, cfg, a, "CHECK")
		},
		"plugin crashes on CHECK": func(t *testing.T, cfg Config, a *structs.Allocation) error {
			cfg.PluginDir = crashingPlugin(t, "portmap", "CHECK")
			m, err := New(cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, err = m.Restore(t.Context(), a)
			return err
		},
		// CHECK finds a problem, and the agent stops during the rebuild's
		// DEL: the DEL did not finish, so nothing else may go.
		"context ends during the rebuild's DEL": func(t *testing.T, cfg Config, a *structs.Allocation) error {
			rule := []string{"-s", addrOf(t, cfg, a) + "/32", "-j", "ACCEPT"}
			ipt := mustIPT(t)
			if err := ipt.h.Delete("filter", "CNI-FORWARD", rule...); err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := ipt.h.Append("filter", "CNI-FORWARD", rule...); err != nil {
					t.Fatal(err)
				}
			}()
			return restoreCancelledIn(t, cfg, a, "DEL")
		},
	} {
		t.Run(name, func(t *testing.T) {
			tn := newTestNet(t)
			a := tn.alloc(structs.PortMapping{Label: "http", Value: freePort(t), To: 80})
			st := tn.setup(a)
			path := tn.m.NetNSPath(a.ID)
			inode := nsInode(t, path)
			l := listenIn(t, path, net.JoinHostPort(st.Address, "0"), "alive")
			if err := restore(t, tn.cfg, a); err == nil {
				t.Fatal("Restore whose check or rebuild did not finish returned no error")
			}
			if got, err := eth0Addr(path); err != nil || got != st.Address || nsInode(t, path) != inode {
				t.Fatalf("eth0 = %q, %v; want %s in the same namespace", got, err, st.Address)
			}
			if ips := tn.m.leaseIPs(a.ID); len(ips) != 1 || ips[0] != st.Address {
				t.Fatalf("leases of the allocation = %v, want [%s]", ips, st.Address)
			}
			if atts, _ := tn.m.cni.GetCachedAttachments(a.ID); len(atts) == 0 {
				t.Fatal("the cached ADD was removed")
			}
			if got, err := dialFrom("", l.Addr().String(), dialTimeout); err != nil || got != "alive" {
				t.Fatalf("host -> allocation: %q, %v", got, err)
			}
			if got, err := tn.newManager().Restore(t.Context(), a); err != nil || got.Address != st.Address {
				t.Fatalf("Restore once the plugins work = %+v, %v; want %s", got, err, st.Address)
			}
		})
	}
}

func mustIPT(t *testing.T) *ipt {
	t.Helper()
	path, err := exec.LookPath("iptables")
	if err != nil {
		t.Fatal(err)
	}
	i, err := newIPT(path)
	if err != nil {
		t.Fatal(err)
	}
	return i
}

// addrOf returns the address of eth0 in the namespace of a.
func addrOf(t *testing.T, cfg Config, a *structs.Allocation) string {
	t.Helper()
	return addrOfEth0(t, filepath.Join(cfg.withDefaults().NetNSDir, a.ID))
}

// restoreCancelledIn runs Restore of a with cfg's plugins but portmap
// hanging on the CNI command cmd, cancels it once portmap hangs (the agent
// stops) and returns its error. A Restore still running 30 s later fails
// the test (after releasing the plugin, so its cleanup can run).
func restoreCancelledIn(t *testing.T, cfg Config, a *structs.Allocation, cmd string) error {
	t.Helper()
	var started string
	var release func()
	cfg.PluginDir, started, release = hangingPlugin(t, "portmap", cmd)
	m, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := m.Restore(ctx, a); done <- err }()
	waitFile(t, started, 30*time.Second)
	cancel()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		release()
		t.Fatalf("Restore still running 30s after its context was cancelled (then: %v)", <-done)
		return nil
	}
}

// TestRestoreConflistWithoutCheck: a cni/<name> conflist older than CNI
// CHECK (cniVersion 0.3.1, common for third-party conflists) is checked by
// its interface instead: a healthy network survives an agent restart as it
// is (before, every restart rebuilt it on a new address), and a broken one
// is still rebuilt.
func TestRestoreConflistWithoutCheck(t *testing.T) {
	tn := newTestNet(t)
	conf := fmt.Sprintf(`{"cniVersion": "0.3.1", "name": "old", "plugins": [{"type": "loopback"},
	  {"type": "bridge", "bridge": %q, "isGateway": true,
	   "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "dataDir": %q}}]}`,
		tn.cfg.BridgeName, tn.cfg.Subnet, filepath.Join(tn.cfg.StateDir, "ipam"))
	if err := os.WriteFile(filepath.Join(tn.cfg.ConfigDir, "old.conflist"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	a := testAlloc("cni/old")
	tn.mu.Lock()
	tn.allocs = append(tn.allocs, a)
	tn.mu.Unlock()
	st, err := tn.m.Setup(t.Context(), a)
	if err != nil {
		t.Fatal(err)
	}
	path := tn.m.NetNSPath(a.ID)
	veth := hostVethOf(t, path)
	got, err := tn.newManager().Restore(t.Context(), a)
	if err != nil || got.Address != st.Address {
		t.Fatalf("Restore of a healthy 0.3.1 network = %+v, %v; want %s kept", got, err, st.Address)
	}
	if now := hostVethOf(t, path); now.Attrs().Index != veth.Attrs().Index {
		t.Fatal("Restore of a healthy 0.3.1 network replaced its veth")
	}
	// Broken: eth0 gone. The interface check sees it and the network is
	// rebuilt in the same namespace.
	err = ns.WithNetNSPath(path, func(ns.NetNS) error {
		l, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		return netlink.LinkDel(l)
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err = tn.newManager().Restore(t.Context(), a)
	if err != nil || got == nil {
		t.Fatalf("Restore of a broken 0.3.1 network: %+v, %v", got, err)
	}
	if eth0 := addrOfEth0(t, path); eth0 != got.Address {
		t.Fatalf("rebuilt eth0 has %s, status says %s", eth0, got.Address)
	}
}

// TestRebuildKeepsAddress: a network rebuilt in place after a failed check
// (here: the firewall plugin's rule of the allocation was flushed) keeps
// its address, which the running tasks hold in their environment and
// sockets.
func TestRebuildKeepsAddress(t *testing.T) {
	tn := newTestNet(t)
	a := tn.alloc(structs.PortMapping{Label: "http", Value: freePort(t), To: 80})
	st := tn.setup(a)
	path := tn.m.NetNSPath(a.ID)
	inode := nsInode(t, path)
	if err := mustIPT(t).h.Delete("filter", "CNI-FORWARD", "-s", st.Address+"/32", "-j", "ACCEPT"); err != nil {
		t.Fatal(err)
	}
	got, err := tn.newManager().Restore(t.Context(), a)
	if err != nil || got == nil {
		t.Fatalf("Restore of a network that fails its check: %+v, %v", got, err)
	}
	if got.Address != st.Address || addrOfEth0(t, path) != st.Address || nsInode(t, path) != inode {
		t.Fatalf("rebuilt network has address %s (eth0 %s), want %s kept in the same namespace", got.Address, addrOfEth0(t, path), st.Address)
	}
	if ips := tn.m.leaseIPs(a.ID); len(ips) != 1 || ips[0] != st.Address {
		t.Fatalf("leases = %v, want [%s]", ips, st.Address)
	}
	if again, err := tn.newManager().Restore(t.Context(), a); err != nil || again.Address != st.Address {
		t.Fatalf("Restore after the rebuild = %+v, %v; want it healthy on %s", again, err, st.Address)
	}
}

package cni

import (
	"os"
	"os/exec"
	"testing"

	"github.com/meshlet/meshlet/structs"
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
			if err := tn.newManager().GC(t.Context(), map[string]bool{}); err != nil {
				t.Fatalf("GC after the cause is gone: %v", err)
			}
			tn.requireClean(a.ID)
		})
	}
}

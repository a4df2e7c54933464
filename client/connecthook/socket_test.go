package connecthook

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/client/allocdir"
	"github.com/meshlet/meshlet/client/allocrunner"
	"github.com/meshlet/meshlet/connect"
	"github.com/meshlet/meshlet/controlplane"
	"github.com/meshlet/meshlet/internal/testutil"
)

// socketHook returns the sidecar hook, served by a real control plane, and
// the hook context of a connect allocation whose alloc dir is built in dir.
func socketHook(t *testing.T, dir string) (*SidecarHook, *allocrunner.AllocHookContext) {
	t.Helper()
	cp, err := controlplane.New(controlplane.Config{DataDir: filepath.Join(dir, "cp"), DefaultAllow: true,
		GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0"}, catalog.New())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Stop() })
	alloc := webAlloc(t, nil)
	ad := allocdir.New(filepath.Join(dir, "alloc"), alloc.ID)
	if err := ad.Build([]string{"web", "connect-proxy-web"}, nil); err != nil {
		t.Fatal(err)
	}
	hc := &allocrunner.AllocHookContext{Alloc: alloc, AllocDir: ad, Logger: hclog.NewNullLogger()}
	return &SidecarHook{d: Deps{Sockets: cp, SidecarMode: "builtin"}}, hc
}

// TestPlantedSocketFilesDoNotFailAllocation plants, as a task could, a link
// to a victim file and a regular file at the old socket path (alloc/tmp,
// writable by every task) and at the new one; the real control plane must
// still serve the allocation's socket, in alloc/run, without following the
// link or touching the victim.
func TestPlantedSocketFilesDoNotFailAllocation(t *testing.T) {
	for _, plant := range []string{"symlink", "file", "dir"} {
		t.Run(plant, func(t *testing.T) {
			dir := t.TempDir()
			h, hc := socketHook(t, dir)
			ad := hc.AllocDir
			victim := filepath.Join(dir, "victim")
			if err := os.WriteFile(victim, []byte("keep"), 0o600); err != nil {
				t.Fatal(err)
			}
			sock := connect.SocketPath(ad.SharedDir)
			for _, p := range []string{filepath.Join(ad.SharedDir, "tmp", connect.SocketName), sock} {
				var err error
				switch plant {
				case "symlink":
					err = os.Symlink(victim, p)
				case "file":
					err = os.WriteFile(p, []byte("planted"), 0o644)
				case "dir":
					err = os.Mkdir(p, 0o755)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			if err := h.Prerun(context.Background(), hc); err != nil {
				t.Fatalf("planted %s failed the allocation: %v", plant, err)
			}
			t.Cleanup(func() { _ = h.Postrun(context.Background(), hc) })
			if b, _ := os.ReadFile(victim); string(b) != "keep" {
				t.Fatalf("victim changed: %q", b)
			}
			if filepath.Dir(sock) != ad.RunDir {
				t.Fatalf("socket %s is not in the root-only run dir %s", sock, ad.RunDir)
			}
			fi, err := os.Lstat(sock)
			if err != nil || fi.Mode()&os.ModeSocket == 0 {
				t.Fatalf("no socket at %s: %v %v", sock, fi, err)
			}
			c, err := net.Dial("unix", sock)
			if err != nil {
				t.Fatalf("socket not served: %v", err)
			}
			_ = c.Close()
			entries, _ := os.ReadDir(ad.RunDir)
			var aside bool
			for _, e := range entries {
				aside = aside || strings.HasPrefix(e.Name(), connect.SocketName+".unexpected-")
			}
			if !aside {
				t.Errorf("the planted %s was not moved aside: %v", plant, entries)
			}
		})
	}
}

// TestUnsafeSocketDirIsRefused: a run dir others can write is not used.
func TestUnsafeSocketDirIsRefused(t *testing.T) {
	ad := allocdir.New(t.TempDir(), "a1")
	if err := ad.Build(nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(ad.RunDir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := prepareSocket(filepath.Join(ad.RunDir, connect.SocketName), hclog.NewNullLogger()); err == nil {
		t.Fatal("a world-writable socket dir was accepted")
	}
}

// TestLegacySocketPathLinked: sidecars started before the socket moved
// (a restored allocation) dial alloc/tmp/meshlet_grpc.sock; the agent links
// it to the new socket, replacing its own stale socket there, but leaves a
// file another user planted alone, without failing the allocation.
func TestLegacySocketPathLinked(t *testing.T) {
	testutil.RequireRoot(t)
	uid, gid, err := allocdir.LookupUser("nobody")
	if err != nil {
		t.Skip(err)
	}
	for _, plant := range []string{"stale agent socket", "nobody's file"} {
		t.Run(plant, func(t *testing.T) {
			dir := t.TempDir()
			h, hc := socketHook(t, dir)
			ad := hc.AllocDir
			legacy := legacySocketPath(ad.SharedDir)
			if plant == "stale agent socket" {
				l, err := net.Listen("unix", legacy)
				if err != nil {
					t.Fatal(err)
				}
				l.(*net.UnixListener).SetUnlinkOnClose(false)
				_ = l.Close()
			} else {
				if err := os.WriteFile(legacy, []byte("planted"), 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.Chown(legacy, uid, gid); err != nil {
					t.Fatal(err)
				}
			}
			hc.Restored = true
			if err := h.Prerun(context.Background(), hc); err != nil {
				t.Fatalf("Prerun: %v", err)
			}
			t.Cleanup(func() { _ = h.Postrun(context.Background(), hc) })
			c, err := net.Dial("unix", legacy)
			if plant == "stale agent socket" {
				if err != nil {
					t.Fatalf("legacy path not linked to the socket: %v", err)
				}
				_ = c.Close()
				return
			}
			if err == nil {
				_ = c.Close()
			}
			if b, _ := os.ReadFile(legacy); string(b) != "planted" {
				t.Fatalf("nobody's file was replaced: %q", b)
			}
		})
	}
}

// TestPostrunRemovesPreviousAgentsSocket: an agent died with an
// allocation's socket in place; the next agent never served it, yet the
// Postrun it runs for the restored, ended allocation removes it (it was
// left until the allocation was garbage collected), twice without error,
// and leaves a file that is not a socket alone.
func TestPostrunRemovesPreviousAgentsSocket(t *testing.T) {
	for _, left := range []string{"socket", "file"} {
		t.Run(left, func(t *testing.T) {
			h, hc := socketHook(t, t.TempDir())
			sock := connect.SocketPath(hc.AllocDir.SharedDir)
			if left == "socket" {
				l, err := net.Listen("unix", sock)
				if err != nil {
					t.Fatal(err)
				}
				l.(*net.UnixListener).SetUnlinkOnClose(false)
				_ = l.Close()
			} else if err := os.WriteFile(sock, []byte("not ours"), 0o600); err != nil {
				t.Fatal(err)
			}
			hc.Restored = true
			for i := 0; i < 2; i++ {
				if err := h.Postrun(context.Background(), hc); err != nil {
					t.Fatalf("Postrun %d: %v", i+1, err)
				}
			}
			_, err := os.Lstat(sock)
			if gone := os.IsNotExist(err); gone != (left == "socket") {
				t.Fatalf("%s at the socket path: gone = %v (%v)", left, gone, err)
			}
		})
	}
}

package isolate

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/meshlet/meshlet/internal/testutil"
)

// TestStageGuards: neither half runs outside its namespaces.
func TestStageGuards(t *testing.T) {
	if err := checkOwnMountNS(); !errors.Is(err, ErrSharedMountNS) {
		t.Fatalf("stage in the test's mount namespace: %v", err)
	}
	if _, err := Start(exec.Command("/bin/true"), &Config{}, (*exec.Cmd).Start); !errors.Is(err, ErrNotInit) {
		t.Fatalf("Start outside a PID namespace: %v", err)
	}
}

// TestMountpoint: links and wrong kinds left in the task dir are replaced,
// never followed.
func TestMountpoint(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	if err := os.Symlink(outside, filepath.Join(root, "usr")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "run"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		rel string
		dir bool
	}{{"/usr", true}, {"/run/resolvconf", true}, {"/dev/null", false}} {
		p, err := mountpoint(root, tc.rel, tc.dir)
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Lstat(p)
		if err != nil || fi.IsDir() != tc.dir || fi.Mode()&os.ModeSymlink != 0 || p != filepath.Join(root, tc.rel) {
			t.Fatalf("%s: %v, %v", tc.rel, fi, err)
		}
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Fatalf("followed the link: %v", entries)
	}
}

func TestChownTaskDir(t *testing.T) {
	testutil.RequireRoot(t)
	dir, outside := t.TempDir(), t.TempDir()
	for _, sub := range []string{"local", "secrets"} {
		if err := os.Mkdir(filepath.Join(dir, sub), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := ChownTaskDir(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, filepath.Join(dir, "local"), filepath.Join(dir, "secrets")} {
		fi, err := os.Stat(p)
		if err != nil || fi.Sys().(*syscall.Stat_t).Uid != 65534 {
			t.Fatalf("%s not given to nobody: %v", p, err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(dir, "tmp")); err != nil {
		t.Fatal(err)
	}
	if err := ChownTaskDir(dir, 65534, 65534); err == nil {
		t.Fatal("a linked tmp/ was accepted")
	}
	if fi, _ := os.Stat(outside); fi.Sys().(*syscall.Stat_t).Uid == 65534 {
		t.Fatal("followed the link")
	}
}

// TestLookPathIn resolves in our own root (/proc/<pid>/root is "/").
func TestLookPathIn(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	got, err := LookPathIn(os.Getpid(), "sh", map[string]string{"PATH": filepath.Dir(sh)}, "/")
	if err != nil || got != sh {
		t.Fatalf("sh: %q, %v; want %s", got, err, sh)
	}
	if _, err := LookPathIn(os.Getpid(), "no-such-binary-meshlet", nil, "/"); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("missing: %v", err)
	}
}

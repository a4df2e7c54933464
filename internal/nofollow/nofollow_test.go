package nofollow

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// tree makes dir/local/data/sub, a file and links of every kind a task
// may plant, and returns dir and a host directory the links lead to.
func tree(t *testing.T) (dir, host string) {
	t.Helper()
	dir, host = t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "local/data/sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "local/file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{"local/root": "/", "local/data/up": host, "local/dangling": filepath.Join(host, "missing"), "local/inside": "data"} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	return dir, host
}

func TestCheckBeneath(t *testing.T) {
	dir, host := tree(t)
	for _, tc := range []struct {
		rel  string
		want error // nil: accepted
	}{
		{"local/data", nil},
		{"local/data/sub", nil},
		{"local/data/missing/deeper", nil},
		{"./local/data", nil},
		{"local/file", nil},
		{".", nil},
		{"local/root", ErrSymlink},
		{"local/root/etc", ErrSymlink},
		{"local/data/up/x", ErrSymlink},
		{"local/dangling", ErrSymlink},
		{"local/dangling/new", ErrSymlink},
		{"local/inside", ErrSymlink}, // even a link that stays inside
		{"../x", ErrOutside},
		{"local/../../x", ErrOutside},
		{"..", ErrOutside},
	} {
		err := CheckBeneath(dir, tc.rel)
		if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("CheckBeneath(%q) = %v, want %v", tc.rel, err, tc.want)
		}
	}
	if err := CheckBeneath(dir, "local/file/x"); err == nil || errors.Is(err, ErrSymlink) {
		t.Errorf("CheckBeneath below a file = %v, want an error other than ErrSymlink", err)
	}
	if _, err := os.Lstat(filepath.Join(host, "missing")); err == nil {
		t.Errorf("a check created a host path")
	}
}

func TestOpenParent(t *testing.T) {
	dir, host := tree(t)
	d, base, err := OpenParent(dir, "local/data/sub/f", false)
	if err != nil {
		t.Fatal(err)
	}
	got, err := d.Stat()
	d.Close()
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(got, fileInfo(t, filepath.Join(dir, "local/data/sub"))) || base != "f" {
		t.Fatalf("OpenParent = %v, %q; want local/data/sub, \"f\"", got.Name(), base)
	}
	for _, rel := range []string{"local/root/etc/x", "local/data/up/x", "local/dangling/x"} {
		for _, create := range []bool{false, true} {
			if d, _, err := OpenParent(dir, rel, create); !errors.Is(err, ErrSymlink) {
				if d != nil {
					d.Close()
				}
				t.Errorf("OpenParent(%q, create %v) = %v, want ErrSymlink", rel, create, err)
			}
		}
	}
	if _, err := os.Lstat(filepath.Join(host, "missing")); err == nil {
		t.Errorf("OpenParent created a directory through a dangling link")
	}
	if _, _, err := OpenParent(dir, "local/new/deeper/f", false); !errors.Is(err, unix.ENOENT) {
		t.Errorf("missing parent without create = %v, want ENOENT", err)
	}
	d, base, err = OpenParent(dir, "local/new/deeper/f", true)
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	if fi := fileInfo(t, filepath.Join(dir, "local/new/deeper")); !fi.IsDir() || base != "f" {
		t.Errorf("created parent %v, base %q", fi.Mode(), base)
	}
}

func TestOpenDirRefusesLink(t *testing.T) {
	dir, _ := tree(t)
	for _, link := range []string{"local/inside", "local/root", "local/dangling"} {
		if d, err := OpenDir(filepath.Join(dir, link)); !errors.Is(err, unix.ELOOP) && !errors.Is(err, unix.ENOTDIR) {
			if d != nil {
				d.Close()
			}
			t.Errorf("OpenDir(%s) = %v, want ELOOP or ENOTDIR", link, err)
		}
	}
	var pe *os.PathError
	if _, err := OpenDir(filepath.Join(dir, "local/file")); !errors.As(err, &pe) || !errors.Is(err, unix.ENOTDIR) {
		t.Fatalf("OpenDir of a file = %v, want a *os.PathError with ENOTDIR", err)
	}
	d, err := OpenDir(filepath.Join(dir, "local/data"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Name() != filepath.Join(dir, "local/data") {
		t.Errorf("Name() = %q", d.Name())
	}
}

func fileInfo(t *testing.T, p string) os.FileInfo {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi
}

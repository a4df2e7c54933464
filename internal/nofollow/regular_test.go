package nofollow

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// OpenRegular opens regular files only: a FIFO (whose open would block), a
// symlink and a directory are refused without being opened, and a missing
// file is created only with O_CREAT.
func TestOpenRegular(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "file"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(dir, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("file", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	d, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	f, err := OpenRegular(d, "file", unix.O_RDONLY)
	if err != nil {
		t.Fatalf("regular file: %v", err)
	}
	f.Close()
	for _, name := range []string{"fifo", "link", "sub"} {
		if f, err := OpenRegular(d, name, unix.O_RDONLY); !errors.Is(err, ErrNotRegular) {
			if f != nil {
				f.Close()
			}
			t.Errorf("%s: err %v, want ErrNotRegular", name, err)
		}
	}
	if _, err := OpenRegular(d, "missing", unix.O_RDONLY); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing without O_CREAT: %v, want not exist", err)
	}
	f, err = OpenRegular(d, "new", unix.O_WRONLY|unix.O_APPEND|unix.O_CREAT)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	f.Close()
	if st, err := os.Lstat(filepath.Join(dir, "new")); err != nil || !st.Mode().IsRegular() {
		t.Fatalf("created file: %v %v", st, err)
	}
}

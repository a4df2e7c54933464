package allocdir

import (
	"os"
	"path/filepath"
	"testing"
)

func TestBuildLayoutAndModes(t *testing.T) {
	root := t.TempDir()
	d := New(root, "a1")
	if d.Exists() {
		t.Fatal("exists before Build")
	}
	for i := 0; i < 2; i++ { // idempotent
		if err := d.Build([]string{"web", "connect-proxy-web"}); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]os.FileMode{
		"a1/alloc":                     0o755,
		"a1/alloc/logs":                0o755,
		"a1/alloc/data":                0o755,
		"a1/alloc/tmp":                 0o777 | os.ModeSticky,
		"a1/web/local":                 0o755,
		"a1/web/secrets":               0o700,
		"a1/web/tmp":                   0o777 | os.ModeSticky,
		"a1/connect-proxy-web/secrets": 0o700,
	}
	for rel, mode := range want {
		fi, err := os.Stat(filepath.Join(root, rel))
		if err != nil {
			t.Errorf("%s: %v", rel, err)
			continue
		}
		if got := fi.Mode() & (os.ModePerm | os.ModeSticky); got != mode {
			t.Errorf("%s mode = %v, want %v", rel, got, mode)
		}
	}
	td := d.TaskDir("web")
	if td.LocalDir != filepath.Join(root, "a1", "web", "local") || td.LogDir != d.LogDir {
		t.Errorf("task dir = %+v", td)
	}
	if err := d.Destroy(); err != nil || d.Exists() {
		t.Fatalf("Destroy: %v", err)
	}
	if err := d.Destroy(); err != nil {
		t.Fatalf("second Destroy: %v", err)
	}
}

func TestBuildRejectsBadTaskNames(t *testing.T) {
	for _, name := range []string{"", "alloc", "..", "a/b"} {
		d := New(t.TempDir(), "a1")
		if err := d.Build([]string{name}); err == nil {
			t.Errorf("task name %q accepted", name)
		}
	}
}

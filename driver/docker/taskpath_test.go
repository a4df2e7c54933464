package docker

import (
	"os"
	"path/filepath"
	"testing"
)

// checkBeneath (openat2) and walkBeneath (its Lstat fallback) agree.
func TestCheckBeneath(t *testing.T) {
	dir := t.TempDir()
	host := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "local/data/sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{"local/root": "/", "local/data/up": host, "local/dangling": filepath.Join(host, "missing"), "local/inside": "data"} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		rel string
		ok  bool
	}{
		{"local/data", true},
		{"local/data/sub", true},
		{"local/data/missing/deeper", true},
		{"./local/data", true},
		{"local/root", false},
		{"local/root/etc", false},
		{"local/data/up/x", false},
		{"local/dangling", false},
		{"local/dangling/new", false},
		{"local/inside", false}, // even a link that stays inside
	} {
		for name, check := range map[string]func(string, string) error{"openat2": checkBeneath, "lstat walk": walkBeneath} {
			if err := check(dir, tc.rel); (err == nil) != tc.ok {
				t.Errorf("%s(%q) = %v, want ok %v", name, tc.rel, err, tc.ok)
			}
		}
	}
	if _, err := os.Lstat(filepath.Join(host, "missing")); err == nil {
		t.Errorf("a check created a host path")
	}
}

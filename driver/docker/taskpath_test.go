package docker

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// A relative volume or bind mount source that leaves the task directory
// through a symlink is not allowed (the walk itself is tested in
// internal/nofollow).
func TestCheckSourcesBeneath(t *testing.T) {
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
		for name, tcfg := range map[string]*taskConfig{
			"volume":     {Volumes: []string{tc.rel + ":/data"}},
			"bind mount": {Mounts: []mountConfig{{Type: "bind", Source: tc.rel, Target: "/data"}}},
		} {
			err := checkSourcesBeneath(dir, tcfg)
			if tc.ok && err != nil || !tc.ok && !errors.Is(err, ErrNotAllowed) {
				t.Errorf("%s of %q: %v, want ok %v", name, tc.rel, err, tc.ok)
			}
		}
	}
	abs := &taskConfig{Volumes: []string{filepath.Join(dir, "local/root") + ":/data"}}
	if err := checkSourcesBeneath(dir, abs); err != nil {
		t.Errorf("an absolute source (left to checkAllowed) was checked: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(host, "missing")); err == nil {
		t.Errorf("a check created a host path")
	}
}

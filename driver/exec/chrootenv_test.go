package exec

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	dt "github.com/meshlet/meshlet/driver/internal/drivertest"
)

// TestChrootEnv: a configured chroot_env replaces the default set: the
// task sees a host directory and a host file at the paths it maps them to,
// read-only; it does not see a default entry left out (/etc, /sbin); a
// missing host path is skipped.
func TestChrootEnv(t *testing.T) {
	requireCgroups(t)
	tools := t.TempDir()
	if err := os.WriteFile(filepath.Join(tools, "marker"), []byte("tool\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(t.TempDir(), "app.conf")
	if err := os.WriteFile(conf, []byte("setting=1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		tools:                   "/opt/tools",
		conf:                    "/etc/app.conf",
		"/no/such/meshlet/path": "/missing",
	}
	for _, p := range []string{"/bin", "/lib", "/lib64", "/usr"} {
		env[p] = p
	}
	d := newDriverWith(t, Config{ChrootEnv: env})
	cfg, _ := startWith(t, d, "root", nil, `cat /opt/tools/marker /etc/app.conf
ls -1 /etc | tr '\n' ' '; echo
for p in /etc/passwd /sbin /missing; do [ -e "$p" ] && echo "visible:$p"; done
touch /opt/tools/x 2>&1; echo done`)
	res := dt.Wait(t, d, cfg.ID)
	out := dt.Log(t, cfg, "stdout")
	if !res.Successful() {
		t.Fatalf("exit %+v:\n%s\nstderr: %s", res, out, dt.Log(t, cfg, "stderr"))
	}
	if !strings.HasPrefix(out, "tool\nsetting=1\napp.conf \n") {
		t.Errorf("mapped entries not seen as configured:\n%s", out)
	}
	if strings.Contains(out, "visible:") {
		t.Errorf("left-out or missing entries visible:\n%s", out)
	}
	if !strings.Contains(out, "Read-only file system") {
		t.Errorf("a chroot_env entry is writable:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(tools, "x")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the task wrote into the host's directory: %v", err)
	}
}

func TestCheckChrootEnv(t *testing.T) {
	tests := []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"/bin": "/bin", "/opt/x": "/usr/local/x", "/etc/hosts": "/etc/hosts"}, ""},
		{nil, ""},
		{map[string]string{"bin": "/bin"}, `"bin" = "/bin": both paths must be absolute`},
		{map[string]string{"/bin": "bin"}, `"/bin" = "bin": both paths must be absolute`},
		{map[string]string{"/": "/host"}, `"/": the host's root cannot be bound into tasks`},
		{map[string]string{"/srv": "/"}, `"/srv" = "/": a task's root is its task directory`},
		{map[string]string{"/srv": "/alloc/srv"}, `the driver mounts /alloc itself`},
		{map[string]string{"/srv": "/proc"}, `the driver mounts /proc itself`},
		{map[string]string{"/srv": "/secrets/"}, `the driver mounts /secrets itself`},
	}
	for _, tc := range tests {
		err := CheckChrootEnv(tc.env)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v", tc.env, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrBadChrootEnv)):
			t.Errorf("%v: %v, want %q", tc.env, err, tc.want)
		}
	}
}

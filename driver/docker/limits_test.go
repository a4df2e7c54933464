package docker_test

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/driver/docker"
	"github.com/meshlet/meshlet/driver/internal/drivertest"
	"github.com/meshlet/meshlet/internal/testutil"
)

// drainTimeout bounds waits in these tests.
const drainTimeout = 10 * time.Second

func TestOOMKilled(t *testing.T) {
	d := newDriver(t, docker.Config{})
	// tail buffers a line without end: /dev/zero grows it until the limit.
	cfg := taskConfig(t, "hog", "tail", "/dev/zero")
	cfg.Resources = &driver.Resources{CPUShares: 100, MemoryMB: 16}
	drivertest.Start(t, d, cfg)
	res := drivertest.Wait(t, d, cfg.ID)
	if !res.OOMKilled || res.Successful() {
		t.Errorf("exit = %+v, want OOMKilled", res)
	}
}

func TestResourcesAndStats(t *testing.T) {
	d := newDriver(t, docker.Config{})
	cfg := taskConfig(t, "limits", "sleep", "300")
	cfg.Resources = &driver.Resources{CPUShares: 250, MemoryMB: 32, MemoryMaxMB: 64}
	drivertest.Start(t, d, cfg)
	c := daemon.Client(t)
	var id string
	testutil.WaitFor(t, drivertest.Timeout, "task pid", func() bool {
		st, err := d.InspectTask(cfg.ID)
		return err == nil && st.PID > 0
	})
	list, err := c.ContainerList(context.Background(), containerByTask(cfg.ID))
	if err != nil || len(list) != 1 {
		t.Fatalf("container of the task: %v, %v", list, err)
	}
	id = list[0].ID
	info, err := c.ContainerInspect(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	hc := info.HostConfig
	if hc.CPUShares != 250 || hc.Memory != 64<<20 || hc.MemoryReservation != 32<<20 || hc.MemorySwap != 64<<20 {
		t.Errorf("resources = shares %d memory %d reservation %d swap %d", hc.CPUShares, hc.Memory, hc.MemoryReservation, hc.MemorySwap)
	}
	if !strings.HasPrefix(info.Name, "/limits-") || info.Config.Labels[docker.LabelTask] != "limits" {
		t.Errorf("name %q labels %v", info.Name, info.Config.Labels)
	}
	u, err := d.TaskStats(context.Background(), cfg.ID)
	if err != nil {
		t.Fatal(err)
	}
	if u.MemoryUsage == 0 || u.Timestamp.IsZero() {
		t.Errorf("stats = %+v, want memory usage", u)
	}
	if err := d.DestroyTask(cfg.ID, false); err == nil {
		t.Error("destroying a running task without force succeeded")
	}
	waitCh, err := d.WaitTask(context.Background(), cfg.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.DestroyTask(cfg.ID, true); err != nil {
		t.Fatal(err)
	}
	select {
	case res := <-waitCh:
		if res == nil || res.ExitCode != 137 {
			t.Errorf("waiter got %+v, want the kill's exit 137", res)
		}
	case <-time.After(drainTimeout):
		t.Error("a waiter got nothing after DestroyTask")
	}
	if _, err := c.ContainerInspect(context.Background(), id); err == nil {
		t.Error("container still exists after DestroyTask")
	}
	if _, err := d.InspectTask(cfg.ID); !errors.Is(err, driver.ErrTaskNotFound) {
		t.Errorf("InspectTask after destroy: %v", err)
	}
}

func TestCapabilities(t *testing.T) {
	d := newDriver(t, docker.Config{})
	cfg := taskConfig(t, "caps", "sh", "-c", "grep CapBnd /proc/self/status")
	cfg.Config["cap_drop"] = []any{"all"}
	cfg.Config["cap_add"] = []any{"chown"}
	drivertest.Start(t, d, cfg)
	drivertest.Wait(t, d, cfg.ID)
	// CAP_CHOWN is bit 0.
	if got := drivertest.Log(t, cfg, "stdout"); !strings.Contains(got, "0000000000000001") {
		t.Errorf("bounding set = %q, want only chown", got)
	}
	cfg = taskConfig(t, "raw", "true")
	cfg.Config["cap_add"] = []any{"net_raw"}
	if _, err := d.StartTask(cfg); !errors.Is(err, docker.ErrNotAllowed) {
		t.Errorf("cap_add net_raw outside allow_caps: %v, want ErrNotAllowed", err)
	}
}

// A missing image is pulled; a pull that fails is a clear error. The
// registry is a closed port on loopback: nothing leaves the host.
func TestImagePullFailure(t *testing.T) {
	d := newDriver(t, docker.Config{})
	cfg := taskConfig(t, "pull", "true")
	cfg.Config["image"] = "127.0.0.1:1/meshlet/missing:1"
	cfg.Config["image_pull_timeout"] = "20s"
	start := time.Now()
	_, err := d.StartTask(cfg)
	if !errors.Is(err, docker.ErrImagePull) || !strings.Contains(err.Error(), "127.0.0.1:1/meshlet/missing:1") {
		t.Errorf("StartTask = %v, want ErrImagePull naming the image", err)
	}
	if time.Since(start) > 20*time.Second {
		t.Errorf("pull took %s", time.Since(start))
	}
	if _, err := d.InspectTask(cfg.ID); !errors.Is(err, driver.ErrTaskNotFound) {
		t.Errorf("a failed start left the task registered: %v", err)
	}
}

func TestTmpfsMountAndEntrypoint(t *testing.T) {
	d := newDriver(t, docker.Config{})
	cfg := taskConfig(t, "tmpfs", "-c", "grep ' /scratch ' /proc/mounts | cut -d' ' -f3; pwd")
	delete(cfg.Config, "command")
	cfg.Config["entrypoint"] = []any{"/bin/sh"}
	cfg.Config["args"] = []any{"-c", "grep ' /scratch ' /proc/mounts; pwd"}
	cfg.Config["work_dir"] = "/tmp"
	cfg.Config["mount"] = []any{map[string]any{"type": "tmpfs", "target": "/scratch", "tmpfs_options": []any{map[string]any{"size": 1 << 20}}}}
	drivertest.Start(t, d, cfg)
	if res := drivertest.Wait(t, d, cfg.ID); !res.Successful() {
		t.Fatalf("exit = %+v, stderr %q", res, drivertest.Log(t, cfg, "stderr"))
	}
	got := drivertest.Log(t, cfg, "stdout")
	if !strings.Contains(got, "tmpfs /scratch tmpfs") || !strings.Contains(got, "size=1024k") || !strings.HasSuffix(got, "/tmp\n") {
		t.Errorf("stdout = %q, want a 1 MiB tmpfs at /scratch and cwd /tmp", got)
	}
}

// The auth block reaches the registry: a fake one on loopback asks for
// basic auth and records what it gets; the pull then fails (no image) with
// ErrImagePull.
func TestImagePullAuth(t *testing.T) {
	d := newDriver(t, docker.Config{})
	var mu sync.Mutex
	var seen []string
	reg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		if r.Header.Get("Authorization") == "" {
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		http.NotFound(w, r)
	}))
	defer reg.Close()
	cfg := taskConfig(t, "auth", "true")
	cfg.Config["image"] = strings.TrimPrefix(reg.URL, "http://") + "/meshlet/private:1"
	cfg.Config["auth"] = []any{map[string]any{"username": "u", "password": "p"}}
	if _, err := d.StartTask(cfg); !errors.Is(err, docker.ErrImagePull) {
		t.Errorf("StartTask = %v, want ErrImagePull", err)
	}
	want := "Basic " + base64.StdEncoding.EncodeToString([]byte("u:p"))
	mu.Lock()
	defer mu.Unlock()
	if !slices.Contains(seen, want) {
		t.Errorf("registry saw Authorization %q, want %q among them", seen, want)
	}
}

// A relative volume lies in the task directory (always allowed); a host
// path needs volumes { enabled = true }.
func TestVolumes(t *testing.T) {
	host := t.TempDir()
	if err := os.WriteFile(filepath.Join(host, "f"), []byte("from-host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := newDriver(t, docker.Config{VolumesEnabled: true})
	cfg := taskConfig(t, "vols", "sh", "-c", "cat /host/f; echo x > /host/g 2>/dev/null || echo read-only; echo in-task > /data/out")
	cfg.Config["volumes"] = []any{host + ":/host:ro", "data:/data"}
	drivertest.Start(t, d, cfg)
	if res := drivertest.Wait(t, d, cfg.ID); !res.Successful() {
		t.Fatalf("exit = %+v, stderr %q", res, drivertest.Log(t, cfg, "stderr"))
	}
	if got := drivertest.Log(t, cfg, "stdout"); got != "from-host\nread-only\n" {
		t.Errorf("stdout = %q", got)
	}
	if b, err := os.ReadFile(filepath.Join(cfg.TaskDir, "data", "out")); err != nil || string(b) != "in-task\n" {
		t.Errorf("task dir data/out = %q, %v", b, err)
	}
	off := newDriver(t, docker.Config{})
	cfg = taskConfig(t, "novols", "true")
	cfg.Config["volumes"] = []any{"data:/data"}
	drivertest.Start(t, off, cfg)
	if res := drivertest.Wait(t, off, cfg.ID); !res.Successful() {
		t.Errorf("relative volume without volumes enabled: %+v", res)
	}
}

// Without volumes { enabled } a relative source must stay in the task
// directory: a symlink the task planted there on an earlier run (it can
// write local/) must not bind a host path.
func TestVolumesRefuseLinkInTaskDir(t *testing.T) {
	host := t.TempDir()
	if err := os.WriteFile(filepath.Join(host, "f"), []byte("host-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := newDriver(t, docker.Config{})
	for _, tc := range []struct {
		name string
		link string // below the task dir, pointing at host
		edit func(map[string]any)
	}{
		{"volume", "local/data", func(m map[string]any) { m["volumes"] = []any{"local/data:/data"} }},
		{"volume below a link", "local/data", func(m map[string]any) { m["volumes"] = []any{"local/data/f:/f"} }},
		{"dangling link", "local/data", func(m map[string]any) { m["volumes"] = []any{"local/data/new:/new"} }},
		{"bind mount", "local/data", func(m map[string]any) {
			m["mount"] = []any{map[string]any{"type": "bind", "source": "local/data", "target": "/data"}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := taskConfig(t, "planted", "cat", "/data/f", "/f")
			target := host
			if tc.name == "dangling link" {
				target = filepath.Join(host, "missing")
			}
			if err := os.Symlink(target, filepath.Join(cfg.TaskDir, tc.link)); err != nil {
				t.Fatal(err)
			}
			tc.edit(cfg.Config)
			_, err := d.StartTask(cfg)
			if err == nil {
				t.Cleanup(func() { _ = d.DestroyTask(cfg.ID, true) })
				drivertest.Wait(t, d, cfg.ID)
				t.Fatalf("StartTask succeeded, stdout %q", drivertest.Log(t, cfg, "stdout"))
			}
			if !errors.Is(err, docker.ErrNotAllowed) || !strings.Contains(err.Error(), "symlink") {
				t.Errorf("StartTask = %v, want %v naming the symlink", err, docker.ErrNotAllowed)
			}
			if _, err := os.Lstat(filepath.Join(host, "missing")); err == nil {
				t.Errorf("a host path was created through the link")
			}
		})
	}
}

package exec

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/meshlet/meshlet/driver"
	dt "github.com/meshlet/meshlet/driver/internal/drivertest"
	"github.com/meshlet/meshlet/driver/internal/isolate"
)

// Capability bits used below.
const (
	capChown  = 1 << 0
	capNetRaw = 1 << 13
)

// startWith starts sh -c script as an exec task with extra driver config
// keys (cap_add, pid_mode, ...) and user ("" = the default).
func startWith(t *testing.T, d *Driver, userName string, extra map[string]any, script string) (*driver.TaskConfig, *driver.TaskHandle) {
	t.Helper()
	cfg := dt.TaskConfig(t, "caps", "sh", "-c", script)
	cfg.User = userName
	for k, v := range extra {
		cfg.Config[k] = v
	}
	return cfg, dt.Start(t, d, cfg)
}

// capFields reads the capability sets of a /proc/<pid>/status dump.
func capFields(t *testing.T, status string) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	for _, f := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
		v, err := strconv.ParseUint(statusField(t, status, f), 16, 64)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out[f] = v
	}
	return out
}

// checkCaps compares the sets; want lists every set (zero included).
func checkCaps(t *testing.T, what, status string, want map[string]uint64) {
	t.Helper()
	got := capFields(t, status)
	for f, w := range want {
		if got[f] != w {
			t.Errorf("%s: %s = %x, want %x", what, f, got[f], w)
		}
	}
}

// sets is the expected CapInh/CapPrm/CapEff/CapBnd/CapAmb of a task:
// root holds its bounding set; another user only its ambient set.
func sets(bnd, amb uint64, root bool) map[string]uint64 {
	if root {
		return map[string]uint64{"CapInh": 0, "CapPrm": bnd, "CapEff": bnd, "CapBnd": bnd, "CapAmb": 0}
	}
	return map[string]uint64{"CapInh": amb, "CapPrm": amb, "CapEff": amb, "CapBnd": bnd, "CapAmb": amb}
}

// TestIsolatedCaps: cap_add and cap_drop shape what a root task and a
// nobody task hold, as the task and as an alloc exec into it see it, also
// after the driver recovered the task. An added capability is ambient
// (and so effective) for nobody.
func TestIsolatedCaps(t *testing.T) {
	requireCgroups(t)
	stateDir := t.TempDir()
	allow := append(DefaultCaps(), "net_raw")
	d := newDriverWith(t, Config{StateDir: stateDir, AllowCaps: allow})
	tests := []struct {
		name     string
		user     string
		add      []any
		drop     []any
		bnd, amb uint64
	}{
		{name: "root default", user: "root", bnd: rootCapMask},
		{name: "root add net_raw", user: "root", add: []any{"net_raw"}, bnd: rootCapMask | capNetRaw},
		{name: "nobody add net_raw", add: []any{"CAP_NET_RAW"}, bnd: rootCapMask | capNetRaw, amb: capNetRaw},
		{name: "root drop all", user: "root", drop: []any{"all"}},
		{name: "nobody drop all", drop: []any{"ALL"}},
		{name: "nobody drop all add chown", drop: []any{"all"}, add: []any{"chown"}, bnd: capChown, amb: capChown},
		{name: "root drop chown", user: "root", drop: []any{"chown"}, bnd: rootCapMask &^ capChown},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			extra := map[string]any{}
			if tc.add != nil {
				extra["cap_add"] = tc.add
			}
			if tc.drop != nil {
				extra["cap_drop"] = tc.drop
			}
			cfg, handle := startWith(t, d, tc.user, extra, "cat /proc/self/status; echo ready; sleep 60")
			dt.WaitLog(t, cfg, "ready")
			want := sets(tc.bnd, tc.amb, tc.user == "root")
			checkCaps(t, "task", dt.Log(t, cfg, "stdout"), want)
			res, err := d.ExecTask(cfg.ID, []string{"cat", "/proc/self/status"}, dt.Timeout)
			if err != nil || res.ExitCode != 0 {
				t.Fatalf("exec: %+v, %v", res, err)
			}
			checkCaps(t, "exec", string(res.Stdout), want)
			if tc.user == "" && tc.drop != nil {
				checkRecoveredExec(t, stateDir, handle, want)
			}
		})
	}
}

// checkRecoveredExec recovers the running task in a new driver (an agent
// restart) from its persisted handle and checks that an exec session
// still gets the task's sets.
func checkRecoveredExec(t *testing.T, stateDir string, handle *driver.TaskHandle, want map[string]uint64) {
	t.Helper()
	raw, err := json.Marshal(handle)
	if err != nil {
		t.Fatal(err)
	}
	var reloaded driver.TaskHandle
	if err := json.Unmarshal(raw, &reloaded); err != nil {
		t.Fatal(err)
	}
	a := newDriverWith(t, Config{StateDir: stateDir, AllowCaps: append(DefaultCaps(), "net_raw")})
	if err := a.RecoverTask(&reloaded); err != nil {
		t.Fatalf("RecoverTask: %v", err)
	}
	res, err := a.ExecTask(handle.Config.ID, []string{"cat", "/proc/self/status"}, dt.Timeout)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec after recovery: %+v, %v", res, err)
	}
	checkCaps(t, "exec after recovery", string(res.Stdout), want)
}

// TestIsolatedAmbientCapWorks: the ambient capability is usable: nobody
// can chown a file to root only when the task adds chown.
func TestIsolatedAmbientCapWorks(t *testing.T) {
	requireCgroups(t)
	d := newDriver(t)
	const script = "touch /tmp/f && chown 0:0 /tmp/f && echo chowned"
	for _, tc := range []struct {
		add  []any
		want bool
	}{{nil, false}, {[]any{"chown"}, true}} {
		extra := map[string]any{}
		if tc.add != nil {
			extra["cap_add"] = tc.add
		}
		cfg, _ := startWith(t, d, "", extra, script)
		res := dt.Wait(t, d, cfg.ID)
		out := dt.Log(t, cfg, "stdout")
		if got := strings.Contains(out, "chowned"); got != tc.want || res.Successful() != tc.want {
			t.Errorf("cap_add %v: exit %+v, stdout %q, stderr %q", tc.add, res, out, dt.Log(t, cfg, "stderr"))
		}
	}
}

// TestAllowCapsRefusal: a cap_add outside allow_caps (by default Nomad's
// list) fails the start with Nomad's message naming the capability, and
// leaves nothing running; an unknown name is refused too.
func TestAllowCapsRefusal(t *testing.T) {
	requireCgroups(t)
	d := newDriver(t)
	for _, tc := range []struct {
		add     []any
		want    string
		wantErr error
	}{
		{[]any{"net_raw", "kill"}, "driver does not allow the following capabilities: net_raw", isolate.ErrCapNotAllowed},
		{[]any{"SYS_ADMIN"}, "driver does not allow the following capabilities: sys_admin", isolate.ErrCapNotAllowed},
		{[]any{"warp_drive"}, "cap_add configured with capabilities not supported by system: warp_drive", ErrUnknownCap},
	} {
		cfg := dt.TaskConfig(t, "refused", "sh", "-c", "echo started")
		cfg.Config["cap_add"] = tc.add
		_, err := d.StartTask(cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, tc.wantErr) || !errors.Is(err, driver.ErrUnrecoverable) {
			t.Errorf("cap_add %v: %v, want %q, unrecoverable", tc.add, err, tc.want)
		}
		if _, err := d.InspectTask(cfg.ID); !errors.Is(err, driver.ErrTaskNotFound) {
			t.Errorf("a refused task is known: %v", err)
		}
	}
}

// TestInvalidConfig: a driver built with a bad Config is unhealthy, says
// why, and refuses tasks.
func TestInvalidConfig(t *testing.T) {
	d := newDriverWith(t, Config{AllowCaps: []string{"kill", "teleport"}, ChrootEnv: map[string]string{"bin": "/bin"}, DefaultPIDMode: "shared"})
	fp, err := d.Fingerprint(context.Background())
	if err != nil || fp.Healthy {
		t.Fatalf("fingerprint %+v, %v", fp, err)
	}
	for _, want := range []string{"allow_caps configured with capabilities not supported by system: teleport",
		`invalid chroot_env: "bin" = "/bin": both paths must be absolute`, `default_pid_mode must be "private" or "host", got "shared"`} {
		if !strings.Contains(fp.HealthDescription, want) {
			t.Errorf("health %q lacks %q", fp.HealthDescription, want)
		}
	}
	cfg := dt.TaskConfig(t, "never", "true")
	if _, err := d.StartTask(cfg); !errors.Is(err, driver.ErrUnrecoverable) || !strings.Contains(err.Error(), "teleport") {
		t.Fatalf("StartTask: %v, want an unrecoverable error naming teleport", err)
	}
}

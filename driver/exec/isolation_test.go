package exec

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/driver"
	dt "github.com/meshlet/meshlet/driver/internal/drivertest"
)

// Nomad's default exec allow-list as a CapBnd mask (audit_write, chown,
// dac_override, fowner, fsetid, kill, mknod, net_bind_service, setfcap,
// setgid, setpcap, setuid, sys_chroot).
const rootCapMask = 1<<29 | 1<<0 | 1<<1 | 1<<3 | 1<<4 | 1<<5 | 1<<27 | 1<<10 | 1<<31 | 1<<6 | 1<<8 | 1<<7 | 1<<18

// runScript runs sh -c script as an exec task (user "" = the default) and
// returns its stdout once it exited.
func runScript(t *testing.T, d *Driver, userName, script string) (string, *driver.ExitResult) {
	t.Helper()
	cfg := dt.TaskConfig(t, "iso", "sh", "-c", script)
	cfg.User = userName
	dt.Start(t, d, cfg)
	res := dt.Wait(t, d, cfg.ID)
	return dt.Log(t, cfg, "stdout"), res
}

// statusField returns a /proc/<pid>/status field from a dump of it.
func statusField(t *testing.T, status, field string) string {
	t.Helper()
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	t.Fatalf("no %s in:\n%s", field, status)
	return ""
}

// TestIsolatedFilesystem: the task sees its chroot, not the host: no
// /root, no agent state, the host's dirs read-only.
func TestIsolatedFilesystem(t *testing.T) {
	requireCgroups(t)
	stateDir := t.TempDir()
	d := newDriverIn(t, stateDir)
	script := fmt.Sprintf(`ls -1a / | tr '\n' ' '; echo
for p in /root %s %s /proc/1/root/root /proc/1/cwd/root; do [ -e "$p" ] && echo "visible:$p"; done
touch /usr/meshlet-probe 2>&1; touch /etc/meshlet-probe 2>&1
echo data > /alloc/shared && echo alloc-ok
echo data > /probe && echo root-ok
cat /proc/self/mountinfo | grep -c . >/dev/null && echo proc-ok
echo x > /dev/null && head -c 4 /dev/urandom | wc -c`, stateDir, filepath.Dir(stateDir))
	out, res := runScript(t, d, "root", script)
	if !res.Successful() {
		t.Fatalf("exit %+v:\n%s", res, out)
	}
	lines := strings.Split(out, "\n")
	for _, want := range []string{"alloc", "bin", "dev", "etc", "proc", "tmp", "usr"} {
		if !strings.Contains(" "+lines[0], " "+want+" ") {
			t.Errorf("/ lacks %s: %q", want, lines[0])
		}
	}
	for _, host := range []string{"root", "work", "var", "home", "boot"} {
		if strings.Contains(" "+lines[0], " "+host+" ") {
			t.Errorf("/ shows the host's %s: %q", host, lines[0])
		}
	}
	if strings.Contains(out, "visible:") {
		t.Errorf("host paths visible:\n%s", out)
	}
	if n := strings.Count(out, "Read-only file system"); n != 2 {
		t.Errorf("writes to /usr and /etc: want 2 EROFS, got:\n%s", out)
	}
	for _, want := range []string{"alloc-ok", "root-ok", "proc-ok", "\n4\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	for _, p := range []string{"/usr/meshlet-probe", "/etc/meshlet-probe"} {
		if _, err := os.Stat(p); err == nil {
			os.Remove(p)
			t.Errorf("task wrote %s on the host", p)
		}
	}
}

// TestIsolatedProcesses: the task runs under its executor (PID 1 of the
// namespace; its threads take the next PIDs) and sees no host process;
// orphans are reaped and killed with the task.
func TestIsolatedProcesses(t *testing.T) {
	requireCgroups(t)
	d := newDriver(t)
	script := `echo pid=$$ init=$(grep -c '^Name:.*exec.test' /proc/1/status)
(sh -c 'exit 0' &); sleep 0.3
echo zombies=$(grep -l '^State:.*Z' /proc/[0-9]*/status 2>/dev/null | wc -l)
echo pids=$(ls /proc | grep -E '^[0-9]+$' | tr '\n' ' ')
sleep 301.25 &
exit 3`
	start := time.Now()
	out, res := runScript(t, d, "", script)
	if res.ExitCode != 3 || res.Signal != 0 {
		t.Fatalf("exit %+v, want code 3:\n%s", res, out)
	}
	var pid, init int
	if _, err := fmt.Sscanf(out, "pid=%d init=%d\n", &pid, &init); err != nil || pid <= 1 || pid > 50 || init != 1 {
		t.Fatalf("want a small task pid under the executor as PID 1:\n%s", out)
	}
	if !strings.Contains(out, "zombies=0\n") {
		t.Fatalf("zombies left:\n%s", out)
	}
	pids := strings.Fields(strings.TrimPrefix(out[strings.Index(out, "pids="):], "pids="))
	for _, p := range pids {
		if n, _ := strconv.Atoi(p); n > 50 || n == os.Getpid() {
			t.Errorf("task sees pid %d (host pids: %v)", n, pids)
		}
	}
	if len(pids) < 2 || pids[0] != "1" {
		t.Errorf("pids %v, want 1 (executor), the task, ...", pids)
	}
	if time.Since(start) > 10*time.Second {
		t.Errorf("exit took %s: the background sleep held it", time.Since(start))
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && strings.Contains(string(b), "301.25") {
			t.Errorf("orphan %s survived its task: %q", e.Name(), b)
		}
	}
}

// TestIsolatedUserAndPrivileges: nobody by default, the task's user when
// set; no_new_privs; no capabilities but the allow-list for root.
func TestIsolatedUserAndPrivileges(t *testing.T) {
	requireCgroups(t)
	d := newDriver(t)
	daemon, err := user.Lookup("daemon")
	if err != nil {
		t.Skipf("no daemon user: %v", err)
	}
	tests := []struct {
		user, uid string
		capEff    uint64
	}{
		{"", "65534", 0},
		{"daemon", daemon.Uid, 0},
		{"root", "0", rootCapMask},
	}
	for _, tc := range tests {
		t.Run("user="+tc.user, func(t *testing.T) {
			out, res := runScript(t, d, tc.user, "cat /proc/self/status; touch /local-probe && echo wrote")
			if !res.Successful() {
				t.Fatalf("exit %+v:\n%s", res, out)
			}
			if got := statusField(t, out, "Uid"); got != strings.Repeat(tc.uid+" ", 3)+tc.uid {
				t.Errorf("Uid %q, want %s", got, tc.uid)
			}
			if got := statusField(t, out, "NoNewPrivs"); got != "1" {
				t.Errorf("NoNewPrivs %q", got)
			}
			for field, want := range map[string]uint64{"CapEff": tc.capEff, "CapPrm": tc.capEff, "CapBnd": rootCapMask, "CapInh": 0, "CapAmb": 0} {
				got, err := strconv.ParseUint(statusField(t, out, field), 16, 64)
				if err != nil || got != want {
					t.Errorf("%s = %x, want %x", field, got, want)
				}
			}
			if !strings.Contains(out, "wrote") {
				t.Errorf("the task's user cannot write its task dir:\n%s", out)
			}
		})
	}
}

// TestIsolatedEnvDirs: NOMAD_*_DIR name the directories inside the root,
// and local/ is writable by the default user.
func TestIsolatedEnvDirs(t *testing.T) {
	requireCgroups(t)
	d := newDriver(t)
	cfg := dt.TaskConfig(t, "env", "sh", "-c", `echo "$NOMAD_TASK_DIR $NOMAD_SECRETS_DIR $NOMAD_ALLOC_DIR"; echo hi > "$NOMAD_TASK_DIR/f"; ls "$NOMAD_SECRETS_DIR" >/dev/null && echo secrets-ok`)
	for _, sub := range []string{"local", "secrets"} {
		if err := os.Mkdir(filepath.Join(cfg.TaskDir, sub), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	cfg.Env["NOMAD_TASK_DIR"] = filepath.Join(cfg.TaskDir, "local")
	cfg.Env["NOMAD_SECRETS_DIR"] = filepath.Join(cfg.TaskDir, "secrets")
	cfg.Env["NOMAD_ALLOC_DIR"] = cfg.AllocDir
	dt.Start(t, d, cfg)
	if res := dt.Wait(t, d, cfg.ID); !res.Successful() {
		t.Fatalf("exit %+v: %s", res, dt.Log(t, cfg, "stderr"))
	}
	if out := dt.Log(t, cfg, "stdout"); out != "/local /secrets /alloc\nsecrets-ok\n" {
		t.Fatalf("stdout %q", out)
	}
	if b, err := os.ReadFile(filepath.Join(cfg.TaskDir, "local", "f")); err != nil || string(b) != "hi\n" {
		t.Fatalf("local/f: %q, %v", b, err)
	}
}

// TestIsolatedSignals: SignalTask reaches the task (not PID 1 of its
// namespace, so default dispositions apply); StopTask's SIGTERM ends it
// with the signal reported as before.
func TestIsolatedSignals(t *testing.T) {
	requireCgroups(t)
	d := newDriver(t)
	cfg := dt.TaskConfig(t, "sig", "sh", "-c", `trap 'echo got-usr1' USR1; echo ready; while :; do sleep 0.05; done`)
	dt.Start(t, d, cfg)
	dt.WaitLog(t, cfg, "ready")
	if err := d.SignalTask(cfg.ID, "SIGUSR1"); err != nil {
		t.Fatal(err)
	}
	dt.WaitLog(t, cfg, "got-usr1")
	if err := d.StopTask(cfg.ID, dt.Timeout, "SIGTERM"); err != nil {
		t.Fatal(err)
	}
	res := dt.Wait(t, d, cfg.ID)
	if res.Signal != 15 || res.ExitCode != 143 {
		t.Fatalf("exit %+v, want SIGTERM", res)
	}
}

// TestIsolatedExec: alloc exec lands in the task's root, PID namespace,
// user and privileges, and can run on a terminal.
func TestIsolatedExec(t *testing.T) {
	requireCgroups(t)
	d := newDriver(t)
	cfg := dt.TaskConfig(t, "target", "sh", "-c", "echo marker > /tmp/seen; echo ready; sleep 60")
	dt.Start(t, d, cfg)
	dt.WaitLog(t, cfg, "ready")
	checkExecView(t, d, cfg.ID)
	dt.CheckTTYExec(t, d, cfg.ID)
}

// checkExecView runs an exec session in task id and checks what it sees.
func checkExecView(t *testing.T, d *Driver, id string) {
	t.Helper()
	res, err := d.ExecTask(id, []string{"sh", "-c", "cat /tmp/seen; for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done | grep -c 'ready; slee[p] 60'; cat /proc/self/status; touch /usr/x"}, dt.Timeout)
	if err != nil {
		t.Fatal(err)
	}
	out := string(res.Stdout)
	if res.ExitCode == 0 || !strings.Contains(string(res.Stderr), "Read-only file system") {
		t.Errorf("touch /usr/x: code %d, stderr %q", res.ExitCode, res.Stderr)
	}
	if !strings.HasPrefix(out, "marker\n1\n") {
		t.Errorf("exec does not see the task's files and processes:\n%s", out)
	}
	if got := statusField(t, out, "Uid"); got != "65534 65534 65534 65534" {
		t.Errorf("exec Uid %q", got)
	}
	if statusField(t, out, "NoNewPrivs") != "1" || statusField(t, out, "CapEff") != "0000000000000000" {
		t.Errorf("exec privileges:\n%s", out)
	}
	var buf strings.Builder
	code, err := d.ExecTaskStreaming(context.Background(), id, &driver.ExecOptions{
		Command: []string{"cat", "/tmp/seen"}, Stdout: &buf,
	})
	if err != nil || code != 0 || buf.String() != "marker\n" {
		t.Errorf("streaming exec: %d, %v, %q", code, err, buf.String())
	}
	if _, err := d.ExecTask(id, []string{"no-such-binary-meshlet"}, dt.Timeout); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("missing command: %v", err)
	}
}

// TestIsolatedRecovery: after a simulated agent restart the new driver
// re-attaches, samples, execs into and stops the isolated task.
func TestIsolatedRecovery(t *testing.T) {
	requireCgroups(t)
	stateDir := t.TempDir()
	a := newDriverIn(t, stateDir)
	cfg := dt.TaskConfig(t, "survivor", "sh", "-c", "echo marker > /tmp/seen; echo ready; sleep 60")
	handle, err := a.StartTask(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dt.WaitLog(t, cfg, "ready")
	raw, err := json.Marshal(handle)
	if err != nil {
		t.Fatal(err)
	}
	b := newDriverIn(t, stateDir)
	var reloaded driver.TaskHandle
	if err := json.Unmarshal(raw, &reloaded); err != nil {
		t.Fatal(err)
	}
	if err := b.RecoverTask(&reloaded); err != nil {
		t.Fatalf("RecoverTask: %v", err)
	}
	t.Cleanup(func() { _ = b.DestroyTask(cfg.ID, true) })
	if u, err := b.TaskStats(context.Background(), cfg.ID); err != nil || len(u.PIDs) == 0 {
		t.Fatalf("stats after recovery: %+v, %v", u, err)
	}
	checkExecView(t, b, cfg.ID)
	if err := b.StopTask(cfg.ID, dt.Timeout, ""); err != nil {
		t.Fatal(err)
	}
	if res := dt.Wait(t, b, cfg.ID); res.Signal != 15 {
		t.Fatalf("exit %+v, want SIGTERM", res)
	}
}

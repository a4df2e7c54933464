package exec

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	dt "github.com/meshlet/meshlet/driver/internal/drivertest"
)

// modesScript reports the task's PID and namespaces, whether it sees the
// test process, leaves an orphan behind and runs until /tmp/stop exists.
func modesScript() string {
	return fmt.Sprintf(`echo pid=$$
echo ipc=$(readlink /proc/self/ns/ipc) pidns=$(readlink /proc/self/ns/pid)
[ -d /proc/%d ] && echo sees-host
(sleep 302.75 &)
echo ready
while [ ! -e /tmp/stop ]; do sleep 0.05; done`, os.Getpid())
}

// TestIsolatedHostModes: pid_mode and ipc_mode "host" share the host's
// namespaces (task, exec session); "private" and the driver's defaults
// choose as in Nomad. A host-PID task's orphans still die with it.
func TestIsolatedHostModes(t *testing.T) {
	requireCgroups(t)
	// This thread's: the process's main thread may be one an exec session
	// left in a task's namespaces (isolate.StartInTask).
	hostIPC, err1 := os.Readlink("/proc/thread-self/ns/ipc")
	hostPID, err2 := os.Readlink("/proc/thread-self/ns/pid")
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	tests := []struct {
		name             string
		cfg              Config
		extra            map[string]any
		wantPID, wantIPC bool // shares the host's
	}{
		{name: "task modes host", extra: map[string]any{"pid_mode": "host", "ipc_mode": "host"}, wantPID: true, wantIPC: true},
		{name: "defaults private", wantPID: false, wantIPC: false},
		{name: "driver defaults host", cfg: Config{DefaultPIDMode: "host", DefaultIPCMode: "host"}, wantPID: true, wantIPC: true},
		{name: "task overrides defaults", cfg: Config{DefaultPIDMode: "host", DefaultIPCMode: "host"},
			extra: map[string]any{"pid_mode": "private"}, wantPID: false, wantIPC: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := newDriverWith(t, tc.cfg)
			cfg, _ := startWith(t, d, "", tc.extra, modesScript())
			dt.WaitLog(t, cfg, "ready")
			out := dt.Log(t, cfg, "stdout")
			st, err := d.InspectTask(cfg.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Contains(out, "pid="+strconv.Itoa(st.PID)+"\n"); got != tc.wantPID {
				t.Errorf("task PID is the host's %v, want %v:\n%s", got, tc.wantPID, out)
			}
			if got := strings.Contains(out, "sees-host"); got != tc.wantPID {
				t.Errorf("task sees host processes %v, want %v:\n%s", got, tc.wantPID, out)
			}
			if got := strings.Contains(out, "pidns="+hostPID); got != tc.wantPID {
				t.Errorf("PID namespace shared %v, want %v:\n%s", got, tc.wantPID, out)
			}
			if got := strings.Contains(out, "ipc="+hostIPC); got != tc.wantIPC {
				t.Errorf("IPC namespace shared %v, want %v:\n%s", got, tc.wantIPC, out)
			}
			res, err := d.ExecTask(cfg.ID, []string{"sh", "-c", "readlink /proc/self/ns/pid /proc/self/ns/ipc; touch /tmp/stop"}, dt.Timeout)
			if err != nil || res.ExitCode != 0 {
				t.Fatalf("exec: %+v, %v", res, err)
			}
			if got := string(res.Stdout) == hostPID+"\n"+hostIPC+"\n"; got != (tc.wantPID && tc.wantIPC) {
				t.Errorf("exec namespaces %q (host %s %s)", res.Stdout, hostPID, hostIPC)
			}
			if r := dt.Wait(t, d, cfg.ID); !r.Successful() {
				t.Fatalf("exit %+v: %s", r, dt.Log(t, cfg, "stderr"))
			}
			checkNoOrphan(t, "302.75")
		})
	}
}

// checkNoOrphan fails if a process whose command line holds marker lives.
func checkNoOrphan(t *testing.T, marker string) {
	t.Helper()
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !strings.Contains(string(b), marker) {
			continue
		}
		if st, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err == nil && strings.Contains(string(st), ") Z ") {
			continue
		}
		t.Errorf("orphan %s survived its task: %q", e.Name(), b)
	}
}

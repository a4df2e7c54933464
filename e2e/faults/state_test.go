package faults

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshlet/meshlet/e2e/framework"
)

// taskPID finds the process of allocation allocID by its NOMAD_ALLOC_ID.
func taskPID(t *testing.T, allocID string) int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	want := []byte("NOMAD_ALLOC_ID=" + allocID + "\x00")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err == nil && bytes.Contains(env, want) {
			cmd, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			if bytes.Contains(cmd, []byte("demo-app")) {
				return pid
			}
		}
	}
	t.Fatalf("no task process of allocation %s", allocID)
	return 0
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// stateFault damages one state file of a stopped agent.
type stateFault struct {
	name  string
	file  string // relative to the data dir
	apply func(path string) error
}

func truncateFile(path string) error { return os.Truncate(path, 0) }
func removeFile(path string) error   { return os.Remove(path) }

// scribble overwrites everything after the first 8 KiB (bbolt's two meta
// pages) with random bytes: the pages the tree lives in.
func scribble(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if fi.Size() <= 8192 {
		return fmt.Errorf("%s is only %d bytes", path, fi.Size())
	}
	junk := make([]byte, fi.Size()-8192)
	_, _ = rand.Read(junk)
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.WriteAt(junk, 8192)
	return err
}

func garbage(path string) error { return os.WriteFile(path, []byte("{\"not\": valid"), 0o600) }

// TestLostOrCorruptStateRefusesToStart damages each state file in turn:
// the agent must refuse to start with an error naming the file, must not
// replace the file with fresh state, and must leave the running workload
// alone; with the file restored it starts and takes the workload back.
func TestLostOrCorruptStateRefusesToStart(t *testing.T) {
	a := framework.NewAgent(t, framework.Options{})
	stateDir := filepath.Join(a.DataDir, "data")
	job := a.RunJob("input/host.hcl")
	alloc := a.RunningAllocs(job, 1)[0]
	pid := taskPID(t, alloc.ID)
	// An intention, so that the mesh state (in etcd, beside the
	// scheduler's: the server state faults cover it) holds something to lose.
	a.MustCLI("intention", "create", "-deny", "faults-a", "faults-b")
	a.Interrupt()

	faults := []stateFault{
		{"empty server state", "server/etcd/member/snap/db", truncateFile},
		{"corrupt server pages", "server/etcd/member/snap/db", scribble},
		{"deleted server state", "server/etcd/member/snap/db", removeFile},
		{"empty client state", "client/state.db", truncateFile},
		{"deleted client state", "client/state.db", removeFile},
		{"garbage client state", "client/state.db", garbage},
	}
	handled := 0
	defer func() {
		figure(t, "state_faults", float64(len(faults)))
		figure(t, "state_faults_refused_clearly", float64(handled))
	}()
	for _, f := range faults {
		if !alive(pid) {
			t.Fatalf("the workload (pid %d) is gone; the remaining faults cannot be judged", pid)
		}
		t.Run(f.name, func(t *testing.T) {
			refuseDamaged(t, a, filepath.Join(stateDir, f.file), f, pid)
			if !t.Failed() {
				handled++
			}
		})
	}

	a.Restart()
	a.RunningAllocs(job, 1)
	if now := taskPID(t, alloc.ID); now != pid {
		t.Errorf("task pid after recovery = %d, want the original %d (reattached, not restarted)", now, pid)
	}
	if r := a.CLI("intention", "check", "faults-a", "faults-b"); r.Code != 1 {
		t.Errorf("intention check after recovery: exit %d (%s), want 1: the deny intention survived", r.Code, r.Stdout)
	}
}

// refuseDamaged damages path with f, expects the stopped agent to refuse to
// start with an error naming the file, leaving the damaged file as it is
// and the workload pid running, then puts the good file back.
func refuseDamaged(t *testing.T, a *framework.Agent, path string, f stateFault, pid int) {
	t.Helper()
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("state file %s: %v", f.file, err)
	}
	defer func() {
		if err := os.WriteFile(path, good, 0o600); err != nil {
			t.Fatalf("failed to restore %s: %v", path, err)
		}
	}()
	if err := f.apply(path); err != nil {
		t.Fatalf("failed to damage %s: %v", path, err)
	}
	damaged, _ := os.ReadFile(path)
	code, out, refused := a.StartFailure(30 * time.Second)
	if !refused {
		t.Errorf("the agent started on %s instead of refusing:\n%s", f.name, lastLines(out, 15))
	} else if code == 0 {
		t.Errorf("agent exited 0 on %s", f.name)
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "Error:") {
			t.Logf("%s", l)
		}
	}
	if !strings.Contains(out, filepath.Base(f.file)) {
		t.Errorf("the error does not name %s:\n%s", f.file, lastLines(out, 15))
	}
	if strings.Contains(out, "goroutine ") && strings.Contains(out, ".go:") {
		t.Errorf("the agent crashed with a stack trace instead of giving an error:\n%s", lastLines(out, 30))
	}
	now, statErr := os.ReadFile(path)
	if !bytes.Equal(now, damaged) || (errors.Is(statErr, os.ErrNotExist) != (damaged == nil)) {
		t.Errorf("the agent replaced the damaged %s with new state instead of refusing", f.file)
	}
	if !alive(pid) {
		t.Fatalf("the workload (pid %d) was killed by a start on %s", pid, f.name)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// TestFullDisk puts the agent's data dir on a small tmpfs and fills it:
// writes fail with a clear error, nothing stored is lost, reads and the
// running workload carry on, and once space is freed writes work again.
func TestFullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("TestFullDisk needs root (it mounts a tmpfs)")
	}
	mnt, err := os.MkdirTemp("", "mlf")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v: %s", err, out)
	}
	// Registered before the agent: cleanups run last-in first-out, so the
	// agent and its jobs are gone before the unmount.
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", mnt, err, out)
		}
		_ = os.Remove(mnt)
	})
	a := framework.NewAgent(t, framework.Options{StateDir: filepath.Join(mnt, "d")})
	job := a.RunJob("input/host.hcl")
	alloc := a.RunningAllocs(job, 1)[0]
	pid := taskPID(t, alloc.ID)
	a.MustCLI("intention", "create", "-deny", "faults-a", "faults-b")

	filler := filepath.Join(mnt, "filler")
	fill(t, filler)
	big := bigJob(t)

	r := a.CLI("job", "run", big)
	figure(t, "fulldisk_write_refused", b2f(r.Code != 0))
	figure(t, "fulldisk_error_says_disk_full", b2f(strings.Contains(r.Stderr+r.Stdout, "no space left on device")))
	if r.Code == 0 {
		t.Fatalf("job run on a full disk succeeded:\n%s", r.Stdout)
	}
	if !strings.Contains(r.Stderr+r.Stdout, "no space left on device") {
		t.Errorf("job run on a full disk: the error does not say the disk is full:\n%s%s", r.Stdout, r.Stderr)
	}
	if r := a.CLI("intention", "create", "-deny", "faults-c", "faults-d"); r.Code == 0 {
		t.Errorf("intention create on a full disk succeeded")
	}
	if r := a.CLI("intention", "check", "faults-c", "faults-d"); r.Code != 0 {
		t.Errorf("a failed intention write changed the decision: check exit %d, %s", r.Code, r.Stdout)
	}
	// Reads, stored state and the workload are intact.
	if a.Exited() {
		t.Fatalf("the agent exited on a full disk:\n%s", lastLines(a.Log(), 30))
	}
	reads := a.CLI("job", "status", job).Code == 0
	figure(t, "fulldisk_reads_served", b2f(reads))
	if !reads {
		t.Errorf("job status on a full disk failed")
	}
	check := a.CLI("intention", "check", "faults-a", "faults-b")
	if check.Code != 1 {
		t.Errorf("stored deny intention lost on a full disk: check exit %d", check.Code)
	}
	figure(t, "fulldisk_workload_alive", b2f(alive(pid)))
	if !alive(pid) {
		t.Fatalf("the workload (pid %d) died on a full disk", pid)
	}
	jobs, _, err := a.Nomad().Jobs().List(nil)
	figure(t, "fulldisk_state_intact", b2f(err == nil && len(jobs) == 1 && check.Code == 1))
	if err != nil || len(jobs) != 1 {
		t.Errorf("jobs on a full disk = %v (err %v), want only %s: a failed registration left a half-written job", jobs, err, job)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	a.MustCLI("job", "run", big)
	a.RunningAllocs("faults-big", 1)
	a.MustCLI("intention", "create", "-deny", "faults-c", "faults-d")
}

// fill writes path until the filesystem is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for i := 0; i < 4096; i++ {
		if _, err := f.Write(buf); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return
			}
			t.Fatalf("fill: %v", err)
		}
	}
	t.Fatal("fill: the filesystem never filled up")
}

// bigJob writes a host-mode job carrying 512 KiB of meta (in 64 KiB
// values: each becomes a NOMAD_META_ variable, and the kernel caps one
// environment string at 128 KiB), so that storing it needs new pages.
func bigJob(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "big.hcl")
	var meta strings.Builder
	for i := 0; i < 8; i++ {
		fmt.Fprintf(&meta, "    blob%d = %q\n", i, strings.Repeat("x", 64<<10))
	}
	src := fmt.Sprintf(`job "faults-big" {
  datacenters = ["dc1"]
  meta {
%s  }
  group "h" {
    task "h" {
      driver = "raw_exec"
      config {
        command = "${attr.meshlet.binary}"
        args    = ["demo-app", "echo", "-listen", "127.0.0.1:0"]
      }
    }
  }
}
`, meta.String())
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

package proc

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshlet/meshlet/internal/testutil"
)

func aliveNotZombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(f) > 0 && f[0] != "Z"
}

// startGroup starts `sh -c "sleep 300 & echo $!"` as a group leader and
// returns the leader cmd (not yet waited) and the member's pid.
func startGroup(t *testing.T) (*exec.Cmd, int) {
	cmd := exec.Command("sh", "-c", "sleep 300 </dev/null >/dev/null 2>&1 & echo $!")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	m, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	return cmd, m
}

// A session's group is kept after its command was reaped while members
// remained; once they are gone, its ID can be reused by an unrelated
// process group (forced here through ns_last_pid) whose leader has exited:
// killAll must leave that group alone.
func TestKillAllSparesAReusedGroupID(t *testing.T) {
	testutil.RequireRoot(t)
	var g execGroups
	l, m := startGroup(t)
	L := l.Process.Pid
	g.add(L, false)
	_ = l.Wait()
	g.done(L) // member m still in group L: kept
	_ = syscall.Kill(m, syscall.SIGKILL)
	for i := 0; i < 250; i++ {
		if _, err := os.Stat("/proc/" + strconv.Itoa(m)); err != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(m)); err == nil {
		t.Logf("member %d still present (zombie?)", m)
	}
	time.Sleep(100 * time.Millisecond)
	// Make the next PID be L (root, host pid ns).
	var other *exec.Cmd
	var victim int
	for try := 0; try < 20; try++ {
		if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(L-1)), 0); err != nil {
			t.Skipf("ns_last_pid: %v", err)
		}
		c, v := startGroup(t)
		if c.Process.Pid == L {
			other, victim = c, v
			break
		}
		t.Logf("try %d: got pid %d, want %d", try, c.Process.Pid, L)
		_ = c.Wait()
		_ = syscall.Kill(v, syscall.SIGKILL)
	}
	if other == nil {
		t.Skip("could not reuse the PID")
	}
	t.Cleanup(func() { _ = syscall.Kill(victim, syscall.SIGKILL) })
	_ = other.Wait() // the unrelated group's leader exits; its child stays in group L
	pg, _ := syscall.Getpgid(victim)
	t.Logf("task session group %d; unrelated process %d now in pgid %d", L, victim, pg)
	g.killAll()
	time.Sleep(200 * time.Millisecond)
	if !aliveNotZombie(victim) {
		t.Fatalf("killAll killed unrelated process %d of a process group that reused the session's PID %d", victim, L)
	}
}

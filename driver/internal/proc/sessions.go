package proc

import (
	"errors"
	"sync"
	"syscall"

	"github.com/meshlet/meshlet/driver/internal/procfs"
)

// execGroups are the process groups of a task's exec sessions, killed when
// the task ends, as Nomad's are with the task's cgroup: a task without one
// (raw_exec) would otherwise leave what a session started in the
// background running after it. A group is kept after its session's
// command exited for as long as it has members; its ID (the command's
// PID) cannot be reused meanwhile, as Linux keeps a PID that is still a
// process group's ID.
type execGroups struct {
	mu     sync.Mutex
	ended  bool
	groups map[int]uint64 // group ID (the session's PID) -> its start time
}

// add records a started session's group. If the task already ended, the
// group is killed at once.
func (g *execGroups) add(pid int) {
	start, _ := procfs.StartTime(pid) // before the command is reaped
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ended {
		killGroup(pid, start)
		return
	}
	if g.groups == nil {
		g.groups = map[int]uint64{}
	}
	g.groups[pid] = start
}

// done forgets a session, once its command was reaped, unless its group
// still has members.
func (g *execGroups) done(pid int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := syscall.Kill(-pid, 0); errors.Is(err, syscall.ESRCH) {
		delete(g.groups, pid)
	}
}

// killAll marks the task ended and kills every recorded group.
func (g *execGroups) killAll() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.ended = true
	for pid, start := range g.groups {
		killGroup(pid, start)
	}
	g.groups = nil
}

// killGroup kills the process group pid of a session whose command
// started at start, unless another process now has that PID: then the
// session's group had emptied and the ID may be another's.
func killGroup(pid int, start uint64) {
	if st, err := procfs.ReadStat(pid); err == nil && st.StartTime != start {
		return
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
}

package proc

import (
	"sync"
	"syscall"

	"github.com/meshlet/meshlet/driver/internal/procfs"
)

// execGroups are a task's exec sessions, whose processes are killed when
// the task ends, as Nomad's are with the task's cgroup: a task without one
// (raw_exec) would otherwise leave what a session started in the
// background running after it. A session's processes are those in its
// process group and, for a terminal session (its own session leader),
// those in its session, job-control groups included.
//
// A group or session ID stays a session's only while one of its
// processes is alive: Linux keeps a PID in use as a group or session ID
// from being reused. So a session is killed only while its command, or
// one of the processes recorded when the command was reaped, is alive and
// still in it; otherwise the ID may be another's by now.
type execGroups struct {
	mu     sync.Mutex
	ended  bool
	groups map[int]*execSession // by the session command's PID
}

type execSession struct {
	start   uint64         // the command's start time
	tty     bool           // its own session leader (a terminal session)
	members map[int]uint64 // pid -> start time, recorded when the command was reaped
}

// add records a started session. If the task already ended, it is
// killed at once.
func (g *execGroups) add(pid int, tty bool) {
	start, _ := procfs.StartTime(pid) // before the command is reaped
	g.mu.Lock()
	defer g.mu.Unlock()
	s := &execSession{start: start, tty: tty}
	if g.ended {
		killSession(pid, s)
		return
	}
	if g.groups == nil {
		g.groups = map[int]*execSession{}
	}
	g.groups[pid] = s
}

// done records, once a session's command was reaped, the processes left
// in its group or session, or forgets the session when there are none.
func (g *execGroups) done(pid int) {
	g.mu.Lock()
	s := g.groups[pid]
	g.mu.Unlock()
	if s == nil {
		return
	}
	members := map[int]uint64{}
	// A session without a terminal has only its group: an empty group
	// needs no look at every process.
	if s.tty || syscall.Kill(-pid, 0) == nil {
		for _, st := range procfs.All() {
			if inSession(st, pid) {
				members[st.PID] = st.StartTime
			}
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(members) == 0 {
		delete(g.groups, pid)
	} else {
		s.members = members
	}
}

// killAll marks the task ended and kills every recorded session, looking
// at the host's processes once, outside the lock.
func (g *execGroups) killAll() {
	g.mu.Lock()
	g.ended = true
	groups := g.groups
	g.groups = nil
	g.mu.Unlock()
	if len(groups) == 0 {
		return
	}
	all := procfs.All()
	for pid, s := range groups {
		killSessionOf(pid, s, all)
	}
}

func inSession(st *procfs.Stat, id int) bool {
	return st.State != 'Z' && (st.PGRP == id || st.Session == id)
}

// killSession kills the processes of session id while the ID is provably
// still s's (see execGroups).
func killSession(id int, s *execSession) { killSessionOf(id, s, nil) }

// killSessionOf is killSession over the host's processes all (nil: read
// them when needed).
func killSessionOf(id int, s *execSession, all []*procfs.Stat) {
	pinned := procfs.Alive(id, s.start)
	for pid, start := range s.members {
		if pinned {
			break
		}
		st, err := procfs.ReadStat(pid)
		pinned = err == nil && st.StartTime == start && inSession(st, id)
	}
	if !pinned {
		return
	}
	_ = syscall.Kill(-id, syscall.SIGKILL)
	if all == nil {
		all = procfs.All()
	}
	for _, st := range all {
		if inSession(st, id) {
			_ = syscall.Kill(st.PID, syscall.SIGKILL)
		}
	}
}

// Package procfs reads the few /proc facts the task drivers need: a
// process's start time (to tell a live task from a recycled PID), its
// parent, CPU times and RSS, and its descendants. It holds no state and is
// safe for concurrent use.
package procfs

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ClockTicks is USER_HZ, the unit of the CPU and start times in
// /proc/<pid>/stat. It is 100 on every Linux architecture Go supports.
const ClockTicks = 100

// ErrNoProcess is returned when the PID does not exist.
var ErrNoProcess = errors.New("no such process")

// Stat is the subset of /proc/<pid>/stat drivers use.
type Stat struct {
	PID       int
	State     byte // 'R', 'S', 'Z', ...
	PPID      int
	PGRP      int
	Session   int
	UTime     uint64 // clock ticks
	STime     uint64 // clock ticks
	StartTime uint64 // clock ticks since boot
	RSSPages  int64
}

// ReadStat parses /proc/<pid>/stat.
func ReadStat(pid int) (*Stat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, errSRCH) {
			return nil, fmt.Errorf("failed to read stat of pid %d: %w", pid, ErrNoProcess)
		}
		return nil, fmt.Errorf("failed to read stat of pid %d: %w", pid, err)
	}
	return parseStat(pid, string(b))
}

func parseStat(pid int, s string) (*Stat, error) {
	// The command name is in parentheses and may itself contain spaces or
	// parentheses: fields resume after the last ')'.
	end := strings.LastIndexByte(s, ')')
	if end < 0 {
		return nil, fmt.Errorf("failed to parse stat of pid %d: no command field", pid)
	}
	f := strings.Fields(s[end+1:])
	// f[0] is field 3 (state); field N is f[N-3].
	if len(f) < 22 || len(f[0]) != 1 {
		return nil, fmt.Errorf("failed to parse stat of pid %d: %d fields", pid, len(f))
	}
	st := &Stat{PID: pid, State: f[0][0]}
	var errs []error
	atoi := func(i int) int {
		v, err := strconv.Atoi(f[i])
		errs = append(errs, err)
		return v
	}
	atou := func(i int) uint64 {
		v, err := strconv.ParseUint(f[i], 10, 64)
		errs = append(errs, err)
		return v
	}
	st.PPID = atoi(4 - 3)
	st.PGRP = atoi(5 - 3)
	st.Session = atoi(6 - 3)
	st.UTime = atou(14 - 3)
	st.STime = atou(15 - 3)
	st.StartTime = atou(22 - 3)
	rss, err := strconv.ParseInt(f[24-3], 10, 64)
	errs = append(errs, err)
	st.RSSPages = rss
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("failed to parse stat of pid %d: %w", pid, err)
	}
	return st, nil
}

// StartTime returns the process's start time in clock ticks since boot.
func StartTime(pid int) (uint64, error) {
	st, err := ReadStat(pid)
	if err != nil {
		return 0, err
	}
	return st.StartTime, nil
}

// Alive reports whether pid is a running (not zombie) process that started
// at startTime, i.e. the same process and not a recycled PID.
func Alive(pid int, startTime uint64) bool {
	if pid <= 0 {
		return false
	}
	st, err := ReadStat(pid)
	return err == nil && st.StartTime == startTime && st.State != 'Z' && st.State != 'X'
}

// Tree returns pid and all its live descendants, pid first.
func Tree(pid int) []int {
	children := map[int][]int{}
	for _, st := range All() {
		children[st.PPID] = append(children[st.PPID], st.PID)
	}
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i]]...)
	}
	return out
}

// All returns the stat of every process that could be read.
func All() []*Stat {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []*Stat
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := ReadStat(p); err == nil {
			out = append(out, st)
		}
	}
	return out
}

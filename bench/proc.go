package bench

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's CPU times (100 on
// every Linux architecture Go supports).
const clockTicks = 100

// ErrNoProcess is returned when no process matches.
var ErrNoProcess = errors.New("no matching process")

// ProcSample is a process's CPU time and resident memory at one moment.
type ProcSample struct {
	CPUSeconds float64
	// UserSeconds and SysSeconds split CPUSeconds: in the process's own
	// code and in the kernel on its behalf (system calls, faults).
	UserSeconds, SysSeconds float64
	// CtxSwitches are the context switches of its threads (voluntary:
	// it blocked; involuntary: it was preempted), summed.
	CtxSwitches int64
	RSSBytes    int64
	// AnonBytes is RssAnon: the process's private memory, without the
	// pages of its (shared, 40+ MB) executable that VmRSS also counts.
	AnonBytes int64
	// PssBytes is the proportional set size: private pages plus each
	// shared page divided by the number of processes mapping it (the
	// executable's pages are shared by every meshlet process on the node).
	PssBytes int64
	// ThreadCPU is each thread's CPU time in seconds, by thread ID.
	ThreadCPU map[int]float64
}

// busiestThreadShare is the share (0 to 1) of a process's CPU time between
// two samples that its busiest thread used; 0 when it used none.
func busiestThreadShare(before, after ProcSample) float64 {
	var total, top float64
	for tid, cpu := range after.ThreadCPU {
		d := cpu - before.ThreadCPU[tid]
		total += d
		top = max(top, d)
	}
	if total <= 0 {
		return 0
	}
	return top / total
}

// threadCPU reads the CPU time of each of pid's threads, and their
// context switches summed. A thread that ends while it is read is
// skipped.
func threadCPU(pid int) (map[int]float64, int64, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, 0, fmt.Errorf("failed to list threads: %w", err)
	}
	var switches int64
	out := make(map[int]float64, len(ents))
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := os.ReadFile(filepath.Join(dir, e.Name(), "stat"))
		if err != nil {
			continue
		}
		if cpu, err := ParseProcStat(string(st)); err == nil {
			out[tid] = cpu
		}
		if status, err := os.ReadFile(filepath.Join(dir, e.Name(), "status")); err == nil {
			switches += parseCtxSwitches(string(status))
		}
	}
	return out, switches, nil
}

// parseCtxSwitches sums a /proc/<pid>/task/<tid>/status text's voluntary
// and involuntary context switches (0 for what is missing).
func parseCtxSwitches(s string) int64 {
	var n int64
	for _, line := range strings.Split(s, "\n") {
		for _, key := range []string{"voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:"} {
			if v, ok := strings.CutPrefix(line, key); ok {
				if c, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
					n += c
				}
			}
		}
	}
	return n
}

// ParseProcStat returns utime+stime in seconds from /proc/<pid>/stat text.
func ParseProcStat(s string) (float64, error) {
	user, sys, err := parseProcStatSplit(s)
	return user + sys, err
}

// parseProcStatSplit returns utime and stime in seconds from
// /proc/<pid>/stat text.
func parseProcStatSplit(s string) (user, sys float64, err error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("failed to parse stat: no command field")
	}
	f := strings.Fields(s[i+1:])
	// Fields after the command start at field 3 (state); utime and stime
	// are fields 14 and 15.
	if len(f) < 13 {
		return 0, 0, fmt.Errorf("failed to parse stat: %d fields", len(f))
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("failed to parse stat: bad utime/stime %q %q", f[11], f[12])
	}
	return float64(ut) / clockTicks, float64(st) / clockTicks, nil
}

// ParseVmRSS returns VmRSS in bytes from /proc/<pid>/status text.
func ParseVmRSS(s string) (int64, error) { return parseStatusKB(s, "VmRSS") }

// parseStatusKB returns a "<key>: N kB" line of /proc/<pid>/status (or
// smaps_rollup) in bytes.
func parseStatusKB(s, key string) (int64, error) {
	for _, line := range strings.Split(s, "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			var kb int64
			if _, err := fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kb); err != nil {
				return 0, fmt.Errorf("failed to parse %s %q: %w", key, v, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("failed to parse status: no %s line", key)
}

// SampleProc reads a process's CPU time and RSS from /proc.
func SampleProc(pid int) (ProcSample, error) {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ProcSample{}, fmt.Errorf("failed to read process stat: %w", err)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ProcSample{}, fmt.Errorf("failed to read process status: %w", err)
	}
	user, sys, err := parseProcStatSplit(string(st))
	if err != nil {
		return ProcSample{}, err
	}
	rss, err := ParseVmRSS(string(status))
	if err != nil {
		return ProcSample{}, err
	}
	anon, err := parseStatusKB(string(status), "RssAnon")
	if err != nil {
		return ProcSample{}, err
	}
	rollup, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return ProcSample{}, fmt.Errorf("failed to read process smaps_rollup: %w", err)
	}
	pss, err := parseStatusKB(string(rollup), "Pss")
	if err != nil {
		return ProcSample{}, err
	}
	threads, switches, err := threadCPU(pid)
	if err != nil {
		return ProcSample{}, err
	}
	return ProcSample{CPUSeconds: user + sys, UserSeconds: user, SysSeconds: sys, CtxSwitches: switches,
		RSSBytes: rss, AnonBytes: anon, PssBytes: pss, ThreadCPU: threads}, nil
}

// inode returns the inode a path resolves to (for namespaces: the nsfs inode).
func inode(path string) (uint64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, fmt.Errorf("failed to stat %s: no inode", path)
	}
	return st.Ino, nil
}

// FindProcInNetns returns the PIDs of processes inside the network
// namespace bound at nsPath whose command line contains every word of
// match and none of exclude.
func FindProcInNetns(nsPath string, match, exclude []string) ([]int, error) {
	want, err := inode(nsPath)
	if err != nil {
		return nil, fmt.Errorf("failed to stat namespace: %w", err)
	}
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		if ino, err := inode(filepath.Join(d, "ns", "net")); err != nil || ino != want {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil {
			continue
		}
		if cmdlineMatches(strings.ReplaceAll(string(raw), "\x00", " "), match, exclude) {
			pids = append(pids, pid)
		}
	}
	if len(pids) == 0 {
		return nil, fmt.Errorf("%w in %s for %v", ErrNoProcess, nsPath, match)
	}
	return pids, nil
}

func cmdlineMatches(cmdline string, match, exclude []string) bool {
	for _, m := range match {
		if !strings.Contains(cmdline, m) {
			return false
		}
	}
	for _, x := range exclude {
		if strings.Contains(cmdline, x) {
			return false
		}
	}
	return true
}

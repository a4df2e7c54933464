package sidecar

import (
	"bufio"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
)

// Garbage collector defaults for the built-in proxy's process.
const (
	// DefaultGCPercent is the proxy's GOGC: its live heap is small (a few
	// MB, mostly protobuf descriptors and configuration) and its hot path
	// allocates little, so collecting at +50 % rather than +100 % costs
	// little CPU and keeps private memory down.
	DefaultGCPercent = 50
	// memLimitShare is the share of the cgroup's memory limit given to the
	// runtime as its soft limit (GOMEMLIMIT): a burst makes the collector
	// work harder before the task is OOM-killed.
	memLimitShare = 0.75
)

// RuntimeSettings are the GC settings TuneRuntime applied.
type RuntimeSettings struct {
	GCPercent int   // -1: left to GOGC
	MemLimit  int64 // 0: left to GOMEMLIMIT or no limit known
}

// TuneRuntime applies the proxy's GC defaults to this process: GOGC
// DefaultGCPercent and a soft memory limit of memLimitShare of the
// process's cgroup v2 memory.max, each only when the environment does not
// set GOGC or GOMEMLIMIT (which the runtime has applied already).
func TuneRuntime() RuntimeSettings {
	return tuneRuntime(os.Getenv, cgroupMemoryMax)
}

func tuneRuntime(getenv func(string) string, cgroupMax func() (int64, bool)) RuntimeSettings {
	s := RuntimeSettings{GCPercent: -1}
	if getenv("GOGC") == "" {
		debug.SetGCPercent(DefaultGCPercent)
		s.GCPercent = DefaultGCPercent
	}
	if getenv("GOMEMLIMIT") == "" {
		if max, ok := cgroupMax(); ok {
			s.MemLimit = int64(float64(max) * memLimitShare)
			debug.SetMemoryLimit(s.MemLimit)
		}
	}
	return s
}

// cgroupMemoryMax reads this process's cgroup v2 memory limit; false if
// there is none (or no cgroup v2).
func cgroupMemoryMax() (int64, bool) {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if path, ok := strings.CutPrefix(sc.Text(), "0::"); ok {
			b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", path, "memory.max"))
			if err != nil {
				return 0, false
			}
			return parseMemoryMax(string(b))
		}
	}
	return 0, false
}

// parseMemoryMax parses a cgroup v2 memory.max ("max" is no limit).
func parseMemoryMax(s string) (int64, bool) {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n <= 0 {
		return 0, false
	}
	return n, true
}

package bench

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
)

// executorsAnon returns the RssAnon of each task executor the agent
// (agentPID) runs: its children whose command line is `… executor -spec …`.
func executorsAnon(agentPID int) ([]float64, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []float64
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !isExecutorOf(pid, agentPID) {
			continue
		}
		s, err := SampleProc(pid)
		if err != nil {
			continue // gone meanwhile
		}
		out = append(out, float64(s.AnonBytes))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no task executor of process %d found", agentPID)
	}
	return out, nil
}

// isExecutorOf reports whether pid is a child of parent running the
// executor subcommand.
func isExecutorOf(pid, parent int) bool {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state ppid ...: comm may hold spaces, so parse after ')'.
	i := bytes.LastIndexByte(st, ')')
	if i < 0 {
		return false
	}
	f := strings.Fields(string(st[i+1:]))
	if len(f) < 2 || f[1] != strconv.Itoa(parent) {
		return false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	i = slices.Index(args, "executor")
	return i > 0 && i+1 < len(args) && args[i+1] == "-spec"
}

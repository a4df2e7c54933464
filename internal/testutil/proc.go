package testutil

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// WaitPIDFile waits up to timeout for path to hold a process ID (a task
// writes its own, or a child's) and returns it.
func WaitPIDFile(t testing.TB, timeout time.Duration, path string) int {
	t.Helper()
	var pid int
	WaitFor(t, timeout, "a process ID in "+path, func() bool {
		raw, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(raw)))
		return err == nil && pid > 0
	})
	return pid
}

// Running reports whether process pid exists and is not a zombie (a
// killed orphan stays one until init reaps it: dead for a test).
func Running(pid int) bool {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(raw)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(fields) > 0 && fields[0] != "Z" && fields[0] != "X"
}

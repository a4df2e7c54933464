package command

import (
	"os"
	"syscall"
)

// execve replaces the process with argv (it returns only on error).
func execve(path string, argv []string) error {
	return syscall.Exec(path, argv, os.Environ())
}

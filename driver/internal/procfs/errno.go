package procfs

import "syscall"

// errSRCH is what reading /proc/<pid>/stat of a process that just vanished
// may fail with.
var errSRCH error = syscall.ESRCH

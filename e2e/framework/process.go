package framework

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"
)

// Kill SIGKILLs the agent (a crash: no shutdown code runs) and waits for it
// to exit. Its tasks keep running under their executors.
func (a *Agent) Kill() {
	a.t.Helper()
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		a.t.Fatalf("failed to kill agent: %v", err)
	}
	<-a.done
}

// Interrupt stops the agent as an operator would (SIGINT) and waits for it
// to exit. Tasks keep running.
func (a *Agent) Interrupt() {
	a.t.Helper()
	_ = a.cmd.Process.Signal(os.Interrupt)
	select {
	case <-a.done:
	case <-time.After(30 * time.Second):
		a.t.Fatalf("agent did not stop 30s after SIGINT:\n%s", a.Log())
	}
}

// PID is the agent process's ID.
func (a *Agent) PID() int { return a.cmd.Process.Pid }

// Restart starts the agent again on the same config and data dir (after
// Kill or Interrupt) and waits until its node is ready.
func (a *Agent) Restart() {
	a.t.Helper()
	select {
	case <-a.done:
	default:
		a.t.Fatal("Restart of an agent that is still running")
	}
	a.logMu.Lock()
	fmt.Fprintf(a.log, "\n==== restart at %s ====\n", time.Now().Format(time.RFC3339Nano))
	a.logMu.Unlock()
	a.start(a.ConfigPath)
	a.waitReady()
}

// StartFailure starts the agent again on the same config and data dir and
// expects it to refuse to start: it returns the exit code and what the new
// process printed, with refused true. An agent still up after timeout is
// stopped (SIGINT) and refused is false.
func (a *Agent) StartFailure(timeout time.Duration) (code int, out string, refused bool) {
	a.t.Helper()
	before := len(a.Log())
	a.start(a.ConfigPath)
	select {
	case <-a.done:
		refused = true
	case <-time.After(timeout):
		_ = a.cmd.Process.Signal(os.Interrupt)
		<-a.done
	}
	return a.cmd.ProcessState.ExitCode(), a.Log()[before:], refused
}

// Exited reports whether the agent process has exited.
func (a *Agent) Exited() bool {
	select {
	case <-a.done:
		return true
	default:
		return false
	}
}

// LogSince returns what the agent printed after the first occurrence of
// marker (the whole log when marker is absent).
func (a *Agent) LogSince(marker string) string {
	l := a.Log()
	if i := strings.Index(l, marker); i >= 0 {
		return l[i:]
	}
	return l
}

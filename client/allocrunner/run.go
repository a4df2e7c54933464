package allocrunner

import (
	"context"
	"fmt"
	"time"

	"github.com/meshlet/meshlet/client/taskenv"
	"github.com/meshlet/meshlet/client/taskrunner"
	"github.com/meshlet/meshlet/structs"
)

// hookTimeout bounds each hook call: a hang guard.
const hookTimeout = 5 * time.Minute

// Run drives the allocation until every task is dead (or the runner is shut
// down). Call it once, in its own goroutine.
func (ar *AllocRunner) Run() {
	defer close(ar.waitCh)
	defer ar.publish()
	alloc := ar.Alloc()
	if alloc.DesiredStatus == structs.AllocDesiredStatusStop {
		if !ar.cfg.Restored {
			ar.markAllDead(nil, false)
			return
		}
		// The stop was recorded but the agent restarted before the tasks
		// were killed: those not running are never started, the running
		// ones are re-attached, then stopped.
		ar.markNotStarted()
		ar.Kill()
	}
	if ar.cfg.Restored && ar.allDead() {
		ar.finishRestored() // finished before the agent restarted
		return
	}
	ar.publish()
	if prev := alloc.PreviousAllocation; prev != "" && !ar.cfg.Restored && ar.cfg.PrevAlloc != nil {
		ar.cfg.PrevAlloc(ar.ctxUntilKilled(), prev)
	}
	if ar.isShutdown() {
		return // agent shutdown before the tasks started: the next agent resumes
	}
	if ar.stopped() && !ar.cfg.Restored {
		ar.markAllDead(nil, false) // killed before it started: nothing runs
		return
	}
	ran, err := ar.prerun()
	if err != nil && ar.isShutdown() {
		// The shutdown cancelled the setup: not a failure of the
		// allocation, which the next agent sets up again.
		ar.logger.Info("agent shutting down during allocation setup; left for the next agent", "error", err)
		return
	}
	if err != nil {
		ar.logger.Error("allocation setup failed; rolling back", "error", err)
		ar.mu.Lock()
		ar.setupErr = err.Error()
		ar.mu.Unlock()
		ar.markAllDead(taskrunner.SetupFailureEvent(err), true)
		ar.postrun(ran)
		return
	}
	if ar.killed() && !ar.cfg.Restored {
		// Stopped while the hooks set it up: nothing starts, as when
		// stopped before; the hooks are rolled back.
		ar.markAllDead(nil, false)
		ar.postrun(len(ar.cfg.Hooks))
		return
	}
	ar.startTaskHooks()
	ar.setTaskEnv()
	if ar.hc.NetworkRecreated {
		for _, name := range ar.TaskNames() {
			ar.TaskRunner(name).RestartRecovered("network namespace was recreated")
		}
	}
	if !ar.runTasks() {
		return // agent shutdown: leave everything running
	}
	ar.postrun(len(ar.cfg.Hooks))
}

// ctxUntilKilled is cancelled by Kill or Shutdown.
func (ar *AllocRunner) ctxUntilKilled() context.Context {
	ctx, cancel := context.WithCancel(ar.ctx)
	go func() {
		select {
		case <-ar.killCh:
		case <-ctx.Done():
		}
		cancel()
	}()
	return ctx
}

// killed reports whether Kill was called.
func (ar *AllocRunner) killed() bool {
	select {
	case <-ar.killCh:
		return true
	default:
		return false
	}
}

func (ar *AllocRunner) stopped() bool {
	select {
	case <-ar.killCh:
		return true
	case <-ar.shutdownCh:
		return true
	default:
		return false
	}
}

// prerun builds the alloc dir and runs every hook's Prerun in order. It
// returns how many hooks to roll back: those that ran, the failing one
// included.
//
// A restored allocation whose tasks were running is never rolled back
// because a step failed at an agent restart (a full disk, a socket that
// cannot be made again): killing what runs because the agent cannot write
// is worse than running degraded. The failure is logged and recorded as an
// event on every task, and the next steps still run.
func (ar *AllocRunner) prerun() (int, error) {
	if err := ar.cfg.AllocDir.Build(ar.TaskNames(), ar.taskUsers()); err != nil {
		if err = ar.degrade(fmt.Errorf("failed to build alloc dir: %w", err)); err != nil {
			return 0, err
		}
	}
	for i, h := range ar.cfg.Hooks {
		ctx, cancel := context.WithTimeout(ar.ctx, hookTimeout)
		err := h.Prerun(ctx, ar.hc)
		cancel()
		if h.Name() == "network" {
			ar.mu.Lock()
			ar.netStatus = ar.hc.NetworkStatus
			ar.mu.Unlock()
		}
		if err != nil {
			if err = ar.degrade(err); err != nil {
				// The failing hook is rolled back too: its Prerun may
				// have done part of its work (Postrun is idempotent).
				return i + 1, err
			}
		}
	}
	return len(ar.cfg.Hooks), nil
}

// degrade returns err unless the allocation is a restored one with running
// tasks; then it logs err, records it on every task and returns nil.
func (ar *AllocRunner) degrade(err error) error {
	if !ar.restoredRunning() {
		return err
	}
	ar.logger.Error("agent restart could not restore the allocation's setup; keeping its tasks running", "error", err)
	for _, name := range ar.TaskNames() {
		ar.TaskRunner(name).EmitEvent(taskrunner.RestoreDegradedEvent(err))
	}
	return nil
}

// restoredRunning: the allocation was restored and a task had a live
// driver handle (it was running when the previous agent stopped).
func (ar *AllocRunner) restoredRunning() bool {
	if !ar.cfg.Restored {
		return false
	}
	for _, ls := range ar.cfg.RestoredTasks {
		if ls != nil && ls.Handle != nil {
			return true
		}
	}
	return false
}

// taskUsers maps each task with a user to it, for the alloc dir's owners.
func (ar *AllocRunner) taskUsers() map[string]string {
	users := map[string]string{}
	for _, name := range ar.TaskNames() {
		if u := ar.TaskRunner(name).Task().User; u != "" {
			users[name] = u
		}
	}
	return users
}

// postrun runs Postrun on the first n hooks, in reverse order, then
// records in the client state that they completed (see finishRestored);
// after a failure nothing is recorded, so the next restore tries again.
func (ar *AllocRunner) postrun(n int) {
	failed := false
	for i := n - 1; i >= 0; i-- {
		h := ar.cfg.Hooks[i]
		ctx, cancel := context.WithTimeout(context.Background(), hookTimeout)
		if err := h.Postrun(ctx, ar.hc); err != nil {
			ar.logger.Error("hook postrun failed", "hook", h.Name(), "error", err)
			failed = true
		}
		cancel()
	}
	if failed || ar.cfg.State == nil {
		return
	}
	if err := ar.cfg.State.PutPostrunDone(ar.ID()); err != nil {
		ar.logger.Warn("failed to record that the allocation's postrun hooks completed; they run again after an agent restart", "error", err)
	}
}

// setTaskEnv gives every task runner its environment and namespace.
func (ar *AllocRunner) setTaskEnv() {
	alloc := ar.Alloc()
	for _, name := range ar.TaskNames() {
		tr := ar.TaskRunner(name)
		td := ar.cfg.AllocDir.TaskDir(name)
		shared, local, secrets := ar.cfg.AllocDir.SharedDir, td.LocalDir, td.SecretsDir
		if ar.isolatesFS(tr.Task().Driver) {
			shared, local, secrets = IsolatedAllocDir, IsolatedLocalDir, IsolatedSecretsDir
		}
		env := taskenv.NewBuilder(ar.cfg.Node, alloc, tr.Task()).
			SetDirs(shared, local, secrets).
			SetNetworkStatus(ar.hc.NetworkStatus).SetExtra(ar.hc.Env).Build()
		tr.SetEnv(env, ar.hc.NetNSPath)
	}
}

// Where a task of a driver that isolates its file system (the exec
// driver's chroot) sees its directories, as in Nomad: NOMAD_ALLOC_DIR,
// NOMAD_TASK_DIR and NOMAD_SECRETS_DIR, and the config interpolated with
// them, name these paths.
const (
	IsolatedAllocDir   = "/alloc"
	IsolatedLocalDir   = "/local"
	IsolatedSecretsDir = "/secrets"
)

// isolatesFS reports whether driver runs tasks in a chroot of their
// directory: its fingerprint says so with the attribute
// driver.<name>.fs_isolation = "chroot" (Nomad's FSIsolationChroot).
func (ar *AllocRunner) isolatesFS(driver string) bool {
	return ar.cfg.Node != nil && ar.cfg.Node.Attributes["driver."+driver+".fs_isolation"] == "chroot"
}

func (ar *AllocRunner) allDead() bool {
	for _, name := range ar.TaskNames() {
		if !ar.TaskRunner(name).IsDead() {
			return false
		}
	}
	return true
}

// markAllDead marks every task that never ran dead.
func (ar *AllocRunner) markAllDead(ev *structs.TaskEvent, failed bool) {
	for _, name := range ar.TaskNames() {
		var e *structs.TaskEvent
		if ev != nil {
			cp := *ev
			e = &cp
		}
		ar.TaskRunner(name).MarkDead(e, failed)
	}
}

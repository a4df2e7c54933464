package allocrunner

import (
	"github.com/meshlet/meshlet/client/taskrunner"
	"github.com/meshlet/meshlet/structs"
)

// markNotStarted marks dead, without starting them, the tasks of a
// restored allocation whose stop was recorded before the agent restarted
// and that were not running then: never started (waiting on a prestart
// task or hook, or the agent stopped first) or waiting to restart. A
// poststop task is left to run on the stop, as it would have, unless no
// task of the allocation ever started: then there is nothing to clean up
// after, as for an allocation stopped before it started.
func (ar *AllocRunner) markNotStarted() {
	started := ar.anyStarted()
	for _, name := range ar.TaskNames() {
		tr := ar.TaskRunner(name)
		if ls := ar.cfg.RestoredTasks[name]; ls != nil && ls.Handle != nil {
			continue // running: re-attached, then killed
		}
		if lc := tr.Task().Lifecycle; started && lc != nil && lc.Hook == structs.TaskLifecycleHookPoststop {
			continue
		}
		tr.MarkDead(taskrunner.NotStartedEvent(), false)
	}
}

// anyStarted reports whether a restored task of the allocation ever
// started (it has a driver handle or a start time).
func (ar *AllocRunner) anyStarted() bool {
	for _, ls := range ar.cfg.RestoredTasks {
		if ls != nil && (ls.Handle != nil || (ls.State != nil && !ls.State.StartedAt.IsZero())) {
			return true
		}
	}
	return false
}

// finishRestored completes a restored allocation whose tasks were all dead
// before the agent restarted. When its postrun hooks did not complete (the
// previous agent stopped after the last task died but before they ran, or
// one failed, or the state predates the record), they run now: otherwise
// its service registrations, which advertise a dead endpoint, its control
// plane socket and its network would stay until the allocation is garbage
// collected. Postrun hooks are idempotent, so running them again for what
// was already cleaned up is harmless.
func (ar *AllocRunner) finishRestored() {
	if ar.cfg.State != nil {
		done, err := ar.cfg.State.PostrunDone(ar.ID())
		if err != nil {
			ar.logger.Warn("failed to read whether the allocation's postrun hooks completed; running them", "error", err)
		}
		if done {
			return
		}
	}
	ar.logger.Info("restored allocation is terminal but its postrun hooks did not complete; running them")
	ar.postrun(len(ar.cfg.Hooks))
}

package allocrunner

import (
	"sync"
	"time"

	"github.com/meshlet/meshlet/client/taskrunner"
	"github.com/meshlet/meshlet/structs"
)

// phases groups an allocation's task runners by lifecycle: sidecars are
// the prestart ones with sidecar = true, poststartSidecars the poststart
// ones; prestart and poststart are the ephemeral ones.
type phases struct {
	prestart, sidecars, main, poststart, poststartSidecars, poststop []*taskrunner.TaskRunner
}

func (ar *AllocRunner) classify() phases {
	var p phases
	for _, name := range ar.TaskNames() {
		tr := ar.TaskRunner(name)
		lc := tr.Task().Lifecycle
		switch {
		case lc == nil || lc.Hook == "":
			p.main = append(p.main, tr)
		case lc.Hook == structs.TaskLifecycleHookPrestart && lc.Sidecar:
			p.sidecars = append(p.sidecars, tr)
		case lc.Hook == structs.TaskLifecycleHookPrestart:
			p.prestart = append(p.prestart, tr)
		case lc.Hook == structs.TaskLifecycleHookPoststart && lc.Sidecar:
			p.poststartSidecars = append(p.poststartSidecars, tr)
		case lc.Hook == structs.TaskLifecycleHookPoststart:
			p.poststart = append(p.poststart, tr)
		case lc.Hook == structs.TaskLifecycleHookPoststop:
			p.poststop = append(p.poststop, tr)
		default:
			p.main = append(p.main, tr)
		}
	}
	return p
}

type waitResult int

const (
	updated waitResult = iota
	killed
	shutdown
)

// waitOnce blocks until a task state changes, a kill or a shutdown.
func (ar *AllocRunner) waitOnce(honourKill bool) waitResult {
	killCh := ar.killCh
	if !honourKill {
		killCh = nil
	}
	select {
	case <-ar.updateCh:
		return updated
	case <-killCh:
		return killed
	case <-ar.shutdownCh:
		return shutdown
	}
}

func (ar *AllocRunner) waitFor(honourKill bool, cond func() bool) waitResult {
	for !cond() {
		if r := ar.waitOnce(honourKill); r != updated {
			return r
		}
	}
	return updated
}

// runTasks runs the lifecycle. It returns false on an agent shutdown (tasks
// left running), true once every task is dead.
func (ar *AllocRunner) runTasks() bool {
	p := ar.classify()
	started := map[*taskrunner.TaskRunner]bool{}
	start := func(trs ...[]*taskrunner.TaskRunner) {
		for _, list := range trs {
			for _, tr := range list {
				if !started[tr] {
					started[tr] = true
					go tr.Run()
				}
			}
		}
	}
	// Prestart: sidecars must be up and ephemeral tasks done before main.
	start(p.sidecars, p.prestart)
	r := ar.waitFor(true, func() bool { return allDead(p.prestart) && allStarted(p.sidecars) })
	if r == shutdown {
		return false
	}
	failed := firstFailed(p.prestart, p.sidecars)
	if r == killed || failed != "" {
		return ar.stopTasks(p, stopCause(failed, false))
	}
	start(p.main)
	poststart := false
	for {
		if !poststart && allStarted(p.main) {
			start(p.poststart, p.poststartSidecars)
			poststart = true
		}
		// A sidecar or poststart task that fails for good (its restarts
		// spent) fails the allocation as a main task does, as Nomad: the
		// app must not go on without its proxy.
		if failed := firstFailed(p.main, p.sidecars, p.poststart, p.poststartSidecars); failed != "" {
			return ar.stopTasks(p, stopCause(failed, false))
		}
		if leader := deadLeader(p.main); leader != "" {
			return ar.stopTasks(p, stopCause(leader, true))
		}
		// Done when only sidecars are left: an ephemeral poststart task
		// (a notifier, a smoke test) runs to its end, as Nomad's.
		if allDead(p.main) && (!poststart || allDead(p.poststart)) {
			return ar.stopTasks(p, nil)
		}
		switch ar.waitOnce(true) {
		case shutdown:
			return false
		case killed:
			return ar.stopTasks(p, nil)
		}
	}
}

// stopCause is the event recorded on tasks killed because of a sibling.
func stopCause(task string, leader bool) *structs.TaskEvent {
	switch {
	case task == "":
		return nil
	case leader:
		ev := taskrunner.NewEvent(structs.TaskLeaderDead)
		ev.DisplayMessage = "Leader Task in Group dead"
		return ev
	}
	return taskrunner.SiblingFailedEvent(task)
}

// stopTasks stops the allocation, whatever the cause (a stop, a failed
// task, a dead leader, the main tasks done), in Nomad's order: the PreKill
// hooks (services leave the catalog) and, while main tasks live, the
// group's shutdown_delay; then the leader, and once it is dead the other
// tasks but the sidecars; then the sidecars (prestart and poststart);
// then the poststop tasks run to completion. It returns false on a
// shutdown.
func (ar *AllocRunner) stopTasks(p phases, cause *structs.TaskEvent) bool {
	for _, h := range ar.cfg.Hooks {
		if pk, ok := h.(PreKillHook); ok {
			pk.PreKill(ar.ctx, ar.hc)
		}
	}
	if d := ar.groupShutdownDelay(); d > 0 && !allDead(p.main) {
		select {
		case <-time.After(d):
		case <-ar.shutdownCh:
			return false
		}
	}
	leaders, others := splitLeaders(p.main)
	ar.killAll(cause, leaders)
	ar.killAll(cause, others, p.poststart, p.prestart)
	ar.killAll(cause, p.sidecars, p.poststartSidecars)
	if ar.isShutdown() {
		return false
	}
	for _, tr := range p.poststop {
		go tr.Run()
	}
	return ar.waitFor(false, func() bool { return allDead(p.poststop) }) != shutdown
}

func (ar *AllocRunner) isShutdown() bool {
	select {
	case <-ar.shutdownCh:
		return true
	default:
		return false
	}
}

// killAll kills the given tasks concurrently and waits for them.
func (ar *AllocRunner) killAll(cause *structs.TaskEvent, lists ...[]*taskrunner.TaskRunner) {
	var wg sync.WaitGroup
	for _, list := range lists {
		for _, tr := range list {
			if tr.IsDead() {
				continue
			}
			var ev *structs.TaskEvent
			if cause != nil {
				cp := *cause
				ev = &cp
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				tr.Kill(ar.ctx, ev)
			}()
		}
	}
	wg.Wait()
}

func (ar *AllocRunner) groupShutdownDelay() time.Duration {
	alloc := ar.Alloc()
	if tg := alloc.Job.LookupTaskGroup(alloc.TaskGroup); tg != nil && tg.ShutdownDelay != nil {
		return *tg.ShutdownDelay
	}
	return 0
}

func allDead(trs []*taskrunner.TaskRunner) bool {
	for _, tr := range trs {
		if !tr.IsDead() {
			return false
		}
	}
	return true
}

// allStarted: every task is running or already dead.
func allStarted(trs []*taskrunner.TaskRunner) bool {
	for _, tr := range trs {
		if s := tr.State().State; s != structs.TaskStateRunning && s != structs.TaskStateDead {
			return false
		}
	}
	return true
}

func firstFailed(lists ...[]*taskrunner.TaskRunner) string {
	for _, trs := range lists {
		for _, tr := range trs {
			if s := tr.State(); s.State == structs.TaskStateDead && s.Failed {
				return tr.Name()
			}
		}
	}
	return ""
}

// splitLeaders separates the leader tasks from the others.
func splitLeaders(trs []*taskrunner.TaskRunner) (leaders, others []*taskrunner.TaskRunner) {
	for _, tr := range trs {
		if tr.Task().Leader {
			leaders = append(leaders, tr)
		} else {
			others = append(others, tr)
		}
	}
	return leaders, others
}

func deadLeader(trs []*taskrunner.TaskRunner) string {
	for _, tr := range trs {
		if tr.Task().Leader && tr.IsDead() {
			return tr.Name()
		}
	}
	return ""
}

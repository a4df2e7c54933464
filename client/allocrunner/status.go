package allocrunner

import (
	"time"

	"github.com/meshlet/meshlet/structs"
)

// taskStateChanged is the task runners' OnStateChange callback.
func (ar *AllocRunner) taskStateChanged(task string) {
	ar.notifyTaskHooks(task)
	select {
	case ar.updateCh <- struct{}{}:
	default:
	}
	ar.publish()
}

// startTaskHooks turns on the hooks' task state notifications (see
// TaskStateHook), after every Prerun returned, and tells them the state of
// every task (a restored task may be running already).
func (ar *AllocRunner) startTaskHooks() {
	ar.taskHookMu.Lock()
	ar.taskHooksOn = true
	ar.taskHookMu.Unlock()
	for _, name := range ar.TaskNames() {
		ar.notifyTaskHooks(name)
	}
}

// notifyTaskHooks gives the TaskStateHooks the task's current state. The
// state is read under taskHookMu, so calls reach the hooks in the order
// of the states they carry.
func (ar *AllocRunner) notifyTaskHooks(task string) {
	ar.taskHookMu.Lock()
	defer ar.taskHookMu.Unlock()
	tr := ar.TaskRunner(task)
	if !ar.taskHooksOn || tr == nil {
		return
	}
	for _, h := range ar.cfg.Hooks {
		if th, ok := h.(TaskStateHook); ok {
			th.TaskStateChanged(ar.hc, task, tr.State())
		}
	}
}

// ClientView returns a copy of the allocation with the client's view:
// ClientStatus, ClientDescription, TaskStates and NetworkStatus.
func (ar *AllocRunner) ClientView() *structs.Allocation {
	ar.mu.Lock()
	cp := *ar.alloc
	tasks := make(map[string]*structs.TaskState, len(ar.tasks))
	for name, tr := range ar.tasks {
		tasks[name] = tr.State()
	}
	setupErr, net := ar.setupErr, ar.netStatus
	ar.mu.Unlock()
	cp.TaskStates = tasks
	cp.NetworkStatus = net
	cp.ClientStatus, cp.ClientDescription = clientStatus(tasks, setupErr)
	cp.ModifyTime = time.Now().UnixNano()
	return &cp
}

// publish sends the client view to OnUpdate. Calls are serialized from
// building the view to handing it over, so OnUpdate receives the views in
// the order of the states they show: a view built before the allocation
// turned terminal can never be handed over after the terminal one (and
// then overwrite it on the servers).
func (ar *AllocRunner) publish() {
	ar.publishMu.Lock()
	defer ar.publishMu.Unlock()
	view := ar.ClientView()
	ar.mu.Lock()
	if view.ClientStatus != ar.lastStatus {
		ar.logger.Info("allocation status changed", "from", ar.lastStatus, "to", view.ClientStatus)
		ar.lastStatus = view.ClientStatus
	}
	ar.mu.Unlock()
	if ar.cfg.OnUpdate != nil {
		ar.cfg.OnUpdate(view)
	}
}

// clientStatus derives the allocation's status from its tasks, as Nomad's
// getClientStatus: failed setup or any task failed → failed (while the
// others are still being stopped, too); else any task running → running;
// any pending → pending; else complete.
func clientStatus(tasks map[string]*structs.TaskState, setupErr string) (string, string) {
	if setupErr != "" {
		return structs.AllocClientStatusFailed, setupErr
	}
	var pending, running, failed int
	for _, s := range tasks {
		switch {
		case s.State == structs.TaskStateRunning:
			running++
		case s.State == structs.TaskStatePending:
			pending++
		case s.Failed:
			failed++
		}
	}
	switch {
	case failed > 0:
		return structs.AllocClientStatusFailed, "Failed tasks"
	case running > 0:
		return structs.AllocClientStatusRunning, "Tasks are running"
	case pending > 0:
		return structs.AllocClientStatusPending, "No tasks have started"
	}
	return structs.AllocClientStatusComplete, "All tasks have completed"
}

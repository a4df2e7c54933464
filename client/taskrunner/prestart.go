package taskrunner

import (
	"context"
	"errors"
	"slices"

	"github.com/meshlet/meshlet/client/allocdir"
	"github.com/meshlet/meshlet/client/taskenv"
	"github.com/meshlet/meshlet/structs"
)

// PrestartHook is work done before the task starts, like Nomad's task
// runner prestart hooks (fetching artifacts, for one). It runs before
// every start until it reports done, which is persisted with the task's
// state: a restart or an agent restore does not run it again. An error
// counts as a failed start and the restart policy decides what follows.
type PrestartHook interface {
	Name() string
	Prestart(ctx context.Context, req *PrestartRequest) (done bool, err error)
}

// PrestartRequest is what a prestart hook gets.
type PrestartRequest struct {
	Alloc   *structs.Allocation
	Task    *structs.Task
	TaskDir allocdir.TaskDir
	// Env is the task's environment, for interpolation; nil when the
	// allocation's hooks set none.
	Env *taskenv.Env
	// Emit records a task event.
	Emit func(*structs.TaskEvent)
}

// errPrestartCancelled: a kill or shutdown interrupted the prestart hooks.
var errPrestartCancelled = errors.New("prestart interrupted")

// prestart runs the hooks not yet done, in order; it stops at the first
// error.
func (tr *TaskRunner) prestart() error {
	if len(tr.cfg.Prestart) == 0 {
		return nil
	}
	ctx, cancel := tr.killableContext()
	defer cancel()
	tr.mu.Lock()
	req := &PrestartRequest{Alloc: tr.cfg.Alloc, Task: tr.cfg.Task, TaskDir: tr.cfg.TaskDir, Env: tr.cfg.Env, Emit: tr.emit}
	tr.mu.Unlock()
	for _, h := range tr.cfg.Prestart {
		if tr.prestartDone(h.Name()) {
			continue
		}
		done, err := h.Prestart(ctx, req)
		if ctx.Err() != nil {
			return errPrestartCancelled
		}
		if err != nil {
			tr.logger.Warn("prestart hook failed", "hook", h.Name(), "error", err)
			return err
		}
		if done {
			tr.mu.Lock()
			tr.done = append(tr.done, h.Name())
			tr.mu.Unlock()
			tr.persist()
		}
	}
	return nil
}

func (tr *TaskRunner) prestartDone(name string) bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return slices.Contains(tr.done, name)
}

// killableContext is the runner's context, also cancelled by a kill: the
// hooks that run before the task starts stop at once when it is killed.
func (tr *TaskRunner) killableContext() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(tr.ctx)
	go func() {
		select {
		case <-tr.killCh:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

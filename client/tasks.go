package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/meshlet/meshlet/client/allocrunner"
	"github.com/meshlet/meshlet/client/taskrunner"
	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/driver/logging"
	"github.com/meshlet/meshlet/structs"
)

// execTimeout bounds a non-streaming exec (drivers without StreamingExecer).
const execTimeout = 5 * time.Minute

// ExecTask runs opts.Command in the task's context (namespace, env, dir):
// streamed when the driver supports it, else collected and written out.
// It returns the command's exit code.
func (c *Client) ExecTask(ctx context.Context, allocID, task string, opts *driver.ExecOptions) (int, error) {
	ar := c.runner(allocID)
	if ar == nil {
		return 0, fmt.Errorf("failed to exec in %s: %w", allocID, ErrAllocNotFound)
	}
	tr := ar.TaskRunner(task)
	if tr == nil {
		return 0, fmt.Errorf("failed to exec in %s: %q: %w (tasks: %v)", allocID, task, ErrTaskNotFound, ar.TaskNames())
	}
	id := tr.TaskID()
	if id == "" {
		return 0, fmt.Errorf("failed to exec in task %q: %w", task, ErrTaskNotRunning)
	}
	if len(opts.Command) == 0 {
		return 0, fmt.Errorf("failed to exec in task %q: empty command", task)
	}
	if se, ok := tr.Driver().(driver.StreamingExecer); ok {
		code, err := se.ExecTaskStreaming(ctx, id, opts)
		if err != nil {
			return code, fmt.Errorf("failed to exec in task %q: %w", task, err)
		}
		return code, nil
	}
	res, err := tr.Driver().ExecTask(id, opts.Command, execTimeout)
	if err != nil {
		return 0, fmt.Errorf("failed to exec in task %q: %w", task, err)
	}
	for _, o := range []struct {
		w io.Writer
		b []byte
	}{{opts.Stdout, res.Stdout}, {opts.Stderr, res.Stderr}} {
		if o.w != nil {
			if _, err := io.Copy(o.w, bytes.NewReader(o.b)); err != nil {
				return res.ExitCode, fmt.Errorf("failed to write exec output: %w", err)
			}
		}
	}
	return res.ExitCode, nil
}

// TaskLogs opens a task's log stream across rotated files; with follow it
// keeps streaming until the reader is closed or ctx ends.
func (c *Client) TaskLogs(ctx context.Context, allocID, task, stream, origin string, offset int64, follow bool) (io.ReadCloser, error) {
	ar := c.runner(allocID)
	if ar == nil {
		return nil, fmt.Errorf("failed to read logs of %s: %w", allocID, ErrAllocNotFound)
	}
	if ar.TaskRunner(task) == nil {
		return nil, fmt.Errorf("failed to read logs of %s: %q: %w (tasks: %v)", allocID, task, ErrTaskNotFound, ar.TaskNames())
	}
	rc, err := logging.NewReaderContext(ctx, c.allocDir(allocID).LogDir, task, stream, origin, offset, follow)
	if err != nil {
		return nil, fmt.Errorf("failed to read logs of task %q: %w", task, err)
	}
	return rc, nil
}

func (c *Client) runner(allocID string) *allocrunner.AllocRunner {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runners[allocID]
}

// Alloc returns the allocation this node runs with ID (or unique ID
// prefix) id, as last received from the servers.
func (c *Client) Alloc(id string) (*structs.Allocation, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var found *allocrunner.AllocRunner
	for aid, ar := range c.runners {
		if aid == id {
			return ar.Alloc(), nil
		}
		if strings.HasPrefix(aid, id) {
			if found != nil {
				return nil, fmt.Errorf("allocation prefix %q matches several allocations", id)
			}
			found = ar
		}
	}
	if found == nil || id == "" {
		return nil, fmt.Errorf("%w: %s", ErrAllocNotFound, id)
	}
	return found.Alloc(), nil
}

// RestartTask restarts a running task for check_restart, as Nomad does:
// the task runner records a "Restart Signaled" event with reason, stops
// the task with its kill_signal and kill_timeout, and applies the restart
// policy as after a failure. Task "" restarts every running task of the
// allocation but its sidecars (a group service's check naming no task).
// It returns once the tasks have exited, or when ctx ends.
func (c *Client) RestartTask(ctx context.Context, allocID, task, reason string) error {
	ar := c.runner(allocID)
	if ar == nil {
		return fmt.Errorf("failed to restart %s: %w", allocID, ErrAllocNotFound)
	}
	if task == "" {
		return restartMainTasks(ctx, ar, reason)
	}
	tr := ar.TaskRunner(task)
	if tr == nil {
		return fmt.Errorf("failed to restart %s: %q: %w (tasks: %v)", allocID, task, ErrTaskNotFound, ar.TaskNames())
	}
	return restartTask(ctx, tr, reason)
}

// TaskStarted reports when a task of the allocation last started and
// whether it is running now (check_restart's grace runs from that start).
// Task "" means the main tasks, as for RestartTask: the latest start among
// those running.
func (c *Client) TaskStarted(allocID, task string) (time.Time, bool) {
	ar := c.runner(allocID)
	if ar == nil {
		return time.Time{}, false
	}
	var latest time.Time
	running := false
	for _, name := range ar.TaskNames() {
		tr := ar.TaskRunner(name)
		lc := tr.Task().Lifecycle
		if (task != "" && name != task) || (task == "" && lc != nil && lc.Sidecar) {
			continue
		}
		if s := tr.State(); s.State == structs.TaskStateRunning {
			running = true
			if s.StartedAt.After(latest) {
				latest = s.StartedAt
			}
		}
	}
	return latest, running
}

func restartTask(ctx context.Context, tr *taskrunner.TaskRunner, reason string) error {
	if err := tr.Restart(ctx, reason); err != nil {
		if errors.Is(err, taskrunner.ErrNotRunning) {
			return fmt.Errorf("failed to restart task %q: %w", tr.Name(), ErrTaskNotRunning)
		}
		return err
	}
	return nil
}

// restartMainTasks restarts, together, the allocation's running tasks that
// are not sidecars (prestart tasks with sidecar = true, such as connect
// proxies).
func restartMainTasks(ctx context.Context, ar *allocrunner.AllocRunner, reason string) error {
	var runners []*taskrunner.TaskRunner
	for _, name := range ar.TaskNames() {
		tr := ar.TaskRunner(name)
		if lc := tr.Task().Lifecycle; (lc != nil && lc.Sidecar) || tr.TaskID() == "" {
			continue
		}
		runners = append(runners, tr)
	}
	if len(runners) == 0 {
		return fmt.Errorf("failed to restart the tasks of %s: %w", ar.ID(), ErrTaskNotRunning)
	}
	errs := make([]error, len(runners))
	var wg sync.WaitGroup
	for i, tr := range runners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = restartTask(ctx, tr, reason)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

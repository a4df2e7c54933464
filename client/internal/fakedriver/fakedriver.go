// Package fakedriver is an in-memory driver.Driver for unit tests of the
// task and alloc runners: tasks are goroutines that "exit" with a scripted
// result, when stopped, or never. It records every call. Integration tests
// use the real raw_exec driver instead.
package fakedriver

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/meshlet/meshlet/driver"
)

// Behavior scripts one start of a task.
type Behavior struct {
	// StartErr fails StartTask.
	StartErr error
	// ExitAfter makes the task exit with Exit after this long; zero means
	// it runs until stopped.
	ExitAfter time.Duration
	Exit      driver.ExitResult
	// Message and MessageDetails go on the start's handle (a driver's
	// note, shown as a Driver task event).
	Message        string
	MessageDetails map[string]string
}

// Driver is the fake.
type Driver struct {
	name string
	mu   sync.Mutex
	// Script maps a task name to its behaviours, consumed one per start;
	// the last one repeats.
	script map[string][]Behavior
	tasks  map[string]*task
	// Calls records method calls as "Start web", "Stop web", ...
	calls []string
	// RecoverErr fails RecoverTask.
	RecoverErr error
}

type task struct {
	name   string
	exitCh chan *driver.ExitResult
	done   chan struct{}
	once   sync.Once
	result *driver.ExitResult
}

// New returns a fake driver called name.
func New(name string) *Driver {
	return &Driver{name: name, script: map[string][]Behavior{}, tasks: map[string]*task{}}
}

// Script sets the behaviours of a task's successive starts.
func (d *Driver) Script(taskName string, bs ...Behavior) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.script[taskName] = bs
}

// Calls returns the recorded calls.
func (d *Driver) Calls() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.calls...)
}

// Running returns the names of tasks currently running.
func (d *Driver) Running() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for _, t := range d.tasks {
		select {
		case <-t.done:
		default:
			out = append(out, t.name)
		}
	}
	return out
}

func (d *Driver) record(s string) {
	d.mu.Lock()
	d.calls = append(d.calls, s)
	d.mu.Unlock()
}

// Name implements driver.Driver.
func (d *Driver) Name() string { return d.name }

// Fingerprint implements driver.Driver.
func (d *Driver) Fingerprint(context.Context) (*driver.Fingerprint, error) {
	return &driver.Fingerprint{Detected: true, Healthy: true,
		Attributes: map[string]string{"driver." + d.name + ".version": "fake"}}, nil
}

// StartTask implements driver.Driver.
func (d *Driver) StartTask(cfg *driver.TaskConfig) (*driver.TaskHandle, error) {
	d.mu.Lock()
	bs := d.script[cfg.Name]
	var b Behavior
	if len(bs) > 0 {
		b = bs[0]
		if len(bs) > 1 {
			d.script[cfg.Name] = bs[1:]
		}
	}
	d.calls = append(d.calls, "Start "+cfg.Name)
	if b.StartErr != nil {
		d.mu.Unlock()
		return nil, b.StartErr
	}
	t := &task{name: cfg.Name, exitCh: make(chan *driver.ExitResult, 1), done: make(chan struct{})}
	d.tasks[cfg.ID] = t
	d.mu.Unlock()
	if b.ExitAfter > 0 {
		res := b.Exit
		time.AfterFunc(b.ExitAfter, func() { t.exit(&res) })
	}
	return &driver.TaskHandle{Version: 1, Config: cfg, State: driver.TaskStateRunning, DriverState: []byte(`{}`),
		Message: b.Message, MessageDetails: b.MessageDetails}, nil
}

func (t *task) exit(res *driver.ExitResult) {
	t.once.Do(func() {
		t.result = res
		t.exitCh <- res
		close(t.done)
	})
}

// RecoverTask implements driver.Driver: the task is "still running" unless
// RecoverErr is set.
func (d *Driver) RecoverTask(h *driver.TaskHandle) error {
	d.record("Recover " + h.Config.Name)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.RecoverErr != nil {
		return d.RecoverErr
	}
	if _, ok := d.tasks[h.Config.ID]; !ok {
		d.tasks[h.Config.ID] = &task{name: h.Config.Name, exitCh: make(chan *driver.ExitResult, 1), done: make(chan struct{})}
	}
	return nil
}

func (d *Driver) get(id string) (*task, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	t, ok := d.tasks[id]
	if !ok {
		return nil, fmt.Errorf("task %s: %w", id, driver.ErrTaskNotFound)
	}
	return t, nil
}

// WaitTask implements driver.Driver.
func (d *Driver) WaitTask(ctx context.Context, id string) (<-chan *driver.ExitResult, error) {
	t, err := d.get(id)
	if err != nil {
		return nil, err
	}
	out := make(chan *driver.ExitResult, 1)
	go func() {
		select {
		case <-t.done:
			out <- t.result
		case <-ctx.Done():
			close(out)
		}
	}()
	return out, nil
}

// StopTask implements driver.Driver: the task exits with signal 15.
func (d *Driver) StopTask(id string, timeout time.Duration, signal string) error {
	t, err := d.get(id)
	if err != nil {
		return err
	}
	d.record(fmt.Sprintf("Stop %s %v %s", t.name, timeout, signal))
	t.exit(&driver.ExitResult{ExitCode: 143, Signal: 15})
	return nil
}

// DestroyTask implements driver.Driver.
func (d *Driver) DestroyTask(id string, force bool) error {
	t, err := d.get(id)
	if err != nil {
		return err
	}
	t.exit(&driver.ExitResult{Signal: 9})
	d.mu.Lock()
	delete(d.tasks, id)
	d.mu.Unlock()
	return nil
}

// InspectTask implements driver.Driver.
func (d *Driver) InspectTask(id string) (*driver.TaskStatus, error) {
	if _, err := d.get(id); err != nil {
		return nil, err
	}
	return &driver.TaskStatus{ID: id, State: driver.TaskStateRunning}, nil
}

// TaskStats implements driver.Driver.
func (d *Driver) TaskStats(context.Context, string) (*driver.TaskResourceUsage, error) {
	return nil, driver.ErrNotSupported
}

// SignalTask implements driver.Driver.
func (d *Driver) SignalTask(string, string) error { return driver.ErrNotSupported }

// ExecTask implements driver.Driver: it echoes the command.
func (d *Driver) ExecTask(id string, cmd []string, _ time.Duration) (*driver.ExecResult, error) {
	if _, err := d.get(id); err != nil {
		return nil, err
	}
	return &driver.ExecResult{Stdout: []byte(fmt.Sprint(cmd))}, nil
}

// Package driver defines meshlet's task-driver interface, modelled on Nomad's
// DriverPlugin, and the plumbing that serves it over hashicorp/go-plugin
// (gRPC) so external driver binaries load through the same interface as the
// built-in ones. Built-in drivers live in subpackages (exec, rawexec).
package driver

import (
	"context"
	"errors"
	"io"
	"time"
)

// Sentinel errors. Wrap them with %w; test with errors.Is.
var (
	// ErrTaskNotFound is returned for an unknown task ID.
	ErrTaskNotFound = errors.New("task not found")
	// ErrTaskExists is returned when starting a task ID that is already running.
	ErrTaskExists = errors.New("task already exists")
	// ErrHandleVersion is returned by RecoverTask for a handle it cannot decode.
	ErrHandleVersion = errors.New("unsupported task handle version")
	// ErrNotSupported is returned for an operation a driver does not offer.
	ErrNotSupported = errors.New("operation not supported by driver")
	// ErrUnrecoverable marks a StartTask error that starting again cannot
	// fix (an invalid task config, a config the node's driver settings
	// forbid, a driver the node does not have): the task runner fails the
	// task at once instead of applying its restart policy. Transient
	// errors (an image pull, a busy port, a daemon away) must not carry
	// it. Wrap errors with Unrecoverable.
	ErrUnrecoverable = errors.New("unrecoverable task error")
)

// Unrecoverable returns err marked with ErrUnrecoverable, its text
// unchanged (errors.Is finds both err's own sentinels and
// ErrUnrecoverable); nil stays nil.
func Unrecoverable(err error) error {
	if err == nil {
		return nil
	}
	return &unrecoverableError{err: err}
}

type unrecoverableError struct{ err error }

func (e *unrecoverableError) Error() string   { return e.err.Error() }
func (e *unrecoverableError) Unwrap() []error { return []error{e.err, ErrUnrecoverable} }

// Driver is the interface every task driver implements, in process or as a
// plugin. All methods must be safe for concurrent use.
type Driver interface {
	// Name is the driver's name as used in jobspecs ("exec", "raw_exec").
	Name() string
	// Fingerprint reports whether the driver can run on this node.
	Fingerprint(ctx context.Context) (*Fingerprint, error)
	// StartTask starts a task and returns its handle. The handle's State is
	// written last, once the task is fully started, so that RecoverTask can
	// rebuild the task from it after an agent restart. An error that
	// starting again cannot fix (an invalid config) wraps ErrUnrecoverable.
	StartTask(cfg *TaskConfig) (*TaskHandle, error)
	// RecoverTask re-attaches to a task started by an earlier agent process.
	// A task already known is not an error.
	RecoverTask(h *TaskHandle) error
	// WaitTask returns a channel that yields the task's exit once.
	WaitTask(ctx context.Context, taskID string) (<-chan *ExitResult, error)
	// StopTask sends signal (default SIGTERM), waits up to timeout, then kills.
	// Stopping a task that already exited is success.
	StopTask(taskID string, timeout time.Duration, signal string) error
	// DestroyTask releases everything the driver holds for the task; with
	// force it kills a still-running task first.
	DestroyTask(taskID string, force bool) error
	// InspectTask returns the task's current status.
	InspectTask(taskID string) (*TaskStatus, error)
	// TaskStats returns a point-in-time resource usage sample.
	TaskStats(ctx context.Context, taskID string) (*TaskResourceUsage, error)
	// SignalTask delivers a signal (by name, e.g. "SIGHUP") to the task.
	SignalTask(taskID string, signal string) error
	// ExecTask runs a command in the task's context (same namespace, env and
	// working directory) and returns its output.
	ExecTask(taskID string, cmd []string, timeout time.Duration) (*ExecResult, error)
}

// TaskConfig is everything a driver needs to start a task.
type TaskConfig struct {
	// ID is unique per task instance: "<alloc-id>/<task>/<random>".
	ID      string
	AllocID string
	Name    string // task name
	JobName string
	// Config is the task's driver config (e.g. command, args), interpolated.
	Config map[string]any
	Env    map[string]string
	User   string
	// TaskDir is the task's directory; AllocDir the shared alloc/ directory.
	TaskDir  string
	AllocDir string
	// StdoutPath and StderrPath are the base names of the task's rotated
	// log files, conventionally "<alloc>/alloc/logs/<task>.stdout": the
	// built-in drivers' executor writes "<base>.0", "<base>.1", ... (see
	// driver/logging, whose Reader serves them). Empty means
	// "<AllocDir>/logs/<Name>.stdout|stderr".
	StdoutPath string
	StderrPath string
	// NetNSPath, when set, is the network namespace the task runs in.
	NetNSPath string
	// NetworkHostname is the group network's hostname (network {
	// hostname }, interpolated) when NetNSPath is set; the docker driver
	// gives it to the allocation's pause container, as Nomad does.
	NetworkHostname string
	// NetworkDNS is the group network's dns block (nil: none); the docker
	// driver writes it into the container's /etc/resolv.conf in place of
	// its own dns options, as Nomad does.
	NetworkDNS *DNSConfig
	Resources  *Resources
	// LogMaxFiles and LogMaxFileSizeMB bound the rotated log files
	// "<StdoutPath>.0", ".1", ... (Nomad's naming). Zero means the default
	// (DefaultLogMaxFiles, DefaultLogMaxFileSizeMB).
	LogMaxFiles      int
	LogMaxFileSizeMB int
}

// DNSConfig is a group network's dns block.
type DNSConfig struct {
	Servers, Searches, Options []string
}

// Log rotation defaults, as Nomad's log block.
const (
	DefaultLogMaxFiles      = 10
	DefaultLogMaxFileSizeMB = 10
)

// StreamingExecer is implemented by drivers that can stream an exec session
// (meshlet alloc exec). Cancelling ctx kills the command.
type StreamingExecer interface {
	ExecTaskStreaming(ctx context.Context, taskID string, opts *ExecOptions) (exitCode int, err error)
}

// Sweeper is implemented by drivers whose tasks live outside the agent's
// process tree and can outlive its record of them (docker's containers,
// owned by dockerd). Sweep removes the tasks of allocations known reports
// false for and returns how many it removed; the client calls it once at
// start, after restoring its allocations.
type Sweeper interface {
	Sweep(ctx context.Context, known func(allocID string) bool) (int, error)
}

// ExecOptions describes a streamed exec session. Stdin may be nil (no
// input); Stdout and Stderr may be nil (output discarded). TTY runs the
// command on a terminal (docker, exec, raw_exec); its output then all
// goes to Stdout. Resize (may be nil) delivers the terminal's size with
// TTY: the sizes already queued when the command starts size the
// terminal before it runs, later ones resize it; drivers that do not
// resize ignore it.
type ExecOptions struct {
	Command        []string
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	TTY            bool
	Resize         <-chan TerminalSize
}

// TerminalSize is an exec session terminal's size in characters.
type TerminalSize struct {
	Height, Width int
}

// OfferSize puts sz into ch, whose only sender the caller is, dropping an
// older size nobody has read yet rather than blocking: a terminal only
// needs its latest size.
func OfferSize(ch chan TerminalSize, sz TerminalSize) {
	for {
		select {
		case ch <- sz:
			return
		default:
		}
		select {
		case <-ch:
		default:
		}
	}
}

// Resources limits a task (cgroups where the driver supports them).
type Resources struct {
	CPUShares   int64 // MHz, as Nomad
	MemoryMB    int64
	MemoryMaxMB int64
}

// TaskHandle is the versioned, persisted recovery record of a running task.
type TaskHandle struct {
	Version int
	Config  *TaskConfig
	State   string // TaskStateRunning, ...
	// DriverState is the driver's own encoded recovery payload.
	DriverState []byte
	// Message, when set by StartTask, is the driver's note on how it
	// started the task (Nomad's DriverMessage): the task runner shows it
	// as a "Driver" task event carrying MessageDetails.
	Message        string            `json:",omitempty"`
	MessageDetails map[string]string `json:",omitempty"`
}

// Task states reported by drivers.
const (
	TaskStateUnknown = "unknown"
	TaskStateRunning = "running"
	TaskStateExited  = "exited"
)

// Fingerprint is a driver's health on this node.
type Fingerprint struct {
	Detected          bool
	Healthy           bool
	HealthDescription string
	Attributes        map[string]string
}

// ExitResult is how a task ended.
type ExitResult struct {
	ExitCode  int
	Signal    int
	OOMKilled bool
	Err       error
}

// Successful reports a clean zero exit.
func (r *ExitResult) Successful() bool {
	return r.ExitCode == 0 && r.Signal == 0 && r.Err == nil
}

// TaskStatus is the result of InspectTask.
type TaskStatus struct {
	ID          string
	Name        string
	State       string
	StartedAt   time.Time
	CompletedAt time.Time
	ExitResult  *ExitResult
	PID         int
}

// TaskResourceUsage is a usage sample.
type TaskResourceUsage struct {
	Timestamp   time.Time
	CPUTotalNS  uint64
	MemoryRSS   uint64
	MemoryUsage uint64
	PIDs        []int
}

// ExecResult is the outcome of ExecTask.
type ExecResult struct {
	ExitCode int
	Stdout   []byte
	Stderr   []byte
}

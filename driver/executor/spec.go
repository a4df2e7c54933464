package executor

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/meshlet/meshlet/driver/internal/cgroups"
	"github.com/meshlet/meshlet/driver/internal/isolate"
	"github.com/meshlet/meshlet/internal/atomicfile"
)

// Spec is what the driver asks the executor to run. It travels as a 0600
// JSON file that the executor deletes once read (it holds the task's env).
type Spec struct {
	TaskID string `json:"task_id"`
	// Command is an absolute path; the driver resolved it.
	Command string            `json:"command"`
	Args    []string          `json:"args,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Dir     string            `json:"dir"`
	User    string            `json:"user,omitempty"`
	// NetNSPath, when set, is the network namespace to start the task in.
	NetNSPath string `json:"netns_path,omitempty"`
	// StdoutPath and StderrPath are rotation bases: files are "<base>.<n>".
	StdoutPath     string `json:"stdout_path"`
	StderrPath     string `json:"stderr_path"`
	LogMaxFiles    int    `json:"log_max_files"`
	LogMaxFileSize int64  `json:"log_max_file_size"` // bytes
	// Cgroup, when set, puts the task into a new cgroup with limits.
	Cgroup *CgroupSpec `json:"cgroup,omitempty"`
	// ExitFile is where the task's ExitStatus is written, atomically.
	ExitFile string `json:"exit_file"`
	// Isolation, when set, runs the task chrooted into Dir in its own
	// namespaces (driver/internal/isolate); Command is then resolved inside
	// that root and the executor must be PID 1 of a new PID namespace.
	Isolation *IsolationSpec `json:"isolation,omitempty"`
}

// IsolationSpec is how an isolated task's root and privileges are built.
type IsolationSpec struct {
	// StageCmd runs this executor binary (the driver's executor command);
	// the executor appends isolate.StageArg.
	StageCmd []string `json:"stage_cmd"`
	// AllocDir is the shared alloc directory, bound at /alloc.
	AllocDir string `json:"alloc_dir,omitempty"`
	// ReadOnly are the host paths bound read-only (chroot_env).
	ReadOnly []isolate.Bind `json:"read_only"`
	// Caps is the capability bounding set the task keeps; Added are its
	// cap_add capabilities (ambient when its user is not root).
	Caps  []string `json:"caps"`
	Added []string `json:"added,omitempty"`
	// HostPID and HostIPC: the task shares the host's PID or IPC
	// namespace. With HostPID the driver starts the executor in the host's
	// PID namespace, where it is the task's subreaper rather than its init.
	HostPID bool `json:"host_pid,omitempty"`
	HostIPC bool `json:"host_ipc,omitempty"`
}

// CgroupSpec names the task's cgroup: "<hierarchy>/<Parent>/<Name>".
type CgroupSpec struct {
	Parent string         `json:"parent"`
	Name   string         `json:"name"`
	Limits cgroups.Limits `json:"limits"`
}

// Started is the one message the executor writes to its status pipe: the
// task's identity once it runs, or why it could not start.
type Started struct {
	PID       int    `json:"pid,omitempty"`
	StartTime uint64 `json:"start_time,omitempty"` // /proc/<pid>/stat ticks
	// Cgroup is the task's group, for stats and recovery.
	Cgroup *cgroups.Group `json:"cgroup,omitempty"`
	Error  string         `json:"error,omitempty"`
}

// ExitStatus is how the task ended, as recorded in the exit file.
type ExitStatus struct {
	ExitCode  int       `json:"exit_code"`
	Signal    int       `json:"signal,omitempty"`
	OOMKilled bool      `json:"oom_killed,omitempty"`
	ExitedAt  time.Time `json:"exited_at"`
	Error     string    `json:"error,omitempty"`
}

// Validate checks the fields the executor cannot do without.
func (s *Spec) Validate() error {
	switch {
	case s.TaskID == "":
		return errors.New("invalid spec: task_id is required")
	case s.Isolation == nil && !filepath.IsAbs(s.Command):
		return fmt.Errorf("invalid spec: command %q is not an absolute path", s.Command)
	case s.Command == "":
		return errors.New("invalid spec: command is required")
	case s.Isolation != nil && (len(s.Isolation.StageCmd) == 0 || !filepath.IsAbs(s.Isolation.StageCmd[0])):
		return errors.New("invalid spec: isolation.stage_cmd must start with an absolute path")
	case s.Dir == "":
		return errors.New("invalid spec: dir is required")
	case s.StdoutPath == "" || s.StderrPath == "":
		return errors.New("invalid spec: stdout_path and stderr_path are required")
	case s.LogMaxFiles < 1 || s.LogMaxFileSize < 1:
		return errors.New("invalid spec: log_max_files and log_max_file_size must be positive")
	case s.ExitFile == "":
		return errors.New("invalid spec: exit_file is required")
	}
	return nil
}

// WriteSpec writes spec to path with mode 0600.
func WriteSpec(path string, spec *Spec) error {
	b, err := json.Marshal(spec)
	if err != nil {
		return fmt.Errorf("failed to encode executor spec: %w", err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("failed to write executor spec: %w", err)
	}
	return nil
}

// readSpec reads, validates and deletes the spec file.
func readSpec(path string) (*Spec, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("failed to read executor spec: %w", err)
	}
	_ = os.Remove(path)
	var s Spec
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("failed to decode executor spec: %w", err)
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

// ReadExitStatus reads the exit file. A missing file wraps os.ErrNotExist.
func ReadExitStatus(path string) (*ExitStatus, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("failed to read exit status: %w", err)
	}
	var st ExitStatus
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("failed to decode exit status %s: %w", path, err)
	}
	return &st, nil
}

// writeExitStatus replaces path atomically (internal/atomicfile), so a
// reader sees either no file or the whole record.
func writeExitStatus(path string, st *ExitStatus) error {
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("failed to encode exit status: %w", err)
	}
	if err := atomicfile.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("failed to write exit status: %w", err)
	}
	return nil
}

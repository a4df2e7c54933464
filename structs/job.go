package structs

import "time"

// Job types and statuses, as in Nomad.
const (
	JobTypeService  = "service"
	JobTypeBatch    = "batch"
	JobTypeSystem   = "system"   // one allocation of each group on every node that can run it
	JobTypeSysBatch = "sysbatch" // system, run to completion once per node

	JobStatusPending = "pending"
	JobStatusRunning = "running"
	JobStatusDead    = "dead"
)

// RunsToCompletion reports whether the job's tasks are done when they
// exit 0 (batch and sysbatch), not restarted.
func (j *Job) RunsToCompletion() bool {
	return j != nil && (j.Type == JobTypeBatch || j.Type == JobTypeSysBatch)
}

// IsSystem reports whether the job is placed on every eligible node
// (system and sysbatch) rather than by count.
func (j *Job) IsSystem() bool {
	return j != nil && (j.Type == JobTypeSystem || j.Type == JobTypeSysBatch)
}

// Job is a registered jobspec.
type Job struct {
	Region      string          `json:"Region,omitempty"`
	Namespace   string          `json:"Namespace,omitempty"`
	ID          string          `json:"ID"`
	Name        string          `json:"Name"`
	Type        string          `json:"Type"`
	Priority    int             `json:"Priority,omitempty"`
	Datacenters []string        `json:"Datacenters,omitempty"`
	Constraints []*Constraint   `json:"Constraints,omitempty"`
	Spreads     []*Spread       `json:"Spreads,omitempty"`
	TaskGroups  []*TaskGroup    `json:"TaskGroups"`
	Update      *UpdateStrategy `json:"Update,omitempty"`
	// Reschedule is the job-level reschedule block; Canonicalize merges
	// it into each group's ReschedulePolicy (the group's fields win).
	Reschedule     *ReschedulePolicy `json:"Reschedule,omitempty"`
	Meta           map[string]string `json:"Meta,omitempty"`
	Stop           bool              `json:"Stop"`
	Status         string            `json:"Status,omitempty"`
	Version        uint64            `json:"Version"`
	SubmitTime     int64             `json:"SubmitTime,omitempty"`
	CreateIndex    uint64            `json:"CreateIndex"`
	ModifyIndex    uint64            `json:"ModifyIndex"`
	JobModifyIndex uint64            `json:"JobModifyIndex"`
}

// LookupTaskGroup returns the group with the given name, or nil.
func (j *Job) LookupTaskGroup(name string) *TaskGroup {
	for _, tg := range j.TaskGroups {
		if tg.Name == name {
			return tg
		}
	}
	return nil
}

// TaskGroup is a set of tasks placed together in one allocation.
type TaskGroup struct {
	Name          string         `json:"Name"`
	Count         int            `json:"Count"`
	Constraints   []*Constraint  `json:"Constraints,omitempty"`
	Spreads       []*Spread      `json:"Spreads,omitempty"`
	Tasks         []*Task        `json:"Tasks"`
	RestartPolicy *RestartPolicy `json:"RestartPolicy,omitempty"`
	// ReschedulePolicy says how a failed allocation is replaced by a new
	// one (Nomad's group `reschedule` block); nil means the job type's
	// defaults.
	ReschedulePolicy *ReschedulePolicy  `json:"ReschedulePolicy,omitempty"`
	Update           *UpdateStrategy    `json:"Update,omitempty"`
	Networks         []*NetworkResource `json:"Networks,omitempty"`
	Meta             map[string]string  `json:"Meta,omitempty"`
	Services         []*Service         `json:"Services,omitempty"`
	ShutdownDelay    *time.Duration     `json:"ShutdownDelay,omitempty"`
}

// LookupTask returns the task with the given name, or nil.
func (tg *TaskGroup) LookupTask(name string) *Task {
	for _, t := range tg.Tasks {
		if t.Name == name {
			return t
		}
	}
	return nil
}

// Task is one process run by a driver.
type Task struct {
	Name          string            `json:"Name"`
	Driver        string            `json:"Driver"`
	User          string            `json:"User,omitempty"`
	Lifecycle     *TaskLifecycle    `json:"Lifecycle,omitempty"`
	Config        map[string]any    `json:"Config,omitempty"`
	Constraints   []*Constraint     `json:"Constraints,omitempty"`
	Env           map[string]string `json:"Env,omitempty"`
	Services      []*Service        `json:"Services,omitempty"`
	Resources     *Resources        `json:"Resources,omitempty"`
	RestartPolicy *RestartPolicy    `json:"RestartPolicy,omitempty"`
	Meta          map[string]string `json:"Meta,omitempty"`
	KillTimeout   *time.Duration    `json:"KillTimeout,omitempty"`
	LogConfig     *LogConfig        `json:"LogConfig,omitempty"`
	Templates     []*Template       `json:"Templates,omitempty"`
	Artifacts     []*TaskArtifact   `json:"Artifacts,omitempty"`
	Leader        bool              `json:"Leader,omitempty"`
	ShutdownDelay time.Duration     `json:"ShutdownDelay,omitempty"`
	KillSignal    string            `json:"KillSignal,omitempty"`
	// Kind marks tasks meshlet injected, e.g. "connect-proxy:<service>",
	// exactly as Nomad does for its sidecars.
	Kind string `json:"Kind,omitempty"`
}

// Lifecycle hooks.
const (
	TaskLifecycleHookPrestart  = "prestart"
	TaskLifecycleHookPoststart = "poststart"
	TaskLifecycleHookPoststop  = "poststop"
)

// TaskLifecycle says when a task runs relative to the main tasks.
type TaskLifecycle struct {
	Hook    string `json:"Hook"`
	Sidecar bool   `json:"Sidecar"`
}

// Resources requested by a task. CPU is in MHz, memory in MB.
type Resources struct {
	CPU         *int `json:"CPU,omitempty"`
	Cores       *int `json:"Cores,omitempty"`
	MemoryMB    *int `json:"MemoryMB,omitempty"`
	MemoryMaxMB *int `json:"MemoryMaxMB,omitempty"`
	DiskMB      *int `json:"DiskMB,omitempty"`
}

// Restart policy modes.
const (
	RestartPolicyModeFail  = "fail"
	RestartPolicyModeDelay = "delay"
)

// RestartPolicy says how a failed task is restarted in place.
type RestartPolicy struct {
	Interval *time.Duration `json:"Interval,omitempty"`
	Attempts *int           `json:"Attempts,omitempty"`
	Delay    *time.Duration `json:"Delay,omitempty"`
	Mode     *string        `json:"Mode,omitempty"`
}

// Reschedule delay functions, as in Nomad.
const (
	RescheduleDelayConstant    = "constant"
	RescheduleDelayExponential = "exponential"
	RescheduleDelayFibonacci   = "fibonacci"
)

// ReschedulePolicy says how failed allocations are replaced, with Nomad's
// field names and JSON shape. Service jobs default to unlimited attempts,
// exponential delay from 30 s up to 1 h.
type ReschedulePolicy struct {
	Attempts      *int           `json:"Attempts,omitempty"`
	Interval      *time.Duration `json:"Interval,omitempty"`
	Delay         *time.Duration `json:"Delay,omitempty"`
	DelayFunction *string        `json:"DelayFunction,omitempty"`
	MaxDelay      *time.Duration `json:"MaxDelay,omitempty"`
	Unlimited     *bool          `json:"Unlimited,omitempty"`
}

// LogConfig bounds a task's rotated log files.
type LogConfig struct {
	MaxFiles      *int  `json:"MaxFiles,omitempty"`
	MaxFileSizeMB *int  `json:"MaxFileSizeMB,omitempty"`
	Disabled      *bool `json:"Disabled,omitempty"`
}

// Constraint restricts placement.
type Constraint struct {
	LTarget string `json:"LTarget"`
	RTarget string `json:"RTarget"`
	Operand string `json:"Operand"`
}

// Spread asks the scheduler to spread a group's allocations over the values
// of a node attribute, as Nomad's spread block: with targets, each value
// gets its Percent of the allocations (values not listed share what the
// targets leave); without, the values get equal shares. Weight (1-100,
// default 50) is the spread's importance against the other spreads.
type Spread struct {
	Attribute    string          `json:"Attribute"`
	Weight       *int            `json:"Weight,omitempty"`
	SpreadTarget []*SpreadTarget `json:"SpreadTarget,omitempty"`
}

// SpreadTarget is the share (percent) of allocations wanted on the nodes
// whose attribute equals Value.
type SpreadTarget struct {
	Value   string `json:"Value"`
	Percent int    `json:"Percent"`
}

// UpdateStrategy is parsed and stored; meshlet replaces allocations
// all at once for now.
type UpdateStrategy struct {
	Stagger          *time.Duration `json:"Stagger,omitempty"`
	MaxParallel      *int           `json:"MaxParallel,omitempty"`
	HealthCheck      *string        `json:"HealthCheck,omitempty"`
	MinHealthyTime   *time.Duration `json:"MinHealthyTime,omitempty"`
	HealthyDeadline  *time.Duration `json:"HealthyDeadline,omitempty"`
	ProgressDeadline *time.Duration `json:"ProgressDeadline,omitempty"`
	Canary           *int           `json:"Canary,omitempty"`
	AutoRevert       *bool          `json:"AutoRevert,omitempty"`
}

// Template change modes, as in Nomad.
const (
	TemplateChangeModeRestart = "restart"
	TemplateChangeModeSignal  = "signal"
	TemplateChangeModeNoop    = "noop"
	TemplateChangeModeScript  = "script"
)

// Template is Nomad's template block, with Nomad's JSON field names: the
// client renders it into DestPath before the task starts and re-renders it
// when the data it reads changes (see package client/template).
type Template struct {
	SourcePath   *string `json:"SourcePath,omitempty"`
	DestPath     *string `json:"DestPath,omitempty"`
	EmbeddedTmpl *string `json:"EmbeddedTmpl,omitempty"`
	// ChangeMode is restart (the default), signal, noop or script
	// (rejected: meshlet runs no change scripts).
	ChangeMode   *string        `json:"ChangeMode,omitempty"`
	ChangeSignal *string        `json:"ChangeSignal,omitempty"`
	Splay        *time.Duration `json:"Splay,omitempty"`
	// Perms is the file mode in octal ("644" by default).
	Perms      *string `json:"Perms,omitempty"`
	Uid        *int    `json:"Uid,omitempty"`
	Gid        *int    `json:"Gid,omitempty"`
	LeftDelim  *string `json:"LeftDelim,omitempty"`
	RightDelim *string `json:"RightDelim,omitempty"`
	// Envvars: the rendered KEY=VALUE lines join the task's environment.
	Envvars       *bool               `json:"Envvars,omitempty"`
	Wait          *WaitConfig         `json:"Wait,omitempty"`
	ErrMissingKey *bool               `json:"ErrMissingKey,omitempty"`
	ChangeScript  *ChangeScriptConfig `json:"ChangeScript,omitempty"`
}

// WaitConfig is a template's wait block: after a change, wait at least Min
// for the data to settle, never longer than Max.
type WaitConfig struct {
	Min *time.Duration `json:"Min,omitempty"`
	Max *time.Duration `json:"Max,omitempty"`
}

// ChangeScriptConfig is kept only so that a jobspec using it is rejected
// with a clear error instead of silently ignored.
type ChangeScriptConfig struct {
	Command *string `json:"Command,omitempty"`
}

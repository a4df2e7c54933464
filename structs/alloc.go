package structs

import "time"

// Allocation desired and client statuses, as in Nomad.
const (
	AllocDesiredStatusRun  = "run"
	AllocDesiredStatusStop = "stop"

	AllocClientStatusPending  = "pending"
	AllocClientStatusRunning  = "running"
	AllocClientStatusComplete = "complete"
	AllocClientStatusFailed   = "failed"
	AllocClientStatusLost     = "lost"
)

// Allocation is one placed instance of a task group.
type Allocation struct {
	ID                 string                `json:"ID"`
	Namespace          string                `json:"Namespace"`
	EvalID             string                `json:"EvalID"`
	Name               string                `json:"Name"` // "<job>.<group>[<index>]"
	NodeID             string                `json:"NodeID"`
	NodeName           string                `json:"NodeName"`
	JobID              string                `json:"JobID"`
	Job                *Job                  `json:"Job,omitempty"`
	TaskGroup          string                `json:"TaskGroup"`
	AllocatedResources *AllocatedResources   `json:"AllocatedResources,omitempty"`
	DesiredStatus      string                `json:"DesiredStatus"`
	DesiredDescription string                `json:"DesiredDescription,omitempty"`
	ClientStatus       string                `json:"ClientStatus"`
	ClientDescription  string                `json:"ClientDescription,omitempty"`
	TaskStates         map[string]*TaskState `json:"TaskStates,omitempty"`
	NetworkStatus      *AllocNetworkStatus   `json:"NetworkStatus,omitempty"`
	PreviousAllocation string                `json:"PreviousAllocation,omitempty"`
	NextAllocation     string                `json:"NextAllocation,omitempty"`
	CreateIndex        uint64                `json:"CreateIndex"`
	ModifyIndex        uint64                `json:"ModifyIndex"`
	AllocModifyIndex   uint64                `json:"AllocModifyIndex"`
	CreateTime         int64                 `json:"CreateTime"`
	ModifyTime         int64                 `json:"ModifyTime"`
	// RescheduleTracker is the history of reschedules that led to this
	// allocation (Nomad's shape); nil for a first placement.
	RescheduleTracker *RescheduleTracker `json:"RescheduleTracker,omitempty"`
	// FollowupEvalID names the pending evaluation that will replace this
	// failed allocation once its reschedule delay passed.
	FollowupEvalID string `json:"FollowupEvalID,omitempty"`
}

// Index returns the allocation's index within its group, parsed from Name.
func (a *Allocation) Index() int {
	l, r := -1, -1
	for i := len(a.Name) - 1; i >= 0; i-- {
		switch a.Name[i] {
		case ']':
			r = i
		case '[':
			l = i
		}
		if l >= 0 {
			break
		}
	}
	if l < 0 || r <= l+1 {
		return 0
	}
	n := 0
	for _, c := range a.Name[l+1 : r] {
		if c < '0' || c > '9' {
			return 0
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// TerminalStatus reports whether the allocation will not run again.
func (a *Allocation) TerminalStatus() bool {
	switch a.ClientStatus {
	case AllocClientStatusComplete, AllocClientStatusFailed, AllocClientStatusLost:
		return true
	}
	return false
}

// NeedsReschedule reports whether the allocation failed while still meant
// to run and nothing replaced it yet (its follow-up evaluation, when
// FollowupEvalID is set, may still be pending).
func (a *Allocation) NeedsReschedule() bool {
	return a.ClientStatus == AllocClientStatusFailed && a.DesiredStatus == AllocDesiredStatusRun && a.NextAllocation == ""
}

// RescheduleTracker records the reschedules of an allocation's
// predecessors, as Nomad's.
type RescheduleTracker struct {
	Events []*RescheduleEvent `json:"Events"`
}

// RescheduleEvent is one replacement of a failed allocation.
type RescheduleEvent struct {
	// RescheduleTime is when the replacement was placed (unix nanoseconds).
	RescheduleTime int64  `json:"RescheduleTime"`
	PrevAllocID    string `json:"PrevAllocID"`
	PrevNodeID     string `json:"PrevNodeID"`
	// Delay is the reschedule delay that applied.
	Delay time.Duration `json:"Delay"`
}

// AllocatedResources records what the scheduler assigned.
type AllocatedResources struct {
	Shared AllocatedSharedResources `json:"Shared"`
}

// AllocatedSharedResources holds the group-level network and ports.
type AllocatedSharedResources struct {
	Networks []*NetworkResource `json:"Networks,omitempty"`
	Ports    []PortMapping      `json:"Ports,omitempty"`
}

// Task states.
const (
	TaskStatePending = "pending"
	TaskStateRunning = "running"
	TaskStateDead    = "dead"
)

// Task event types, as in Nomad.
const (
	TaskReceived      = "Received"
	TaskSetup         = "Task Setup"
	TaskSetupFailure  = "Setup Failure"
	TaskStarted       = "Started"
	TaskTerminated    = "Terminated"
	TaskRestarting    = "Restarting"
	TaskNotRestarting = "Not Restarting"
	TaskKilling       = "Killing"
	TaskKilled        = "Killed"
	TaskDriverFailure = "Driver Failure"
	TaskSiblingFailed = "Sibling Task Failed"
	TaskLeaderDead    = "Leader Task Dead"
	TaskRestartSignal = "Restart Signaled"
	TaskSignaling     = "Signaling"
	TaskDriverMessage = "Driver"
)

// TaskState is a task's current state with its recent events.
type TaskState struct {
	State       string       `json:"State"`
	Failed      bool         `json:"Failed"`
	Restarts    uint64       `json:"Restarts"`
	LastRestart time.Time    `json:"LastRestart"`
	StartedAt   time.Time    `json:"StartedAt"`
	FinishedAt  time.Time    `json:"FinishedAt"`
	Events      []*TaskEvent `json:"Events"`
}

// TaskEvent is one entry in a task's history.
type TaskEvent struct {
	Type           string            `json:"Type"`
	Time           int64             `json:"Time"` // unix nanoseconds
	DisplayMessage string            `json:"DisplayMessage"`
	Details        map[string]string `json:"Details,omitempty"`
	Message        string            `json:"Message,omitempty"`
	FailsTask      bool              `json:"FailsTask,omitempty"`
	RestartReason  string            `json:"RestartReason,omitempty"`
	SetupError     string            `json:"SetupError,omitempty"`
	DriverError    string            `json:"DriverError,omitempty"`
	DownloadError  string            `json:"DownloadError,omitempty"`
	ExitCode       int               `json:"ExitCode"`
	Signal         int               `json:"Signal"`
	KillTimeout    time.Duration     `json:"KillTimeout,omitempty"`
	KillError      string            `json:"KillError,omitempty"`
	StartDelay     int64             `json:"StartDelay,omitempty"`
}

package taskrunner

import (
	"fmt"
	"maps"
	"time"

	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/structs"
)

// maxEvents is how many events a TaskState keeps, as Nomad.
const maxEvents = 10

// TaskWaitingShutdownDelay is emitted before a task's shutdown_delay.
const TaskWaitingShutdownDelay = "Waiting for shutdown delay"

// TaskRestoreDegraded is emitted when an agent restart could not restore
// part of a running allocation's setup (its network record, its control
// plane socket...): the task keeps running, degraded.
const TaskRestoreDegraded = "Restore Degraded"

// RestoreDegradedEvent reports what an agent restart could not restore.
func RestoreDegradedEvent(err error) *structs.TaskEvent {
	ev := NewEvent(TaskRestoreDegraded)
	ev.SetupError = err.Error()
	ev.DisplayMessage = "Agent restart could not restore the allocation's setup; the task keeps running: " + err.Error()
	return ev
}

// NewEvent returns an event of type typ stamped now, with Nomad's display
// message for the simple types.
func NewEvent(typ string) *structs.TaskEvent {
	ev := &structs.TaskEvent{Type: typ, Time: time.Now().UnixNano()}
	switch typ {
	case structs.TaskReceived:
		ev.DisplayMessage = "Task received by client"
	case structs.TaskSetup:
		ev.DisplayMessage = "Building Task Directory"
	case structs.TaskStarted:
		ev.DisplayMessage = "Task started by client"
	case structs.TaskKilled:
		ev.DisplayMessage = "Task successfully killed"
	}
	return ev
}

func terminatedEvent(res *driver.ExitResult) *structs.TaskEvent {
	ev := NewEvent(structs.TaskTerminated)
	ev.ExitCode, ev.Signal = res.ExitCode, res.Signal
	ev.DisplayMessage = fmt.Sprintf("Exit Code: %d", res.ExitCode)
	if res.Signal != 0 {
		ev.DisplayMessage += fmt.Sprintf(", Signal: %d", res.Signal)
	}
	switch {
	case res.OOMKilled:
		ev.Message = "OOM Killed"
	case res.Err != nil:
		ev.Message = res.Err.Error()
	}
	if ev.Message != "" {
		ev.DisplayMessage += fmt.Sprintf(", Exit Message: %q", ev.Message)
	}
	return ev
}

// driverMessageEvent is a driver's note on how it started a task (Nomad's
// "Driver" event, e.g. the connect_proxy driver's sidecar runtime).
func driverMessageEvent(h *driver.TaskHandle) *structs.TaskEvent {
	ev := NewEvent(structs.TaskDriverMessage)
	ev.DisplayMessage, ev.Message = h.Message, h.Message
	ev.Details = maps.Clone(h.MessageDetails)
	return ev
}

func driverFailureEvent(err error) *structs.TaskEvent {
	ev := NewEvent(structs.TaskDriverFailure)
	ev.DriverError = err.Error()
	ev.DisplayMessage = err.Error()
	return ev
}

func restartingEvent(d Decision) *structs.TaskEvent {
	ev := NewEvent(structs.TaskRestarting)
	ev.StartDelay = int64(d.Delay)
	ev.RestartReason = d.Reason
	ev.DisplayMessage = fmt.Sprintf("Task restarting in %v", d.Delay.Round(time.Millisecond))
	if d.Reason != "" {
		ev.DisplayMessage = d.Reason + " - " + ev.DisplayMessage
	}
	return ev
}

func notRestartingEvent(d Decision) *structs.TaskEvent {
	ev := NewEvent(structs.TaskNotRestarting)
	ev.FailsTask = d.Failed
	ev.RestartReason = d.Reason
	ev.DisplayMessage = d.Reason
	return ev
}

// KillingEvent is the event a kill starts with.
func KillingEvent(timeout time.Duration) *structs.TaskEvent {
	ev := NewEvent(structs.TaskKilling)
	ev.KillTimeout = timeout
	ev.DisplayMessage = fmt.Sprintf("Sent interrupt. Waiting %v before force killing", timeout)
	return ev
}

// SiblingFailedEvent says why a task is killed or never started.
func SiblingFailedEvent(sibling string) *structs.TaskEvent {
	ev := NewEvent(structs.TaskSiblingFailed)
	ev.DisplayMessage = fmt.Sprintf("Task's sibling %q failed", sibling)
	return ev
}

// NotStartedEvent marks a task dead that is not started because its
// allocation is stopping (a stop recorded before an agent restart).
func NotStartedEvent() *structs.TaskEvent {
	ev := NewEvent(structs.TaskKilled)
	ev.DisplayMessage = "Task not started because the allocation is stopping"
	return ev
}

// SetupFailureEvent reports an allocation setup error on a task.
func SetupFailureEvent(err error) *structs.TaskEvent {
	ev := NewEvent(structs.TaskSetupFailure)
	ev.SetupError = err.Error()
	ev.FailsTask = true
	ev.DisplayMessage = err.Error()
	return ev
}

func copyState(s *structs.TaskState) *structs.TaskState {
	cp := *s
	cp.Events = make([]*structs.TaskEvent, len(s.Events))
	for i, e := range s.Events {
		ec := *e
		cp.Events[i] = &ec
	}
	return &cp
}
